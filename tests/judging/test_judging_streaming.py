"""The streaming judge loop: same verdict tables whatever the completion order, next steps asked before the step
ends, the window bounded, re-ask policies (resend unchanged vs. at a temperature), the official retry-rounds rule,
a fatal backend error stopping early, and a cache that cannot be written."""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from _judging_backends import ScriptedJudge, StreamingScriptedJudge
from capeval.adapters.base import BackendFatalError, JudgeResponse
from capeval.adapters.replay import ReplayJudge
from capeval.engine.errors import AbortedError
from capeval.engine.judging.runner import run_judging
from capeval.engine.protocols.base import JudgingPolicy
from capeval.engine.registry import lookup
from capeval.engine.schemas import CAPTIONS, ITEMS, NO_VERDICT, VERDICTS, ParseStatus, conform
from capeval.engine.store.judgment_cache import JudgmentCache

#: The official prompt packs are read in place (never copied into the project), as tests/fidelity does.
PACK_DIR = Path(os.environ.get("CAPEVAL_PACK_DIR", Path(__file__).resolve().parents[2].parent / "shared" / "protocols"))


@pytest.fixture
def pack_dir():
    if not (PACK_DIR / "capability.toml").is_file():
        pytest.skip(f"official pack {PACK_DIR / 'capability.toml'} not present")
    return PACK_DIR


def _vidcapbench_inputs(n_items=24, n_captions=3):
    """VidCapBench-shaped items (question + answer) over n_captions videos, one caption per video."""
    items = conform(pa.table({
        "benchmark": ["vidcapbench"] * n_items, "task": ["default"] * n_items,
        "item_id": [f"q{i}" for i in range(n_items)], "video_id": [f"v{i % n_captions}" for i in range(n_items)],
        "annotation": [f"Question {i} about the scene?" for i in range(n_items)],
        "answer": [f"answer {i}" for i in range(n_items)]}), ITEMS)
    caps = conform(pa.table({
        "caption_key": [f"k{c}" for c in range(n_captions)], "captioner": ["m"] * n_captions,
        "prompt_id": ["p"] * n_captions, "frame_spec": ["f"] * n_captions,
        "video_id": [f"v{c}" for c in range(n_captions)],
        "text": [f"Caption number {c}: two red kites over a park." for c in range(n_captions)]}), CAPTIONS)
    return items, caps


def _vidcapbench(n_items=24, n_captions=3, seeds=(0,)):
    items, caps = _vidcapbench_inputs(n_items, n_captions)
    p = lookup("protocol", "vidcapbench")
    return p, p.build_requests(items, caps, judge="scripted-judge", judge_revision="r1", seeds=seeds)


def _same(a: pa.Table, b: pa.Table) -> bool:
    return a.drop_columns(["latency_s"]).equals(b.drop_columns(["latency_s"]))


def test_streaming_equals_batch_driven_verdicts_whatever_the_completion_order(tmp_path):
    p, reqs = _vidcapbench(seeds=(0, 1))
    bad = {reqs["request_key"][3].as_py()}  # one backend failure: an ERROR answer and a score row without verdict
    batch = ScriptedJudge(fail_keys=bad)
    v_batch = run_judging(reqs, batch, cache_dir=tmp_path / "a", protocol=p, batch_size=5, progress=False,
                          keep_intermediate=True)
    tables = []
    for seed in (1, 2):
        stream = StreamingScriptedJudge(fail_keys=bad, seed=seed, max_delay_s=0.005)
        tables.append(run_judging(reqs, stream, cache_dir=tmp_path / f"s{seed}", protocol=p, max_in_flight=7,
                                  progress=False, keep_intermediate=True))
        assert stream.peak_in_flight <= 7
        # completion order differed between runs, the table did not
        assert [r.key for r in stream.taken] != [k for call in batch.calls for k in call] or seed == 1
    assert v_batch.schema.equals(VERDICTS) and v_batch.num_rows == 2 * reqs.num_rows
    assert _same(v_batch, tables[0]) and _same(v_batch, tables[1])
    assert set(v_batch["attempt"].drop_null().to_pylist()) == {0}
    err = v_batch.filter(pc.equal(v_batch["parse_status"], int(ParseStatus.ERROR)))
    assert err.num_rows == 2 and set(err["step"].to_pylist()) == {"answer", "score"}


