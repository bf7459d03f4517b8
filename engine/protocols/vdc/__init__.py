"""VDC (AuroraCap's Video Detailed Captions, VDCscore): answer each of a video's questions from its caption, then
judge the answer against the reference (yes/no and a 0-5 score), per caption kind (short, detailed, background,
main_object, camera).

Two judge steps per QA item, as the official `post_eval/process_vdc_result.py`: "answer" (an intermediate step: its
reply is the prediction) and "score" (built by `next_requests`). A caption is judged on the questions of the kinds
its prompt id names, or of every kind when it names none (kinds.py). Official mode reproduces the script (prompts
from its pack, sampling as sent, no re-ask, its literal parse and per-video rules: parsing.py, metrics.py, which
also reports lmms-eval's port's reading of the same replies); strict mode is capeval's own (fenced data, JSON
verdicts, re-asks, every video counted, intervals by video)."""

from .caption_prompts import CAPTION_PROMPTS as _CAPTION_PROMPTS
from .codes import *  # noqa: F401,F403

import json as _json

from capeval.engine.inputs import item_location as _item_location
from capeval.engine.keys import tagged_revision as _tagged_revision
from capeval.engine.protocols.base import (CONFIDENCE_PARAM as _CONFIDENCE, MODE_PARAM as _MODE,
                                           PROMPTS_PARAM as _PROMPTS, TEMPERATURE_PARAM as _TEMPERATURE,
                                           JudgeProtocol as _JudgeProtocol, JudgingPolicy as _JudgingPolicy,
                                           RequestContext as _RequestContext,
                                           keys_per_pair_when_sampled as _keys_per_pair, rows_to_table as _rows_to_table)
from capeval.engine.schemas import ParseStatus as _ParseStatus

from . import parsing as _parsing, prompts as _prompts, release as _release, stand_in as _stand_in
from .codes import VDCVerdict as _VDCVerdict
from .kinds import KINDS as _KINDS
from .paired import paired_spec as _paired_spec


