from .codes import *  # noqa: F401,F403

import json as _json

from engine.protocols.base import JudgeProtocol as _JudgeProtocol, rows_to_table as _rows_to_table
from engine.registry import register_protocol as _register_protocol
from engine.schemas import ParseStatus as _ParseStatus

from . import parsing as _parsing, prompts as _prompts
from .codes import EntailmentVerdict as _EntailmentVerdict, SceneQAVerdict as _SceneQAVerdict


class LVCapProtocol(_JudgeProtocol):
    name = "lvcap"
    version = "1"
    codes = (_SceneQAVerdict, _EntailmentVerdict)
    intermediate_steps = ("extract",)

    def render(self, item, caption, *, seed, **opts):
        return _prompts.render(item, caption, seed=seed, **opts)

    def parse(self, request, text):
        return _parsing.parse(request, text)

    def next_requests(self, requests, verdicts, *, judge, judge_revision):
        def entail_p(req, v, ctx):
            reference = ctx.get("parse", {}).get("reference", "")
            if v["parse_status"] not in (_ParseStatus.OK, _ParseStatus.REPAIRED):
                # extraction failed: one entail_p row without a verdict keeps the video's precision accountable
                r = _prompts.render_entail("events", "entail_p", reference, f"[extraction failed {req['request_key']}]", 0)
                r.parse = {**r.parse, "missing": f"extract step: {v['error'] or 'no events'}",
                           "upstream_status": int(v["parse_status"])}
                return [r]
            events = _json.loads(v["detail"])["events"]
            return [_prompts.render_entail("events", "entail_p", reference, e, i) for i, e in enumerate(events)]

        return _rows_to_table(self._next_rows(requests, verdicts, "extract", judge, judge_revision, entail_p))


PROTOCOL = _register_protocol("lvcap")(LVCapProtocol())
