from .codes import *  # noqa: F401,F403

import json as _json

from engine.protocols.base import JudgeProtocol as _JudgeProtocol, rows_to_table as _rows_to_table
from engine.registry import register_protocol as _register_protocol
from engine.schemas import ParseStatus as _ParseStatus

from . import parsing as _parsing, prompts as _prompts
from .codes import VidCapBenchVerdict as _VidCapBenchVerdict


class VidCapBenchProtocol(_JudgeProtocol):
    name = "vidcapbench"
    version = "1"
    codes = (_VidCapBenchVerdict,)
    intermediate_steps = ("answer",)

    def render(self, item, caption, *, seed, **opts):
        return _prompts.render(item, caption, seed=seed, **opts)

    def parse(self, request, text):
        return _parsing.parse(request, text)

    def next_requests(self, requests, verdicts, *, judge, judge_revision):
        def score_step(req, v, ctx):
            p = ctx.get("parse", {})
            ok = v["parse_status"] in (_ParseStatus.OK, _ParseStatus.REPAIRED)
            answer = _json.loads(v["detail"])["answer"] if ok else ""
            r = _prompts.render_score(req["task"], p.get("question", ""), p.get("reference", ""), answer)
            if not ok:  # keep a score row for the item: no verdict, with the answer step's status
                r.parse = {**r.parse, "missing": f"answer step: {v['error'] or 'no answer'}",
                           "upstream_status": int(v["parse_status"])}
                r.user += f"\n[upstream {req['request_key']}]"  # distinct key per failed chain
            return [r]

        return _rows_to_table(self._next_rows(requests, verdicts, "answer", judge, judge_revision, score_step))


PROTOCOL = _register_protocol("vidcapbench")(VidCapBenchProtocol())
