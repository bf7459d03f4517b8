"""The `dream1k` protocol is LVCap-Eval's AutoDQ under its own name: its requests, parses and next steps are lvcap's
(official mode with event_scoring="autodq" and the AutoDQ pack; strict mode lvcap's strict event flow) except for
what is its own (the `protocol` column, the context task "dream1k/...", the protocol tag in the request keys), and
the local judge answers them through it."""

from __future__ import annotations

import json
from types import SimpleNamespace
from pathlib import Path

import polars as pl
import pyarrow as pa
import pytest

from capeval.engine.protocols.base import RequestContext
from capeval.engine.protocols.lvcap import dream1k as dream1k_release
from capeval.engine.registry import lookup
from capeval.engine.schemas import CAPTIONS, VERDICTS, ParseStatus, conform

PACKS = Path(__file__).resolve().parents[2].parent / "shared" / "protocols"
AUTODQ = PACKS / "autodq.toml"
RENAMED = {"protocol", "context", "request_key"}

D1K = lookup("protocol", "dream1k")
LVCAP = lookup("protocol", "lvcap")

CLIPS = [  # (vid, reference events, reference description, source, extra)
    ("101", ["A man opens a door.", "The man walks into the room.", "He sits down on a chair."],
     "A man opens a door, walks into the room and sits down on a chair.", "DREAM/youtube",
     {"duration": 4.2, "n_events": 3, "n_shots": 1, "n_subjects": 1}),
    ("102", ["A dog runs across the grass.", "The dog catches a red ball."],
     "A dog runs across the grass and catches a red ball.", "DREAM/videvo",
     {"duration": 12.0, "n_events": 2, "n_shots": 2, "n_subjects": 2}),
    ("103", [], "Nothing moves: a still lake under a grey sky.", "DREAM/youtube",
     {"duration": 25.0, "n_events": 0, "n_shots": 1, "n_subjects": 0}),
]
CAPTION_TEXTS = {"101": "A man opens the door and walks in. He sits down on a chair.",
                 "102": 'The "dog" runs across the grass.\nIt barks.',
                 "103": "A lake."}


def clip_items(clips=CLIPS) -> pa.Table:
    return dream1k_release.clip_items([(vid, ev, ref, src, {**extra, "dataset": src, "idx": None})
                              for vid, ev, ref, src, extra in clips])


def captions(texts=CAPTION_TEXTS) -> pa.Table:
    vids = list(texts)
    return conform(pa.table({"caption_key": [f"cap-{v}" for v in vids], "captioner": ["m"] * len(vids),
                             "prompt_id": ["describe"] * len(vids), "frame_spec": ["uniform:8"] * len(vids),
                             "video_id": vids, "text": [texts[v] for v in vids]}), CAPTIONS)


def official_requests(protocol=D1K):
    if protocol is D1K:
        params = {"mode": "official", "prompts": str(AUTODQ)}
    else:
        params = {"mode": "official", "event_prompts": str(AUTODQ), "event_scoring": "autodq"}
    return protocol.build_requests(clip_items(), captions(), judge="j", judge_revision="r", **params)


def _without_renamed(table: pa.Table) -> list[dict]:
    rows = []
    for r in table.to_pylist():
        ctx = RequestContext.decode(r["context"])
        rows.append({**{k: v for k, v in r.items() if k not in RENAMED},
                     "context": (ctx.task.split("/", 1)[1], ctx.fields, ctx.parse, ctx.temperature, ctx.send_seed)})
    return rows


def _assert_renamed(table: pa.Table) -> None:
    assert table.num_rows
    assert set(table.column("protocol").to_pylist()) == {"dream1k"}
    tasks = [RequestContext.decode(c).task for c in table.column("context").to_pylist()]
    assert all(t.startswith("dream1k/events/") for t in tasks), tasks


# -- requests ----------------------------------------------------------------------------------------------------------
def test_official_requests_are_lvcaps_autodq_requests_renamed():
    ours, theirs = official_requests(D1K), official_requests(LVCAP)
    _assert_renamed(ours)
    assert _without_renamed(ours) == _without_renamed(theirs)
    assert sorted(set(ours.column("step").to_pylist())) == ["extract", "recall"]
    # its own cache identity: the protocol tag differs, so no key is shared with lvcap's
    assert not set(ours.column("request_key").to_pylist()) & set(theirs.column("request_key").to_pylist())
    assert ours.column("request_key").to_pylist() == official_requests(D1K).column("request_key").to_pylist()