def test_next_step_starts_before_the_step_ends_and_requests_sharing_a_caption_stay_together(tmp_path):
    p, reqs = _vidcapbench(n_items=40, n_captions=4)
    judge = StreamingScriptedJudge(max_delay_s=0.004)
    v, s = run_judging(reqs, judge, cache_dir=tmp_path, protocol=p, max_in_flight=4, progress=False,
                       return_summary=True)
    steps = [r.meta["step"] for r in judge.taken]
    assert steps.count("answer") == 40 and steps.count("score") == 40 and s.steps == {"answer": 40, "score": 40}
    last_answer = max(i for i, st in enumerate(steps) if st == "answer")
    first_score = steps.index("score")
    assert first_score < last_answer / 4, (first_score, last_answer)  # not after the whole answer step
    # first-step requests go out caption by caption (the prefix cache sees each caption's requests together)
    captions = [r.fields["caption"] for r in judge.taken if r.meta["step"] == "answer"]
    changes = sum(1 for a, b in zip(captions, captions[1:]) if a != b)
    assert changes == 3
    assert v.num_rows == 40 and set(v["parse_status"].to_pylist()) == {ParseStatus.OK}


class _FailsFirst(ScriptedJudge):
    """Malformed on attempt 0 (by the request's meta), valid afterwards; records every request."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self.requests = []

    def judge(self, requests):
        self.requests += list(requests)
        return [JudgeResponse(r.key, "not json at all" if r.meta["attempt"] == 0 else self.answer_text(r))
                for r in requests]


@pytest.mark.parametrize("reask_temperature", [None, 0.7, 0.3])
def test_reask_policy_resends_unchanged_or_at_a_temperature(tmp_path, reask_temperature):
    p, reqs = _vidcapbench(n_items=3, n_captions=1)
    judge = _FailsFirst()
    policy = JudgingPolicy(max_reasks=2, reask_temperature=reask_temperature)
    v = run_judging(reqs, judge, cache_dir=tmp_path, protocol=p, policy=policy, progress=False,
                    keep_intermediate=True)
    by_attempt = {}  # the answer step takes free text (never re-asked); the score step wants JSON
    for r in judge.requests:
        by_attempt.setdefault((r.meta["item_id"], r.meta["step"]), {})[r.meta["attempt"]] = r
    assert {k: set(a) for k, a in by_attempt.items()} == {(f"q{i}", st): ({0} if st == "answer" else {0, 1})
                                                         for i in range(3) for st in ("answer", "score")}
    by_attempt = {k: a for k, a in by_attempt.items() if k[1] == "score"}
    for first, again in (a.values() for a in by_attempt.values()):
        assert again.key != first.key and again.user == first.user
        if reask_temperature is None:  # the same request again: same sampling, same seed
            assert (again.temperature, again.seed) == (first.temperature, first.seed)
        else:
            assert again.temperature == reask_temperature and again.seed != first.seed
    v = v.filter(pc.equal(v["step"], "score"))
    assert set(v["attempt"].to_pylist()) == {1} and set(v["parse_status"].to_pylist()) == {ParseStatus.REPAIRED}
    # each policy keys its re-asks apart: a cache filled under one policy never answers another's re-ask
    keys = {r.key for r in judge.requests if r.meta["attempt"]}
    with JudgmentCache(tmp_path) as cache:
        assert set(cache.get_many(keys)) == keys
    other = JudgingPolicy(max_reasks=2, reask_temperature=0.9)
    judge2 = _FailsFirst()
    run_judging(reqs, judge2, cache_dir=tmp_path, protocol=p, policy=other, progress=False)
    assert {r.key for r in judge2.requests} and not ({r.key for r in judge2.requests} & keys)


def _capability_official(shared_data, pack_dir, n_scene, n_objects=1):
    from capeval.engine.protocols.capability.release import load_captions, load_items

    items = load_items(shared_data / "capability" / "annotations", tasks=("scene", "dynamic_object_number"))
    items = pa.concat_tables([items.filter(pc.equal(items["task"], "scene")).slice(0, n_scene),
                              items.filter(pc.equal(items["task"], "dynamic_object_number")).slice(0, n_objects)])
    caps = load_captions(shared_data / "capability" / "captions" / "qwen2.5vl_7b", items)
    keep = set(items["video_id"].to_pylist())
    caps = caps.filter(pa.array([v in keep for v in caps["video_id"].to_pylist()]))
    p = lookup("protocol", "capability")
    reqs = p.build_requests(items, caps, judge="replay", judge_revision="x", mode="official",
                            prompts=str(pack_dir / "capability.toml"))
    return p, reqs


@pytest.mark.parametrize("k, dropped", [(2, {"scene_2"}), (1, set())])
def test_official_retry_rounds_drop_what_the_rounds_would_not_reach(tmp_path, shared_data, pack_dir, k, dropped):
    """scene_0 accepted at once, scene_1 at re-ask 1, scene_2 at re-ask 2, scene_3 never (5 re-asks allowed).
    Failed after round 0: 3 items, after round 1: 2, after round 2: 1. With at most K=2 failed allowed the official
    script stops after round 1, so scene_2's late acceptance is dropped; with K=1 round 2 runs and keeps it.
    dynamic_object_number has 3 items, more than K: the official script asks a task of at most K items nothing
    (tests/capability/test_capability_official_runs.py)."""
    p, reqs = _capability_official(shared_data, pack_dir, n_scene=4, n_objects=3)
    good, bad = '```json\n{"score": 1, "reason": "ok"}\n```', "no dict here"
    accept_at = {"scene_0": 0, "scene_1": 1, "scene_2": 2, "scene_3": None}
    replies = [{"item_id": item, "step": "judge", "attempt": a,
                "text": good if at is not None and a >= at else bad}
               for item, at in accept_at.items() for a in range(6)]
    # dynamic_object_number: object 0 passes at once, object 1 only at attempt 1 -> the whole item is re-asked
    good_n = '{"object_number": "table: 4", "score": 1, "reason": "ok"}'
    replies += [{"item_id": "dynamic_object_number_0", "step": "judge", "sub_index": s, "attempt": a,
                 "text": good_n if (s == 0 or a >= 1) else bad} for s in (0, 1) for a in range(6)]
    replies += [{"item_id": f"dynamic_object_number_{n}", "step": "judge", "attempt": 0, "text": good_n}
                for n in (1, 2)]  # every object of the other two accepted at once
    judge = ReplayJudge(replies)
    policy = p.judging_policy(mode="official")
    assert policy.reask_temperature is None and policy.max_reasks == 5
    policy = JudgingPolicy(max_reasks=5, reask_temperature=None, stop_when_failed_at_most=k, mode="official")
    v = run_judging(reqs, judge, cache_dir=tmp_path, protocol=p, policy=policy, progress=False)
    rows = {(r["item_id"], r["sub_index"]): r for r in v.to_pylist()}
    assert rows[("scene_0", 0)]["attempt"] == 0 and rows[("scene_1", 0)]["verdict"] != NO_VERDICT
    assert rows[("scene_3", 0)]["parse_status"] == ParseStatus.FAILED and rows[("scene_3", 0)]["attempt"] == 5
    for item in ("scene_2",):
        r = rows[(item, 0)]
        if item in dropped:
            assert r["verdict"] == NO_VERDICT and r["parse_status"] == ParseStatus.FAILED
            assert "dropped by the official retry rule" in r["error"] and r["raw_output"]
        else:
            assert r["verdict"] != NO_VERDICT and r["attempt"] == 2
    dyn = [rows[("dynamic_object_number_0", s)] for s in (0, 1)]
    assert [d["attempt"] for d in dyn] == [1, 1]  # both objects asked again, accepted together
    # streaming asks without waiting for rounds: 1 + 2 + 3 + 6 asks for the scenes, 2 x 2 for the two objects, one
    # for each object of the other two items
    other_objects = sum(item in ("dynamic_object_number_1", "dynamic_object_number_2")
                        for item in reqs.column("item_id").to_pylist())
    assert other_objects >= 2 and judge.calls == 16 + other_objects


def test_backend_fatal_error_stops_after_the_window_and_keeps_what_finished(tmp_path):
    p, reqs = _vidcapbench(n_items=60, n_captions=2)

    class Refuses(ScriptedJudge):
        def judge(self, requests):
            if len(self.calls) >= 2:
                self.calls.append([r.key for r in requests])
                raise BackendFatalError("HTTP 401: invalid API key")
            return super().judge(requests)

    judge = Refuses()
    with pytest.raises(AbortedError, match="401") as info:
        run_judging(reqs, judge, cache_dir=tmp_path, protocol=p, batch_size=4, progress=False)
    assert info.value.exit_code == 4
    assert len(judge.calls) == 3  # two batches answered, the third refused, nothing more sent
    with JudgmentCache(tmp_path) as cache:
        assert len(cache) == 8
        assert cache._db.execute("SELECT COUNT(*) FROM claims").fetchone()[0] == 0  # nothing left claimed
    rerun = ScriptedJudge()
    v = run_judging(reqs, rerun, cache_dir=tmp_path, protocol=p, batch_size=16, progress=False)
    assert v.num_rows == 60 and len(rerun.asked) == 120 - 8


def test_cache_that_cannot_be_written_aborts_naming_the_path_and_keeps_whole_groups(tmp_path, monkeypatch):
    p, reqs = _vidcapbench(n_items=30, n_captions=2)
    real_put = JudgmentCache.put_many
    state = {"calls": 0}

    def put_until_full(self, responses, release=()):
        state["calls"] += 1
        if state["calls"] >= 3:  # then the disk is full: SQLite itself refuses to grow the file
            pages = self._db.execute("PRAGMA page_count").fetchone()[0]
            self._db.execute(f"PRAGMA max_page_count={pages}")
            big = [type(r)(r.request_key, r.judge, r.text * 2000) for r in responses]
            return real_put(self, big, release)
        return real_put(self, responses, release)

    monkeypatch.setattr(JudgmentCache, "put_many", put_until_full)
    with pytest.raises(AbortedError, match="judgments.sqlite.*could not write.*full"):
        run_judging(reqs, ScriptedJudge(delay_s=0.06), cache_dir=tmp_path, protocol=p, batch_size=4,
                    progress=False)
    monkeypatch.undo()
    with sqlite3.connect(tmp_path / "judgments.sqlite") as con:
        texts = [r[0] for r in con.execute("SELECT text FROM judgments")]
    assert texts and all(len(t) < 1000 for t in texts)  # the refused group left nothing behind
    v = run_judging(reqs, ScriptedJudge(), cache_dir=tmp_path, protocol=p, progress=False)
    assert v.num_rows == 30 and set(v["parse_status"].to_pylist()) == {ParseStatus.OK}


def test_use_cache_false_sends_everything_again(tmp_path):
    p, reqs = _vidcapbench(n_items=5, n_captions=1)
    run_judging(reqs, ScriptedJudge(), cache_dir=tmp_path, protocol=p, progress=False)
    again = ScriptedJudge()
    _, s = run_judging(reqs, again, cache_dir=tmp_path, protocol=p, progress=False, use_cache=False,
                       return_summary=True)
    assert len(again.asked) == 10 and s.cached == 0 and s.sent == 10


def test_summary_metadata_and_attempt_column(tmp_path):
    p, reqs = _vidcapbench(n_items=4, n_captions=1)
    v = run_judging(reqs, ScriptedJudge(), cache_dir=tmp_path, protocol=p, progress=False)
    meta = json.loads(v.schema.metadata[b"capeval.judging_summary"])
    assert meta["requests"] == 4 and meta["sent"] == 8 and v.schema.field("attempt").type == pa.int8()


def test_the_loop_lets_an_http_judge_hedge_its_drain_and_the_verdicts_stay_the_same(tmp_path):
    """Once every row is sent (only follow-ups of the answers in flight can come), the loop's feed says `draining`
    and the HTTP judge fills the idle slots with copies of the longest-outstanding requests: the server sees copies
    (counted in the summary's `hedged`, beyond `sent`), never more than the window, and the verdict table equals
    a run without hedging. VidCapBench's two steps make follow-ups arrive while copies are out."""
    from capeval.adapters.openai_http import OpenAIJudge
    from capeval.benchmarks.loopback_server import FaultConfig, LoopbackServer

    protocol, requests = _vidcapbench(n_items=48, n_captions=6)
    tables, summaries, arrived = {}, {}, {}
    for hedge in (0, 3):
        cfg = FaultConfig(latency_median_s=0.05, latency_sigma=0.8)
        with LoopbackServer(cfg) as server:
            # structured replies the server fills in parse at once: without them every score reply was re-asked,
            # and re-asks are sampled (REASK_TEMPERATURE), which hedging never copies, so the drain could hold none
            with OpenAIJudge(model="m", base_url=server.base_url, structured="vllm", max_in_flight=8,
                             hedge=hedge) as judge:
                tables[hedge], summaries[hedge] = run_judging(
                    requests, judge, cache_dir=tmp_path / f"hedge{hedge}", protocol=protocol, max_in_flight=8,
                    progress=False, return_summary=True)
            stats = server.stats()
        # the client never holds more than 8; the server may still count a cancelled copy whose hang-up it has not
        # read yet when the slot's next request arrives
        cancelled = sum(1 for a in stats["attempts"] if a[2] == "cancelled")
        assert stats["max_in_flight"] <= 8 + cancelled and (hedge or cancelled == 0)
        # a copy cancelled before it reached the server is counted by the judge and never seen there
        assert summaries[hedge].sent <= len(stats["attempts"]) <= summaries[hedge].sent + summaries[hedge].hedged
        arrived[hedge] = len(stats["attempts"])
    assert summaries[0].hedged == 0 and arrived[0] == summaries[0].sent
    assert summaries[3].hedged > 0 and arrived[3] > summaries[3].sent
    assert summaries[0].sent == summaries[3].sent
    assert _same(tables[0], tables[3])
