from .codes import *  # noqa: F401,F403

from engine.protocols.base import JudgeProtocol as _JudgeProtocol
from engine.registry import register_protocol as _register_protocol

from . import parsing as _parsing, prompts as _prompts
from .codes import CapQuizVerdict as _CapQuizVerdict


class CapQuizProtocol(_JudgeProtocol):
    name = "capquiz"
    version = "1"
    codes = (_CapQuizVerdict,)

    def render(self, item, caption, *, seed, **opts):
        return _prompts.render(item, caption, seed=seed, **opts)

    def parse(self, request, text):
        return _parsing.parse(request, text)


PROTOCOL = _register_protocol("capquiz")(CapQuizProtocol())
