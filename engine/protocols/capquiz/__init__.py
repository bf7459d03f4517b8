from .caption_prompts import CAPTION_PROMPTS as _CAPTION_PROMPTS
from .codes import *  # noqa: F401,F403

from capeval.engine.keys import (caption_group_tags as _caption_group_tags, mode_tag as _mode_tag,
                                 pack_tag as _pack_tag, protocol_tag as _protocol_tag,
                                 tagged_revision as _tagged_revision)
from capeval.engine.params import Param as _Param
from capeval.engine.protocols.base import (CONFIDENCE_PARAM as _CONFIDENCE, MODE_PARAM as _MODE,
                                   PAPER_COMPATIBLE_PARAM as _PAPER_COMPATIBLE, PROMPTS_PARAM as _PROMPTS,
                                   TEMPERATURE_PARAM as _TEMPERATURE, JudgeProtocol as _JudgeProtocol,
                                   JudgingPolicy as _JudgingPolicy, Rendered as _Rendered,
                                   caption_identity as _caption_identity, make_row as _make_row,
                                   rows_to_table as _rows_to_table)

from . import parsing as _parsing, prompts as _prompts, stand_in as _stand_in
from .codes import CapQuizVerdict as _CapQuizVerdict
from capeval.engine.protocols.capquiz.metrics import AVERAGES
from capeval.engine.protocols.capquiz.paired import paired_spec
from capeval.engine.protocols.capquiz.types import load_type_map


class CapQuizProtocol(_JudgeProtocol):
    """CapQuiz: multiple-choice questions answered from the caption -> CapP/CapR/CapF1.
    Params: mode, prompts, shuffle, type_families, average (pooled | per_video: metrics.py)."""

    name = "capquiz"
    caption_prompts = _CAPTION_PROMPTS
    version = "2"
    codes = (_CapQuizVerdict,)
    headline = ("CapF1", "CapP", "CapR")
    metric_definitions = (
        ("CapF1", "harmonic mean of CapP and CapR, in percent"),
        ("CapP", "precision: of the questions the caption answered, the share answered right, TP / (TP + FP), %"),
        ("CapR", "recall: the share of all questions the caption answered right, TP / N, %"),
    )
    breakdowns = ("task",)
    # multiple-choice items: the question, its options and the correct one (generated or from a table)
    dataset_kinds = ("synthetic", "items")
    item_columns = ("annotation", "options", "answer")
    # metrics.py: the group, run, trial and item columns, the cluster (video_id) and the code; items' category
    metric_columns = {"verdicts": ("captioner", "prompt_id", "frame_spec", "judge", "seed", "trial", "task",
                                   "item_id", "sub_index", "video_id", "verdict"),
                      "items": ("task", "item_id", "category"), "captions": ()}
    params = (_MODE, _PROMPTS, _TEMPERATURE, _CONFIDENCE, _PAPER_COMPATIBLE,
              _Param("shuffle", (bool, str), False, "shuffle the options per item and judge seed",
                     check=_prompts.as_bool),
              _Param("average", (str,), "pooled", "pooled: P and R over all questions; per_video: per-video "
                     "means", choices=("pooled", "per_video"), metrics=True),
              _Param("type_families", (dict, list, str), None, "question type -> group map (types.py)",
                     check=lambda v: _types_check(v), metrics=True))

    def item_problem(self, item):
        n = len(item.get("options") or [])
        if not 2 <= n <= len(_prompts.ALPHABET) - 1:
            return "options", f"capquiz needs 2-{len(_prompts.ALPHABET) - 1} options, got {n}"
        try:
            _prompts.correct_index(item)
        except ValueError:
            return "answer", (f"answer {item.get('answer')!r} is none of the item's options {item.get('options')} "
                              f"nor an option letter")
        return None

    def paired_spec(self, mode):
        return paired_spec(mode)

    @property
    def construction(self):
        from .construction import PIPELINE  # deferred: a benchmark extension (it runs judges and captioners)

        return PIPELINE

    def render(self, item, caption, *, seed, **opts):
        return _prompts.render(item, caption, seed=seed, **opts)

    def stand_in_answer(self, request):
        return _stand_in.stand_in(request)

    def cli_commands(self, subparsers, tools):
        from . import cli  # deferred: an extension (`capeval capquiz filter`), loaded by its hook

        cli.register(subparsers, tools)

    def parse(self, request, text):
        return _parsing.parse(request, text)

    def judging_policy(self, mode="strict", **params):
        if _prompts.check_mode(mode) == "official":
            # The paper states no retry rule: official mode takes the judge's first reply.
            return _JudgingPolicy(max_reasks=0, reask_temperature=None, mode="official")
        return _JudgingPolicy(mode="strict")

    def build_requests(self, items, captions, *, judge, judge_revision, seeds=(0,), **opts):
        """As the base class, with the pack digest and mode in every key; an item whose video has no caption in a
        (captioner, prompt, frames) group still gets a row there (no verdict, MISSING), so it counts in N, in either
        mode: the paper's N is every question (CapR = TP/N)."""
        mode = _prompts.check_mode(opts.get("mode"))
        _check_average(opts.get("average"))  # a metrics param: checked before any request is sent
        pack = _prompts.pack_for(mode, opts.get("prompts"))
        revision = _tagged_revision(judge_revision, _pack_tag(pack.digest), _mode_tag(mode))
        # the pack is resolved once here and handed to every render (prompts.render)
        table = super().build_requests(items, captions, judge=judge, judge_revision=revision, seeds=seeds,
                                       **{**opts, "pack": pack})
        extra = self._uncaptioned_rows(items, captions, judge, revision, seeds)
        return _rows_to_table(table.to_pylist() + extra) if extra else table

    def _uncaptioned_rows(self, items, captions, judge, revision, seeds) -> list[dict]:
        groups = {(c["captioner"], c["prompt_id"], c["frame_spec"]): c for c in captions.to_pylist()}
        videos = {(c["captioner"], c["prompt_id"], c["frame_spec"], c["video_id"]) for c in captions.to_pylist()}
        rows = []
        for item in items.to_pylist():
            for (cap, prompt_id, frames), _ in groups.items():
                if (cap, prompt_id, frames, item["video_id"]) in videos or (cap, prompt_id, frames,
                                                                             item["item_id"]) in videos:
                    continue
                base = {"item_id": item["item_id"], "video_id": item["video_id"],
                        **_caption_identity({"captioner": cap, "prompt_id": prompt_id, "frame_spec": frames})}
                for trial, seed in enumerate(seeds):
                    r = _Rendered(task=item["task"], step="answer",
                                  user=f"[no caption for video {item['video_id']!r}, item {item['item_id']!r}]",
                                  parse={"missing": "no caption for this video in this captioner/prompt/frames "
                                                    "group (counted in N: every question is)"})
                    group_revision = _tagged_revision(revision, _protocol_tag(self.name, self.version),
                                                      *_caption_group_tags(cap, prompt_id, frames))
                    rows.append(_make_row(r, base, protocol=self.name, judge=judge, judge_revision=group_revision,
                                          seed=int(seed), trial=trial))
        return rows


PROTOCOL = CapQuizProtocol()


def _types_check(value) -> None:
    """A `type_families` mapping or JSON text is read here; a file path is read by the run (relative to its
    folder)."""
    if not isinstance(value, str) or value.strip()[:1] in "{[":
        load_type_map(value)


def _check_average(average) -> None:
    if average is not None and average not in AVERAGES:
        raise ValueError(f"capquiz: param average must be one of {list(AVERAGES)}, got {average!r}")
