from .codes import *  # noqa: F401,F403

from capeval.engine.keys import mode_tag as _mode_tag, pack_tag as _pack_tag, tagged_revision as _tagged_revision
from capeval.engine.params import Param as _Param
from capeval.engine.protocols.base import (CONFIDENCE_PARAM as _CONFIDENCE, MODE_PARAM as _MODE,
                                   PAPER_COMPATIBLE_PARAM as _PAPER_COMPATIBLE, PROMPTS_PARAM as _PROMPTS,
                                   JudgeProtocol as _JudgeProtocol, JudgingPolicy as _JudgingPolicy)

from . import parsing as _parsing, prompts as _prompts, stand_in as _stand_in
from .codes import VCInspectorVerdict as _VCInspectorVerdict
from capeval.engine.protocols.vcinspector.paired import paired_spec


class VCInspectorProtocol(_JudgeProtocol):
    """VC-Inspector: frames + caption -> 1-5. Params: mode, prompts, judge_frames (prompts.py)."""

    name = "vcinspector"
    version = "2"
    codes = (_VCInspectorVerdict,)
    headline = ("mean_score",)
    verdict_score_offset = 1  # code = score - 1 (codes.py)
    metric_definitions = (
        ("mean_score", "the judge's mean quality score of the caption given the video, from 1 (worst) to 5 (best)"),
    )
    judge_frames = _prompts.OFFICIAL_FRAMES  # the judge sees frames; this spec unless params.judge_frames says
    # reference-free: any kind (a folder of videos, VATEX-EVAL, ...) whose videos have media paths, which
    # JudgeProtocol.dataset_problem requires because judge_frames is set
    dataset_kinds = None
    params = (_MODE, _PROMPTS, _CONFIDENCE, _PAPER_COMPATIBLE,
              _Param("judge_frames", (str, int), None, "frame spec the judge sees (official default linspace:32; "
                     "strict: the captioner's)"))

    def paired_spec(self, mode):
        return paired_spec(mode)

    @property
    def construction(self):
        from .construction import PIPELINE  # deferred: a benchmark extension (it runs judges and captioners)

        return PIPELINE

    def build_requests(self, items, captions, *, judge, judge_revision, seeds=(0,), frames=None, mode="strict",
                       prompts=None, **opts):
        """`frames`: an capeval.engine.schemas.FRAMES table (or None: every row is MISSING, nothing is sent)."""
        pack = _prompts.pack_for(mode, prompts)
        # the pack's content enters every request key through the revision
        revision = _tagged_revision(judge_revision, _pack_tag(pack.digest), _mode_tag(mode))
        return super().build_requests(items, captions, judge=judge, judge_revision=revision, seeds=seeds,
                                      frames_by_key=_prompts.frames_index(frames), pack=pack, mode=mode, **opts)

    def render(self, item, caption, *, seed, pack=None, mode="strict", prompts=None, **opts):
        pack = pack or _prompts.pack_for(mode, prompts)
        return _prompts.render(item, caption, seed=seed, pack=pack, mode=mode, **opts)

    def judging_policy(self, mode: str = "strict", **params) -> _JudgingPolicy:
        if mode == "official":  # the official inference script generates once and has no parser to retry on
            return _JudgingPolicy(max_reasks=0, reask_temperature=None, mode="official")
        return _JudgingPolicy(mode=mode)

    def stand_in_answer(self, request):
        return _stand_in.stand_in(request)

    def parse(self, request, text):
        return _parsing.parse(request, text)


PROTOCOL = VCInspectorProtocol()
