from .codes import *  # noqa: F401,F403

from engine.protocols.base import JudgeProtocol as _JudgeProtocol
from engine.registry import register_protocol as _register_protocol

from . import parsing as _parsing, prompts as _prompts
from .codes import VCInspectorVerdict as _VCInspectorVerdict


class VCInspectorProtocol(_JudgeProtocol):
    name = "vcinspector"
    version = "1"
    codes = (_VCInspectorVerdict,)

    def build_requests(self, items, captions, *, judge, judge_revision, seeds=(0,), frames=None, **opts):
        """`frames`: an engine.schemas.FRAMES table (or None: every row is MISSING, nothing is sent)."""
        return super().build_requests(items, captions, judge=judge, judge_revision=judge_revision, seeds=seeds,
                                      frames_by_key=_prompts.frames_index(frames), **opts)

    def render(self, item, caption, *, seed, **opts):
        return _prompts.render(item, caption, seed=seed, **opts)

    def parse(self, request, text):
        return _parsing.parse(request, text)


PROTOCOL = _register_protocol("vcinspector")(VCInspectorProtocol())
