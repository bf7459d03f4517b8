"""Judge replies that must never make a run impossible: escaped surrogates (valid JSON the official scripts accept)
that decode to text Arrow/UTF-8 cannot hold, and replies far larger than any verdict needs. Each is judged through
the real streaming loop and judgment cache (ReplayJudge), and judged again from the cache."""

from __future__ import annotations

import pyarrow as pa

from capeval.adapters.replay import ReplayJudge
from capeval.engine.judging.runner import run_judging
from capeval.engine.registry import lookup
from capeval.engine.schemas import CAPTIONS, ITEMS, NO_VERDICT, ParseStatus, conform


def _vidcapbench_requests(n_items: int):
    items = conform(pa.table({
        "benchmark": ["vidcapbench"] * n_items, "task": ["default"] * n_items,
        "item_id": [f"q{i}" for i in range(n_items)], "video_id": ["v0"] * n_items,
        "annotation": [f"Question {i}?" for i in range(n_items)], "answer": [f"answer {i}" for i in range(n_items)]}),
        ITEMS)
    caps = conform(pa.table({"caption_key": ["k0"], "captioner": ["m"], "prompt_id": ["p"], "frame_spec": ["f"],
                             "video_id": ["v0"], "text": ["Two red kites over a park."]}), CAPTIONS)
    p = lookup("protocol", "vidcapbench")
    return p, p.build_requests(items, caps, judge="replay", judge_revision="r1", seeds=(0,))


def _replies(score_texts: list[str]) -> list[dict]:
    out = []
    for i, text in enumerate(score_texts):
        out.append({"item_id": f"q{i}", "step": "answer", "text": f"answer {i}"})
        out.append({"item_id": f"q{i}", "step": "score", "text": text})
    return out


def test_escaped_surrogates_in_a_reply_are_judged_and_rejudged_from_the_cache(tmp_path):
    p, reqs = _vidcapbench_requests(3)
    texts = ['{"score": 2, "analysis": "fine \\ud83d\\ude00"}',  # a pair: one emoji
             '{"score": 1, "analysis": "half \\ud83d"}',  # a lone surrogate
             '{"score": 0, "analysis": "\\udc00\\ud83d tail"}']  # reversed: two lone ones
    judge = ReplayJudge(_replies(texts))
    for run in range(2):  # the second run answers every request from the judgment cache
        v = run_judging(reqs, judge, cache_dir=tmp_path, protocol=p, progress=False)
        rows = {r["item_id"]: r for r in v.to_pylist()}
        assert {k: r["verdict"] != NO_VERDICT for k, r in rows.items()} == {"q0": True, "q1": True, "q2": True}, run
        assert "\U0001F600" in rows["q0"]["detail"]
        for r in rows.values():  # what is stored is valid UTF-8 text
            for col in ("detail", "raw_output", "error"):
                if r[col] is not None:
                    r[col].encode("utf-8")


def test_lone_surrogates_from_the_backend_are_cached_as_valid_text(tmp_path):
    p, reqs = _vidcapbench_requests(2)
    # what an HTTP adapter hands over after json.loads of '"content": "...\\ud83d"': a str with a lone surrogate
    judge = ReplayJudge(_replies(['{"score": 2, "analysis": "ok \ud83d"}', '{"score": 1, "analysis": "\udcff"}']))
    for _ in range(2):
        v = run_judging(reqs, judge, cache_dir=tmp_path, protocol=p, progress=False)
        assert all(r["verdict"] != NO_VERDICT for r in v.to_pylist())
        assert all(r["raw_output"].encode("utf-8") for r in v.to_pylist())


def test_a_cached_reply_that_is_not_utf8_fails_its_item_only(tmp_path):
    import sqlite3

    p, reqs = _vidcapbench_requests(2)
    judge = ReplayJudge(_replies(['{"score": 2}', '{"score": 1}']))
    run_judging(reqs, judge, cache_dir=tmp_path, protocol=p, progress=False)
    with sqlite3.connect(tmp_path / "judgments.sqlite") as db:  # damage one stored score reply
        key = db.execute("SELECT request_key FROM judgments WHERE text = ?", ('{"score": 2}',)).fetchone()[0]
        db.execute("UPDATE judgments SET text = CAST(? AS TEXT) WHERE request_key = ?", (b'{"score": \xff2}', key))
    v = run_judging(reqs, judge, cache_dir=tmp_path, protocol=p, progress=False)
    rows = {r["item_id"]: r for r in v.to_pylist()}
    assert rows["q1"]["verdict"] != NO_VERDICT  # the other item is untouched
    # unparseable after the decoding, then re-asked (the recording has no re-ask: a judge error): a failure, no crash
    assert rows["q0"]["verdict"] == NO_VERDICT and rows["q0"]["parse_status"] in (ParseStatus.FAILED, ParseStatus.ERROR)


def test_a_huge_reply_is_a_failure_with_its_reason_and_never_cached(tmp_path):
    from capeval.engine.judging.loop import MAX_REPLY_CHARS
    from capeval.engine.store.judgment_cache import JudgmentCache

    p, reqs = _vidcapbench_requests(2)
    huge = '{"score": 2, "analysis": "' + "x" * (MAX_REPLY_CHARS + 10) + '"}'
    judge = ReplayJudge(_replies([huge, '{"score": 1}']))
    v = run_judging(reqs, judge, cache_dir=tmp_path, protocol=p, progress=False)
    rows = {r["item_id"]: r for r in v.to_pylist()}
    assert rows["q1"]["verdict"] != NO_VERDICT
    assert rows["q0"]["verdict"] == NO_VERDICT and rows["q0"]["parse_status"] == ParseStatus.ERROR
    assert "reply too large" in rows["q0"]["error"] and str(MAX_REPLY_CHARS)[:1] in rows["q0"]["error"]
    with JudgmentCache(tmp_path) as cache:
        assert max(len(r.text) for r in cache.get_many(list(reqs.column("request_key").to_pylist()) + [
            k for (k,) in cache._db.execute("SELECT request_key FROM judgments")]).values()) < 1000
