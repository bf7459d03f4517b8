from .caption_prompts import CAPTION_PROMPTS as _CAPTION_PROMPTS
from .codes import *  # noqa: F401,F403

import json as _json

from capeval.engine.metrics.buckets import duration_edges as _duration_edges
from capeval.engine.keys import (mode_tag as _mode_tag, packs_tag as _packs_tag, protocol_tag as _protocol_tag,
                                 tagged_revision as _tagged_revision)
from capeval.engine.params import Param as _Param
from capeval.engine.protocols.base import (CONFIDENCE_PARAM as _CONFIDENCE, MODE_PARAM as _MODE,
                                   PAPER_COMPATIBLE_PARAM as _PAPER_COMPATIBLE, PROMPTS_PARAM as _PROMPTS,
                                   JudgeProtocol as _JudgeProtocol, JudgingPolicy as _JudgingPolicy,
                                   caption_identity as _caption_identity, make_row as _make_row,
                                   pair_items_captions as _pair_items_captions, RequestContext as _RequestContext,
                                   rows_to_table as _rows_to_table)
from capeval.engine.packs import load_pack as _load_pack
from capeval.engine.schemas import ParseStatus as _ParseStatus

from . import (autodq as _autodq, paper_events as _paper, parsing as _parsing, prompts as _prompts,
               stand_in as _stand_in, stand_in_gt as _stand_in_gt)
from .codes import (BatchVerdict as _BatchVerdict, EntailmentVerdict as _EntailmentVerdict,
                    SceneQAVerdict as _SceneQAVerdict)
from capeval.engine.protocols.lvcap.paired import paired_spec

_IDENTITY = ("item_id", "video_id", "caption_key", "captioner", "prompt_id", "frame_spec")


