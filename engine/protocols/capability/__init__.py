from .codes import *  # noqa: F401,F403

from engine.protocols.base import JudgeProtocol as _JudgeProtocol
from engine.registry import register_protocol as _register_protocol

from . import parsing as _parsing, prompts as _prompts
from .codes import CapabilityVerdict as _CapabilityVerdict


class CapabilityProtocol(_JudgeProtocol):
    name = "capability"
    version = "1"
    codes = (_CapabilityVerdict,)

    def render(self, item, caption, *, seed, **opts):
        return _prompts.render(item, caption, seed=seed, **opts)

    def parse(self, request, text):
        return _parsing.parse(request, text)


PROTOCOL = _register_protocol("capability")(CapabilityProtocol())
