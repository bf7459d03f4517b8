from .caption_prompts import CAPTION_PROMPTS as _CAPTION_PROMPTS
from .codes import *  # noqa: F401,F403

from capeval.engine.keys import pack_tag as _pack_tag, tagged_revision as _tagged_revision
from capeval.engine.params import Param as _Param
from capeval.engine.protocols.base import (CONFIDENCE_PARAM as _CONFIDENCE, MODE_PARAM as _MODE, PROMPTS_PARAM as _PROMPTS,
                                   JudgeProtocol as _JudgeProtocol, JudgingPolicy as _JudgingPolicy)

from . import parsing as _parsing, prompts as _prompts, release as _release, stand_in as _stand_in
from .codes import CapabilityVerdict as _CapabilityVerdict
from .official import OFFICIAL_MAX_ALLOW_MISSING, OFFICIAL_MAX_RETRY_TIMES
from capeval.engine.protocols.capability import metrics
from capeval.engine.protocols.capability.paired import paired_spec


class CapabilityProtocol(_JudgeProtocol):
    """CAPability: 13 tasks judged from a prompt pack. Params: mode ("strict" | "official"), prompts (pack path),
    strict_match (official mode: compare the copied annotation field, off as in the official run), structured
    (strict mode: send a JSON schema; default on unless the judge lacks schema support), max_retry_times / max_allow_missing (official retry rounds)."""

    name = "capability"
    caption_prompts = _CAPTION_PROMPTS
    version = "2"
    codes = (_CapabilityVerdict,)
    headline = ("f1", "precision", "recall", "hit_rate")
    metric_definitions = (
        ("f1", "harmonic mean of precision and recall, in percent"),
        ("precision", "of the annotated points the caption mentions, the share it states correctly, %"),
        ("recall", "the share of all annotated points the caption states correctly, %"),
        ("hit_rate", "the share of annotated points the caption mentions at all, right or wrong, %"),
    )
    tasks = TASKS  # noqa: F405 -- from .codes
    breakdowns = ("task",)
    dataset_kinds = ("capability", "items")  # the release layout, or a table of its annotations
    item_columns = ("annotation",)
    compare_average_over = "task"
    compare_default_mode = "official"
    params = (_MODE, _PROMPTS, _CONFIDENCE,
              _Param("structured", (bool, str, type(None)), None, "strict mode: send a JSON schema (default: unless "
                     "the judge is known to lack it; \"auto\")", check=lambda v: _prompts.use_structured(v, "strict")),
              _Param("strict_match", (bool, str), False, "strict mode: exact label matching", check=_prompts.flag),
              _Param("max_retry_times", (int,), OFFICIAL_MAX_RETRY_TIMES, "official mode: re-asks per item", low=0),
              _Param("max_allow_missing", (int,), OFFICIAL_MAX_ALLOW_MISSING,
                     "official mode: stop re-asking once at most this many items are unanswered", low=0))

    def paired_spec(self, mode):
        return paired_spec(mode)

    @property
    def construction(self):
        from .construction import PIPELINE  # deferred: a benchmark extension (it runs judges and captioners)

        return PIPELINE

    def build_requests(self, items, captions, *, judge, judge_revision, seeds=(0,), mode="strict", prompts=None,
                       **opts):
        pack = _prompts.pack_for(mode, prompts)
        # The pack's content hash is part of the revision, hence of every request key: two packs never share
        # cached judgments. The mode is not: the same prompt and sampling give the same answer in either mode.
        revision = _tagged_revision(judge_revision, _pack_tag(pack.digest))
        return super().build_requests(items, captions, judge=judge, judge_revision=revision, seeds=seeds,
                                      mode=_prompts.check_mode(mode), pack=pack, judge_name=judge, **opts)

    def render(self, item, caption, *, seed, pack=None, mode="strict", prompts=None, judge_name="", **opts):
        if pack is None:
            pack = _prompts.pack_for(mode, prompts)
        return _prompts.render(item, caption, pack=pack, mode=mode, judge=judge_name, **opts)

    def stand_in_answer(self, request):
        return _stand_in.stand_in(request)

    def cli_commands(self, subparsers, tools):
        from . import cli  # deferred: an extension (`capeval capability ...`), loaded by its hook

        cli.register(subparsers, tools)

    def report_sections(self, run_path):
        from . import report  # deferred: an extension (the report's KT section), loaded by its hook

        section = report.kt_section(run_path)
        return [] if section is None else [section]

    def parse(self, request, text):
        return _parsing.parse(request, text)

    def judging_policy(self, mode: str = "strict", **params) -> _JudgingPolicy:
        if _prompts.check_mode(mode) == "official":
            return _JudgingPolicy(
                max_reasks=int(params.get("max_retry_times", OFFICIAL_MAX_RETRY_TIMES)), reask_temperature=None,
                stop_when_failed_at_most=int(params.get("max_allow_missing", OFFICIAL_MAX_ALLOW_MISSING)),
                mode="official")
        return _JudgingPolicy(mode="strict")

    #: its metrics take the caption groups from the verdicts (metrics.py with_groups); CAPTIONS have no verdict column
    metrics_read_captions = False

    def release_dataset_kind(self, path):
        """The release's annotations (the folder of task files, or one of them) are read as the `capability` kind;
        another benchmark's folder is not claimed (its own protocol may claim it)."""
        return "capability" if _release.is_release_file(path) else None

    def read_captions(self, path, items, rules):
        if path.is_dir():  # a captions/<model>/ folder: one <task>.jsonl per task
            return _release.load_captions(path, items)
        captions = super().read_captions(path, items, rules)
        if set(items.column("benchmark").to_pylist()) == {"capability"}:
            captions = _release.label_released_captions(captions, items)
        return captions

    released_verdicts_folder = "released judgments/<model>/ folder"

    def released_verdicts_problem(self, path):
        return _release.judgments_folder_problem(path)

    def released_verdicts(self, path, items, flag):
        return _release.released_verdicts(path, items, flag)

    def compute_metrics(self, verdicts, **kwargs):
        allowed = {"items", "captions", "n_resamples", "seed", "mode", "confidence"}
        kwargs = {k: v for k, v in kwargs.items() if k in allowed}  # build-only params (prompts, ...) are not
        kwargs["mode"] = _prompts.check_mode(kwargs.get("mode"))  # the run's mode; strict unless it says official
        return metrics.compute_metrics(verdicts, **kwargs)


PROTOCOL = CapabilityProtocol()