class LVCapProtocol(_JudgeProtocol):
    """LVCap-Eval: scene QA (S_s) and events (S_e: the paper's Prompt2 + Prompt5, or DREAM-1K's AutoDQ). Params:
    mode, event_scoring, prompts, event_prompts (prompts.py, paper_events.py), duration_buckets, event_average
    (metrics.py)."""

    name = "lvcap"
    caption_prompts = _CAPTION_PROMPTS
    version = "2"
    codes = (_SceneQAVerdict, _EntailmentVerdict, _BatchVerdict)
    intermediate_steps = ("extract",)
    headline = ("S_e", "S_s", "event_precision", "event_recall")
    metric_definitions = (
        ("S_e", "event score: F1 of the caption's events against the reference events (entailed in both directions)"),
        ("S_s", "scene score: the share of scene yes/no questions answered right from the caption, %"),
        ("event_precision", "the share of the caption's events the reference entails"),
        ("event_recall", "the share of the reference events the caption entails"),
    )
    pack_params = ("prompts", "event_prompts")  # event_prompts: the AutoDQ pack
    breakdowns = ("bucket",)  # duration buckets (metrics.py)
    # scene questions (yes/no) and clips' reference events (DREAM-1K's clips, or a table of such items)
    dataset_kinds = ("dream1k", "items")
    item_columns = ("annotation",)
    tasks = ("scene", "events")
    params = (_MODE, _PROMPTS, _CONFIDENCE, _PAPER_COMPATIBLE,
              _Param("event_prompts", (str,), None, "the events pack (official: autodq.toml)"),
              _Param("event_scoring", (str,), None, "official mode: paper (Prompt2 + Prompt5, the default) or autodq",
                     choices=_paper.SCORINGS),
              _Param("event_average", (str,), "video", "video: per-video P and R averaged; pooled: over all events",
                     choices=("video", "pooled"), metrics=True),
              _Param("duration_buckets", (list, str), None, "bucket edges in minutes, e.g. \"2,5,10,15,20\"",
                     check=_duration_edges, metrics=True))

    def check_params(self, mode, params):
        problems = super().check_params(mode, params)
        if "event_scoring" not in params or any(k == "event_scoring" for k, _ in problems):
            return problems
        try:
            _paper.check_scoring(mode, params["event_scoring"])
        except ValueError as exc:
            problems.append(("event_scoring", str(exc)))
        return problems

    def paired_spec(self, mode):
        return paired_spec(mode)

    @property
    def construction(self):
        from .construction import PIPELINE  # deferred: a benchmark extension (it runs judges and captioners)

        return PIPELINE

    def judging_policy(self, mode: str = "strict", **params) -> _JudgingPolicy:
        if mode == "official":  # AutoDQ: up to 10 tries per call, the same request again each time
            return _JudgingPolicy(max_reasks=_autodq.OFFICIAL_TRIES - 1, reask_temperature=None, mode="official")
        return _JudgingPolicy(mode=mode)

    def build_requests(self, items, captions, *, judge, judge_revision, seeds=(0,), mode="strict", prompts=None,
                       event_prompts=None, event_scoring=None, **opts):
        tasks = set(items.column("task").to_pylist())
        scene_pack, event_pack = _prompts.packs(mode, prompts, event_prompts, scenes=bool(tasks - {"events"}),
                                                events="events" in tasks, event_scoring=event_scoring)
        scoring = _paper.check_scoring(mode, event_scoring)
        # The packs' contents enter every request key (and so the cache identity) through the revision.
        # The tags after the protocol's travel in the context (`revision_suffix`): the next step keys with them.
        suffix = _tagged_revision("", _packs_tag(p.digest if p is not None else None for p in (scene_pack, event_pack)),
                                  _mode_tag(mode))
        revision = _tagged_revision(judge_revision, _protocol_tag(self.name, self.version)) + suffix
        pairs = _pair_items_captions(items, captions)
        rows, scene_groups = [], {}
        for item, cap in pairs:
            if mode == "official" and item["task"] != "events":
                scene_groups.setdefault((item["video_id"], cap["caption_key"]), (cap, []))[1].append(item)
                continue
            if mode == "official" and scoring == "paper":
                rendered = [_paper_extract(item, cap, event_pack)]
            elif mode == "official":
                rendered = _prompts.render_official_events(item, cap, event_pack)
            else:
                rendered = _prompts.render_strict(item, cap, scene_pack, event_pack)
            rows += self._rows(rendered, item, cap, seeds, judge, revision, suffix)
        for cap, group in scene_groups.values():
            r = _prompts.render_scene_video(group, cap, scene_pack)
            rows += self._rows([r], dict(group[0], item_id=group[0]["video_id"]), cap, seeds, judge, revision, suffix)
        return _rows_to_table(rows)

    def _rows(self, rendered, item, cap, seeds, judge, revision, suffix) -> list[dict]:
        base = {"item_id": item["item_id"], "video_id": item["video_id"], **_caption_identity(cap)}
        out = []
        for trial, seed in enumerate(seeds):
            for r in rendered:
                r.parse = {**r.parse, "revision_suffix": suffix}
                if cap.get("text") is None:
                    r.parse = {**r.parse, "missing": f"caption failed: {cap.get('error') or 'no text'}"}
                out.append(_make_row(r, base, protocol=self.name, judge=judge, judge_revision=revision,
                                     seed=int(seed), trial=trial))
        return out

    def render(self, item, caption, *, seed, mode="strict", prompts=None, event_prompts=None, event_scoring=None,
               **opts):
        scene_pack, event_pack = _prompts.packs(mode, prompts, event_prompts, scenes=item["task"] != "events",
                                                events=item["task"] == "events", event_scoring=event_scoring)
        if mode == "official":
            if item["task"] != "events":
                return [_prompts.render_scene_video([item], caption, scene_pack)]
            if _paper.check_scoring(mode, event_scoring) == "paper":
                return [_paper_extract(item, caption, event_pack)]
            return _prompts.render_official_events(item, caption, event_pack)
        return _prompts.render_strict(item, caption, scene_pack, event_pack)

    def stand_in_answer(self, request):
        if request.task.startswith("lvcap/gt/"):  # `capeval construct lvcap`'s ground-truth steps
            return _stand_in_gt.stand_in(request)
        return _stand_in.stand_in(request)

    def parse(self, request, text):
        return _parsing.parse(request, text)

    def next_requests(self, requests, verdicts, *, judge, judge_revision):
        """After extraction: the event match (official, paper scoring: Prompt5 once per clip), the precision
        direction (official AutoDQ: one call per clip; strict: one per event). A failed extraction gives one such
        row without a verdict, so the clip stays accountable."""
        if requests.num_rows != verdicts.num_rows:
            raise ValueError(f"{self.name}: {requests.num_rows} requests but {verdicts.num_rows} verdicts")
        rows = []
        pairs = list(zip(requests.to_pylist(), verdicts.to_pylist()))
        # official order: the precision call follows an accepted recall call (a clip whose recall failed is Failed
        # before its precision is asked)
        recall_failed = {(q["item_id"], q["caption_key"], q["trial"]): v for q, v in pairs
                         if q["step"] == "recall" and v["parse_status"] not in (_ParseStatus.OK, _ParseStatus.REPAIRED)}
        for req, v in pairs:
            if req["step"] != "extract":
                continue
            ctx = _RequestContext.decode(req["context"]).parse
            suffix = ctx.get("revision_suffix", "")
            revision = _tagged_revision(judge_revision, _protocol_tag(self.name, self.version)) + suffix
            pack = _load_pack(ctx["event_pack"])
            official = ctx.get("mode") == "official"
            paper = ctx.get("event_scoring") == "paper"
            if v["parse_status"] not in (_ParseStatus.OK, _ParseStatus.REPAIRED):
                step = "event_match" if paper else "precision" if official else "entail_p"
                r = _prompts.Rendered(task="events", step=step, user=f"[extraction failed {req['request_key']}]")
                r.parse = {"mode": ctx.get("mode"), "missing": f"extract step: {v['error'] or 'no events'}",
                           "upstream_status": int(v["parse_status"])}
                if paper:
                    r.parse["event_scoring"] = "paper"
                rendered = [r]
            elif paper:
                rendered = [_paper.render_match(pack, req["video_id"], ctx["reference_events"],
                                                _json.loads(v["detail"])["events"])]
            elif official and (req["item_id"], req["caption_key"], req["trial"]) in recall_failed:
                failed = recall_failed[(req["item_id"], req["caption_key"], req["trial"])]
                r = _prompts.Rendered(task="events", step="precision", user=f"[recall failed {req['request_key']}]")
                r.parse = {"mode": "official", "missing": f"recall step failed, precision not asked: "
                                                          f"{failed['error'] or 'no verdict'}",
                           "upstream_status": int(failed["parse_status"])}
                rendered = [r]
            elif official:
                rendered = [_prompts.render_precision(pack, ctx["caption_text"], ctx["reference"],
                                                      _json.loads(v["detail"]))]
            else:
                events = _json.loads(v["detail"])["events"]
                rendered = [_prompts.render_entail_one(pack, "entail_p", ctx["reference"], e, i)
                            for i, e in enumerate(events)]
            base = {k: req[k] for k in _IDENTITY}
            for r in rendered:
                r.parse = {**r.parse, "revision_suffix": suffix}
                rows.append(_make_row(r, base, protocol=self.name, judge=judge, judge_revision=revision,
                                      seed=req["seed"], trial=req["trial"]))
        return _rows_to_table(rows)


def _paper_extract(item: dict, caption: dict, event_pack):
    """Prompt2 on the caption; the reference events (E_ref) ride along in the parse context for Prompt5."""
    events = _prompts.reference_events(item)
    return _paper.render_extract(event_pack, caption.get("text") or "",
                                 parse={"reference_events": events, "event_pack": str(event_pack.path),
                                        "mode": "official"})


PROTOCOL = LVCapProtocol()