class VDCProtocol(_JudgeProtocol):
    """VDC: answer each question from the caption, then judge yes/no and 0-5 -> per-kind accuracy and score,
    VDCscore. A caption whose prompt id names a kind (e.g. vdc_detailed) is judged on that kind's questions only,
    one naming none on all five kinds. Params: mode, prompts, temperature, confidence."""

    name = "vdc"
    version = "1"
    codes = (_VDCVerdict,)
    caption_prompts = _CAPTION_PROMPTS
    headline = ("VDCscore", "Acc", "Score")
    metric_definitions = (
        ("VDCscore", "the mean of the five caption kinds' accuracies, % (derived: the README figure's number, which "
                     "no official code computes)"),
        ("Acc", "accuracy of one kind: per video, the share of its questions judged 'yes'; averaged over videos, %"),
        ("Score", "score of one kind: per video, the mean 0-5 judge score of its questions; averaged over videos "
                  "(over the five kinds on the overall row)"),
    )
    dataset_kinds = ("vdc", "vdc_synthetic", "items")  # the VDC question files, synthetic ones, or a table of QA items
    item_columns = ("annotation", "answer")  # the question and its reference answer
    tasks = _KINDS
    intermediate_steps = ("answer",)
    compare_average_over = "task"  # per-kind Acc, then their mean (VDCscore over the five kinds)
    params = (_MODE, _PROMPTS, _TEMPERATURE, _CONFIDENCE)

    def paired_spec(self, mode):
        return _paired_spec(mode)

    def columns_problem(self, items, source=None):
        """Every item needs a question and a reference answer, but an EMPTY one is a text like any other: the release
        has three pairs whose question and answer are both empty (short.jsonl lines 1026-1027, detailed.jsonl line
        1027), and the official script sends them as it sends every pair. Only a missing (null) column is refused."""
        ids = items.column("item_id").to_pylist()
        for column in self.item_columns:
            values = items.column(column).to_pylist() if column in items.column_names else [None] * len(ids)
            missing = [i for i, v in enumerate(values) if v is None]
            if missing:
                first = items.slice(missing[0], 1).to_pylist()[0]
                return (f"it needs `{column}` in every item (an empty text is accepted); {len(missing)} of "
                        f"{len(ids)} items have none (e.g. {ids[missing[0]]!r}); the first: "
                        f"{_item_location(source, first, column)}")
        return None

    def render(self, item, caption, *, seed, **opts):
        return _prompts.render(item, caption, seed=seed, **opts)

    def build_requests(self, items, captions, *, judge, judge_revision, seeds=(0,), **opts):
        # The pack's digest and the mode enter every request key (also of the score step, see next_requests).
        mode = _prompts.check_mode(opts.get("mode"))
        pack = _prompts.pack_for(mode, opts.get("prompts"))
        revision = _tagged_revision(judge_revision, *_prompts.revision_tags(pack, mode))
        table = super().build_requests(items, captions, judge=judge, judge_revision=revision, seeds=seeds, **opts)
        return _keys_per_pair(table, "vdc-pair")

    def caption_file_rules(self, mode):
        if _prompts.check_mode(mode) == "official":
            # the official script formats an empty caption into the answer prompt like any other (the video is
            # judged, and then usually dropped by its zero filter)
            return {"empty_text": True}
        return {}

    def release_dataset_kind(self, path):
        """VDC's question files (`<kind>.jsonl` of {video_id: [QA pairs]} lines, or a folder of them) are read as
        the `vdc` kind; an items table that happens to be named like a kind is not."""
        files = _release.kind_files(path) if path.is_dir() else [path] if _release.kind_of_file(path) else []
        return "vdc" if files and all(_is_qa_file(f) for f in files) else None

    def stand_in_answer(self, request):
        return _stand_in.stand_in(request)

    def parse(self, request, text):
        return _parsing.parse(request, text)

    def judging_policy(self, mode="strict", **params):
        if _prompts.check_mode(mode) == "official":
            # The official script never asks again: a reply it cannot read skips the video (metrics.py).
            return _JudgingPolicy(max_reasks=0, reask_temperature=None, mode="official")
        return _JudgingPolicy(mode="strict")

    def next_requests(self, requests, verdicts, *, judge, judge_revision):
        rows = requests.to_pylist()
        settings = next((_RequestContext.decode(r["context"]).parse.get("settings") for r in rows
                         if r["step"] == "answer"), None) or {"mode": "strict", "prompts": None}
        pack = _prompts.pack_for(settings.get("mode"), settings.get("prompts"))
        revision = _tagged_revision(judge_revision, *_prompts.revision_tags(pack, settings.get("mode")))

        def score_step(req, v, ctx):
            p = ctx.parse
            ok = v["parse_status"] in (_ParseStatus.OK, _ParseStatus.REPAIRED)
            answer = _json.loads(v["detail"])["answer"] if ok else ""
            r = _prompts.render_score(req["task"], p.get("question", ""), p.get("reference", ""), answer,
                                      p.get("settings"))
            if not ok:  # keep a score row for the item: no verdict, with the answer step's status
                r.parse = {**r.parse, "missing": f"answer step: {v['error'] or 'no answer'}",
                           "upstream_status": int(v["parse_status"])}
                r.user += f"\n[upstream {req['request_key']}]"  # distinct key per failed chain
            return [r]

        return _keys_per_pair(_rows_to_table(self._next_rows(requests, verdicts, "answer", judge, revision,
                                                            score_step)), "vdc-pair")


def _is_qa_file(path) -> bool:
    """Whether the first line of `path` is one VDC video's QA list: {video_id: [{"question": ...}, ...]}."""
    try:
        with open(path, encoding="utf-8") as f:
            first = next((line for line in f if line.strip()), "")
        value = _json.loads(first)
    except (OSError, UnicodeDecodeError, ValueError):
        return False
    if not isinstance(value, dict) or len(value) != 1:
        return False
    pairs = next(iter(value.values()))
    return isinstance(pairs, list) and all(isinstance(p, dict) and "question" in p for p in pairs)



PROTOCOL = VDCProtocol()