def test_official_requests_send_the_pack_and_no_sampling_parameters():
    import tomllib

    pack = {p["id"]: p for p in tomllib.loads(AUTODQ.read_text())["prompt"]}
    rows = official_requests().to_pylist()
    extract = next(r for r in rows if r["item_id"] == "102" and r["step"] == "extract")
    caption = CAPTION_TEXTS["102"].lower().replace('"', "'")
    assert extract["user"] == pack["judge/extract_events"]["user"].format(caption=caption)
    assert extract["system"] is None and extract["max_tokens"] is None
    for r in rows:
        ctx = RequestContext.decode(r["context"])
        assert ctx.temperature is None and ctx.send_seed is False  # nothing sent: the API's defaults
    recall = next(r for r in rows if r["item_id"] == "101" and r["step"] == "recall")
    assert recall["user"] == pack["judge/entailment"]["user"].format(
        description=CAPTION_TEXTS["101"].lower(), events=str(CLIPS[0][1]))


def test_official_mode_without_a_pack_reads_capeval_packs(monkeypatch, tmp_path):
    monkeypatch.setenv("CAPEVAL_PACKS", str(PACKS))
    a = D1K.build_requests(clip_items(), captions(), judge="j", judge_revision="r", mode="official")
    assert a.column("user").to_pylist() == official_requests().column("user").to_pylist()
    assert D1K.packs_used("official", {})["prompts"].path.resolve() == AUTODQ.resolve()
    monkeypatch.setenv("CAPEVAL_PACKS", str(tmp_path))
    with pytest.raises(Exception, match="autodq.toml"):
        D1K.build_requests(clip_items(), captions(), judge="j", judge_revision="r", mode="official")


def test_strict_requests_are_lvcaps_strict_event_requests_renamed():
    ours = D1K.build_requests(clip_items(), captions(), judge="j", judge_revision="r", mode="strict")
    theirs = LVCAP.build_requests(clip_items(), captions(), judge="j", judge_revision="r", mode="strict")
    _assert_renamed(ours)
    assert _without_renamed(ours) == _without_renamed(theirs)
    assert set(ours.column("step").to_pylist()) == {"extract", "entail_r"}
    assert D1K.packs_used("strict", {})["prompts"].path.name == "pack.toml"


def test_render_delegates_as_build_requests():
    item = clip_items().to_pylist()[0]
    cap = captions().to_pylist()[0]
    ours = D1K.render(item, cap, seed=0, mode="official", prompts=str(AUTODQ))
    theirs = LVCAP.render(item, cap, seed=0, mode="official", event_prompts=str(AUTODQ), event_scoring="autodq")
    assert [(r.step, r.user, r.parse) for r in ours] == [(r.step, r.user, r.parse) for r in theirs]


def test_judging_policy_is_lvcaps():
    official = D1K.judging_policy(mode="official", prompts=str(AUTODQ))
    assert (official.max_reasks, official.reask_temperature, official.mode) == (9, None, "official")
    assert D1K.judging_policy(mode="strict") == LVCAP.judging_policy(mode="strict")


def test_declarations():
    assert D1K.dataset_kinds == ("dream1k", "dream1k_synthetic", "items")
    assert D1K.intermediate_steps == LVCAP.intermediate_steps
    assert D1K.tasks == ("events",)
    assert D1K.dataset_problem("vdc") is not None and D1K.dataset_problem("dream1k") is None
    assert D1K.check_params("official", {"event_scoring": "paper"})  # not a dream1k param
    assert D1K.check_params("official", {"prompts": str(AUTODQ), "duration_buckets": "5,10,20"}) == []
    assert D1K.check_params("strict", {"duration_buckets": "10,5"})
    assert [p.id for p in D1K.caption_prompts] == ["dream1k"]


def test_the_official_caption_prompt_is_read_from_the_pack(tmp_path):
    import tomllib

    from capeval.engine.prompts_library import prompt_from_entry
    from capeval.engine.protocols.dream1k.caption_prompts import OFFICIAL_CAPTION_PROMPT

    pack = {p["id"]: p for p in tomllib.loads(AUTODQ.read_text())["prompt"]}
    prompt = prompt_from_entry({"id": "dream1k-official", "pack": str(AUTODQ), "prompt": OFFICIAL_CAPTION_PROMPT},
                               tmp_path)
    assert prompt.verbatim and prompt.text == pack[OFFICIAL_CAPTION_PROMPT]["user"]
    assert prompt.text != D1K.caption_prompts[0].text  # capeval's own is its own wording


def test_a_pack_without_the_modes_prompt_ids_is_refused_before_any_work():
    [(key, why)] = D1K.check_params("official", {"prompts": str(PACKS / "lvcap.toml")})
    assert key == "prompts" and "judge/extract_events" in why and "autodq.toml" in why
    [(key, why)] = D1K.check_params("strict", {"prompts": str(AUTODQ)})
    assert key == "prompts" and "judge/extract_list" in why
    lvcap_pack = str(D1K.packs_used("strict", {})["prompts"].path)
    assert D1K.check_params("strict", {"prompts": lvcap_pack}) == []


