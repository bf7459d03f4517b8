from .caption_prompts import CAPTION_PROMPTS as _CAPTION_PROMPTS
from .codes import *  # noqa: F401,F403

import json as _json

from capeval.engine.keys import tagged_revision as _tagged_revision
from capeval.engine.params import Param as _Param
from capeval.engine.protocols.base import (CONFIDENCE_PARAM as _CONFIDENCE, MODE_PARAM as _MODE,
                                   PAPER_COMPATIBLE_PARAM as _PAPER_COMPATIBLE, PROMPTS_PARAM as _PROMPTS,
                                   TEMPERATURE_PARAM as _TEMPERATURE, JudgeProtocol as _JudgeProtocol,
                                   JudgingPolicy as _JudgingPolicy, RequestContext as _RequestContext,
                                   keys_per_pair_when_sampled as _keys_per_pair,
                                   rows_to_table as _rows_to_table)
from capeval.engine.schemas import ParseStatus as _ParseStatus

from . import parsing as _parsing, prompts as _prompts, stand_in as _stand_in
from .codes import VidCapBenchVerdict as _VidCapBenchVerdict
from capeval.engine.protocols.vidcapbench.paired import paired_spec


class VidCapBenchProtocol(_JudgeProtocol):
    """VidCapBench: answer from the caption, then grade 2/1/0/-1 -> Acc/Pre/Cov/Con.
    Params: mode, prompts, temperature, con_tokens."""

    name = "vidcapbench"
    caption_prompts = _CAPTION_PROMPTS
    version = "2"
    codes = (_VidCapBenchVerdict,)
    headline = ("Acc", "Pre", "Cov", "Con")
    metric_definitions = (
        ("Acc", "accuracy: the share of questions whose answer from the caption is fully right (A), %"),
        ("Pre", "precision: of the answered questions, the share right or partly right, (A + B) / (A + B + D), %"),
        ("Cov", "coverage: the share of questions the caption says anything about, (A + B + D) / all, %"),
        ("Con", "conciseness: 100 x Acc / mean caption length in tokens (higher: more accuracy per token; not a %)"),
    )
    breakdowns = ("dimension",)
    dataset_kinds = ("vidcapbench", "items")  # the QA file, or a table of QA items
    item_columns = ("annotation", "answer")  # the question and its reference answer
    params = (_MODE, _PROMPTS, _TEMPERATURE, _CONFIDENCE, _PAPER_COMPATIBLE,
              _Param("con_tokens", (str,), None, "caption column counted for Con (default: the paper's token count)",
                     metrics=True))

    def paired_spec(self, mode):
        return paired_spec(mode)
    intermediate_steps = ("answer",)

    def render(self, item, caption, *, seed, **opts):
        return _prompts.render(item, caption, seed=seed, **opts)

    def build_requests(self, items, captions, *, judge, judge_revision, seeds=(0,), **opts):
        # The pack's digest and the mode enter every request key (also of the score step, see next_requests).
        mode = _prompts.check_mode(opts.get("mode"))
        pack = _prompts.pack_for(mode, opts.get("prompts"))
        revision = _tagged_revision(judge_revision, *_prompts.revision_tags(pack, mode))
        table = super().build_requests(items, captions, judge=judge, judge_revision=revision, seeds=seeds, **opts)
        return _keys_per_pair(table, "vidcapbench-pair")

    def caption_file_rules(self, mode):
        if _prompts.check_mode(mode) == "official":
            # eval.py judges every caption line against the QA lines of its video_dir (46-93) and averages the
            # token counts over all lines (139-151): a repeated line is judged (and counted) twice, an empty
            # caption is formatted into the prompts like any other.
            return {"every_line": True, "empty_text": True}
        return {}

    def stand_in_answer(self, request):
        return _stand_in.stand_in(request)

    def parse(self, request, text):
        return _parsing.parse(request, text)

    def judging_policy(self, mode="strict", **params):
        if _prompts.check_mode(mode) == "official":
            # The official script never re-asks for a reply it cannot read: such a pair is simply not counted.
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
            if not ok and (p.get("settings") or {}).get("mode") == "official" and _parsing.is_no_content(v["error"]):
                # the official script stores such a reply as pred None and judges "Predicted Answer: None"
                ok, v = True, {**v, "detail": _parsing.official_answer_without_content()[2]}
            answer = _json.loads(v["detail"])["answer"] if ok else ""
            r = _prompts.render_score(req["task"], p.get("question", ""), p.get("reference", ""), answer,
                                      p.get("settings"))
            if not ok:  # keep a score row for the item: no verdict, with the answer step's status
                r.parse = {**r.parse, "missing": f"answer step: {v['error'] or 'no answer'}",
                           "upstream_status": int(v["parse_status"])}
                r.user += f"\n[upstream {req['request_key']}]"  # distinct key per failed chain
            return [r]

        return _keys_per_pair(_rows_to_table(self._next_rows(requests, verdicts, "answer", judge, revision,
                                                            score_step)), "vidcapbench-pair")



PROTOCOL = VidCapBenchProtocol()