def test_the_key_tag_names_both_versions(monkeypatch):
    assert D1K.delegate().version == f"{D1K.version}+lvcap@{LVCAP.version}"
    before = official_requests().column("request_key").to_pylist()
    monkeypatch.setattr(type(LVCAP), "version", LVCAP.version + ".next")
    after = official_requests().column("request_key").to_pylist()
    assert not set(before) & set(after)  # a new lvcap version invalidates dream1k's cached judgments


# -- parse and next steps ------------------------------------------------------------------------------------------
def _reply(step: str, n: int) -> str:
    if step == "extract":
        return str({"events": ["a man opens the door.", "he sits down."]})
    return json.dumps({"events": [{"event": f"e{i}", "relationship": "entailment" if i % 2 == 0 else "neutral",
                                   "reason": "r"} for i in range(max(n, 1))]})


def _verdicts(protocol, requests: pa.Table, replies) -> pa.Table:
    rows = []
    for r in requests.to_pylist():
        text = replies(r)
        code, status, detail = protocol.parse(r, text)
        rows.append({**{k: r[k] for k in ("request_key", "protocol", "task", "item_id", "video_id", "captioner",
                                          "prompt_id", "frame_spec", "step", "sub_index", "seed", "trial")},
                     "judge": "j", "raw_output": text, "verdict": code, "parse_status": int(status),
                     "detail": detail if status in (ParseStatus.OK, ParseStatus.REPAIRED) else None,
                     "error": None if status in (ParseStatus.OK, ParseStatus.REPAIRED) else detail})
    return conform(pa.Table.from_pylist(rows), VERDICTS)


def _official_reply(r: dict) -> str:
    return _reply(r["step"], json.loads(r["context"])["parse"].get("n_events", 0))


def test_parse_and_next_requests_are_lvcaps_renamed():
    ours, theirs = official_requests(D1K), official_requests(LVCAP)
    v_ours, v_theirs = _verdicts(D1K, ours, _official_reply), _verdicts(LVCAP, theirs, _official_reply)
    cols = ["item_id", "step", "verdict", "parse_status", "detail"]
    assert v_ours.select(cols).to_pylist() == v_theirs.select(cols).to_pylist()
    nxt_ours = D1K.next_requests(ours, v_ours, judge="j", judge_revision="r")
    nxt_theirs = LVCAP.next_requests(theirs, v_theirs, judge="j", judge_revision="r")
    _assert_renamed(nxt_ours)
    assert set(nxt_ours.column("step").to_pylist()) == {"precision"}
    assert _without_renamed(nxt_ours) == _without_renamed(nxt_theirs)
    # the precision step's rows parse as lvcap's
    p_ours = _verdicts(D1K, nxt_ours, _official_reply)
    p_theirs = _verdicts(LVCAP, nxt_theirs, _official_reply)
    assert p_ours.select(cols).to_pylist() == p_theirs.select(cols).to_pylist()


def test_strict_next_requests_are_lvcaps_renamed():
    ours = D1K.build_requests(clip_items(), captions(), judge="j", judge_revision="r", mode="strict")
    theirs = LVCAP.build_requests(clip_items(), captions(), judge="j", judge_revision="r", mode="strict")

    def reply(r):
        return '["a man opens the door", "he sits down"]' if r["step"] == "extract" else "entailment"

    nxt_ours = D1K.next_requests(ours, _verdicts(D1K, ours, reply), judge="j", judge_revision="r")
    nxt_theirs = LVCAP.next_requests(theirs, _verdicts(LVCAP, theirs, reply), judge="j", judge_revision="r")
    _assert_renamed(nxt_ours)
    assert set(nxt_ours.column("step").to_pylist()) == {"entail_p"}
    assert _without_renamed(nxt_ours) == _without_renamed(nxt_theirs)


def test_stand_in_answers_are_lvcaps_and_parse():
    for table in (official_requests(), D1K.build_requests(clip_items(), captions(), judge="j", judge_revision="r",
                                                          mode="strict")):
        for r in table.to_pylist():
            ctx = RequestContext.decode(r["context"])
            request = SimpleNamespace(task=ctx.task, fields=ctx.fields, choices=tuple(r["choices"] or ()) or None,
                                     json_schema=r["json_schema"], meta={"item_id": r["item_id"]})
            answer = D1K.stand_in_answer(request)
            assert answer is not None
            text = answer.reply(None)
            assert text == LVCAP.stand_in_answer(request).reply(None)
            assert D1K.parse(r, text)[1] in (ParseStatus.OK, ParseStatus.REPAIRED), (r["step"], text)
