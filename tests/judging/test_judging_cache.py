"""Judgment cache and runner: a second run sends nothing; re-asks are bounded and cached; backend errors are kept as
ERROR rows and retried next run; kill -9 mid-run loses nothing committed and the rerun asks only for the rest."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from _judging_backends import ScriptedJudge
from capeval.engine.protocols.capability.release import load_captions, load_items
from capeval.engine.judging.runner import run_judging
from capeval.engine.registry import lookup
from capeval.engine.schemas import NO_VERDICT, VERDICTS, ParseStatus
from capeval.engine.store.segments import SegmentStore

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]


def _capability_subset(shared_data, per_task=3):
    items = load_items(shared_data / "capability" / "annotations")
    keep, seen = [], {}
    for i, task in enumerate(items.column("task").to_pylist()):
        if seen.get(task, 0) < per_task:
            keep.append(i)
            seen[task] = seen.get(task, 0) + 1
    items = items.take(keep)
    captions = load_captions(shared_data / "capability" / "captions" / "qwen2.5vl_7b", items)
    ids = set(items.column("video_id").to_pylist())
    captions = captions.filter(pa.array([v in ids for v in captions.column("video_id").to_pylist()]))
    return items, captions


@pytest.fixture(scope="module")
def capability_requests(shared_data):
    items, captions = _capability_subset(shared_data)
    judge = ScriptedJudge()
    # structured=True: JSON-schema requests, which the scripted judge answers validly from the schema
    return lookup("protocol", "capability").build_requests(items, captions, judge=judge.name,
                                                           judge_revision=judge.revision, structured=True)


def test_second_identical_run_sends_zero_requests(tmp_path, capability_requests):
    reqs = capability_requests
    assert reqs.num_rows >= 39  # 13 tasks x 3 items, dynamic_object_number has one request per object
    first = ScriptedJudge()
    v1, s1 = run_judging(reqs, first, cache_dir=tmp_path, protocol="capability", batch_size=8, progress=False,
                         return_summary=True)
    unique = len(set(reqs.column("request_key").to_pylist()))
    assert len(first.asked) == s1.sent == unique and s1.cached == 0
    assert v1.num_rows == reqs.num_rows and v1.schema.equals(VERDICTS)
    assert all(len(batch) <= 8 for batch in first.calls)
    second = ScriptedJudge()
    v2, s2 = run_judging(reqs, second, cache_dir=tmp_path, protocol="capability", batch_size=8, progress=False,
                         return_summary=True)
    assert second.calls == [] and s2.sent == 0 and s2.cached == unique
    assert v2.drop_columns(["latency_s"]).equals(v1.drop_columns(["latency_s"]))


def test_malformed_output_is_reasked_boundedly_then_kept_as_failed(tmp_path, capability_requests):
    reqs = capability_requests.slice(0, 5)
    judge = ScriptedJudge(malformed="I cannot answer in JSON, sorry.")  # malformed at temperature 0 only
    v, s = run_judging(reqs, judge, cache_dir=tmp_path, protocol="capability", max_reasks=2, progress=False,
                       return_summary=True)
    assert s.reasks == 5 and set(v.column("parse_status").to_pylist()) == {ParseStatus.REPAIRED}
    assert len({k for k in judge.asked}) == 10  # 5 first asks + 5 re-asks, each with its own key
    always_bad = ScriptedJudge(malformed="nope")
    always_bad.answer_text = lambda r: "nope"  # never parseable, at any temperature
    v, s = run_judging(reqs, always_bad, cache_dir=tmp_path / "b", protocol="capability", max_reasks=2,
                       progress=False, return_summary=True)
    assert len(always_bad.asked) == 5 * 3  # first ask + 2 re-asks, then it stops
    assert v.num_rows == 5 and set(v.column("verdict").to_pylist()) == {NO_VERDICT}
    assert set(v.column("parse_status").to_pylist()) == {ParseStatus.FAILED} and s.parse_failures == 5
    assert all(v.column("raw_output").to_pylist())  # what the judge said is kept


def test_backend_errors_are_rows_and_are_retried_next_run(tmp_path, capability_requests):
    reqs = capability_requests.slice(0, 6)
    bad = set(reqs.column("request_key").to_pylist()[:2])
    v, s = run_judging(reqs, ScriptedJudge(fail_keys=bad), cache_dir=tmp_path, protocol="capability",
                       progress=False, return_summary=True)
    assert s.errors == 2 and v.num_rows == 6
    assert sorted(v.filter(pa.compute.equal(v["parse_status"], int(ParseStatus.ERROR)))["request_key"].to_pylist()) \
        == sorted(bad)
    retry = ScriptedJudge()
    v, s = run_judging(reqs, retry, cache_dir=tmp_path, protocol="capability", progress=False, return_summary=True)
    assert sorted(retry.asked) == sorted(bad) and s.errors == 0


def test_multistep_chain_is_cached_and_failed_answers_keep_a_score_row(tmp_path):
    import json

    from capeval.engine.schemas import CAPTIONS, ITEMS, conform

    items = conform(pa.table({"benchmark": ["vidcapbench"] * 3, "task": ["default"] * 3, "item_id": ["a", "b", "c"],
                              "video_id": ["v"] * 3, "annotation": ["How many?", "What color?", "Where?"],
                              "answer": ["two", "red", "park"]}), ITEMS)
    caps = conform(pa.table({"caption_key": ["k"], "captioner": ["m"], "prompt_id": ["p"], "frame_spec": ["f"],
                             "video_id": ["v"], "text": ["Two red kites over a park."]}), CAPTIONS)
    p = lookup("protocol", "vidcapbench")
    judge = ScriptedJudge()
    reqs = p.build_requests(items, caps, judge=judge.name, judge_revision=judge.revision, seeds=(0, 1))
    failing = {reqs.column("request_key")[0].as_py()}
    judge.fail_keys = failing
    v, s = run_judging(reqs, judge, cache_dir=tmp_path, protocol=p, progress=False, return_summary=True)
    assert v.num_rows == 6 and set(v.column("step").to_pylist()) == {"score"}
    assert s.steps == {"answer": 6, "score": 6} and len(judge.asked) == 6 + 5
    err = v.filter(pa.compute.equal(v["parse_status"], int(ParseStatus.ERROR)))
    assert err.num_rows == 1 and err["verdict"][0].as_py() == NO_VERDICT and "answer step" in err["error"][0].as_py()
    ok = v.filter(pa.compute.equal(v["parse_status"], int(ParseStatus.OK)))
    assert all(json.loads(d)["answer"].startswith("free-text") for d in ok["detail"].to_pylist())
    again = ScriptedJudge()
    v2, _ = run_judging(reqs, again, cache_dir=tmp_path, protocol=p, progress=False, return_summary=True)
    # only the failed chain is re-sent: its answer step, then its score step
    assert len(again.calls) == 2 and again.calls[0] == [failing.pop()] and len(again.asked) == 2
    assert v2.num_rows == 6 and set(v2["parse_status"].to_pylist()) == {ParseStatus.OK}


_CHILD = textwrap.dedent("""
    import sys
    sys.path[:0] = [{here!r}, {repo!r}]
    import pyarrow.parquet as pq
    from _judging_backends import ScriptedJudge, StreamingScriptedJudge
    from capeval.engine.judging.runner import run_judging
    reqs = pq.read_table({reqs!r})
    if {stream!r}:  # a streaming backend: 4 in flight, each answered after up to 2 x delay
        judge = StreamingScriptedJudge(log_path={log!r}, max_delay_s=2 * {delay})
    else:
        judge = ScriptedJudge(log_path={log!r}, delay_s={delay})
    out = run_judging(reqs, judge, cache_dir={cache!r}, protocol="capability", batch_size=4, max_in_flight=4,
                      progress=False)
    pq.write_table(out, {out!r})
""")


def _child(tmp_path, name, delay, stream=False):
    paths = {"stream": stream, "here": str(HERE), "repo": str(REPO), "reqs": str(tmp_path / "requests.parquet"),
             "log": str(tmp_path / f"{name}.log"), "cache": str(tmp_path / "cache"),
             "out": str(tmp_path / f"{name}.parquet"), "delay": delay}
    return subprocess.Popen([sys.executable, "-c", _CHILD.format(**paths)], cwd=REPO), paths


def _cached_keys(cache_dir: Path) -> set[str]:
    db = cache_dir / "judgments.sqlite"
    if not db.exists():
        return set()
    with sqlite3.connect(db) as con:
        try:
            return {r[0] for r in con.execute("SELECT request_key FROM judgments")}
        except sqlite3.OperationalError:  # table not created yet
            return set()


@pytest.mark.timeout(180)
@pytest.mark.parametrize("stream", [False, True], ids=["batches", "stream"])
def test_kill_minus_9_mid_run_then_rerun_completes_without_duplicates(tmp_path, capability_requests, stream):
    reqs = capability_requests
    pq.write_table(reqs, tmp_path / "requests.parquet")
    proc, paths = _child(tmp_path, "killed", delay=0.25, stream=stream)
    deadline = time.time() + 120
    while len(_cached_keys(tmp_path / "cache")) < 12 and time.time() < deadline and proc.poll() is None:
        time.sleep(0.05)
    assert proc.poll() is None, "the run finished before it could be killed"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    kept = _cached_keys(tmp_path / "cache")
    asked_before = Path(paths["log"]).read_text().split()
    all_keys = set(reqs.column("request_key").to_pylist())
    assert 12 <= len(kept) < len(all_keys) and kept <= set(asked_before)
    # lost = asked but not in the cache: the window (4) plus what arrived in the last commit interval (~50 ms)
    assert len(set(asked_before) - kept) <= 8
    assert not Path(paths["out"]).exists()

    proc, paths = _child(tmp_path, "rerun", delay=0.0, stream=stream)
    assert proc.wait(timeout=120) == 0
    asked_after = Path(paths["log"]).read_text().split()
    assert set(asked_after) == all_keys - kept and len(asked_after) == len(set(asked_after))
    out = pq.read_table(paths["out"])
    assert out.num_rows == reqs.num_rows
    rows = list(zip(out["request_key"].to_pylist(), out["item_id"].to_pylist(), out["sub_index"].to_pylist()))
    assert len(set(rows)) == len(rows)
    assert set(out["parse_status"].to_pylist()) <= {ParseStatus.OK, ParseStatus.REPAIRED}
    with sqlite3.connect(tmp_path / "cache" / "judgments.sqlite") as con:
        assert con.execute("SELECT COUNT(*) FROM judgments").fetchone()[0] == len(all_keys)


def test_segment_store_appends_atomically_and_reads_back(tmp_path):
    store = SegmentStore(tmp_path / "seg", schema=VERDICTS)
    (tmp_path / "seg" / ".stray.parquet.tmp").write_bytes(b"half-written")  # what a crash mid-write leaves
    rows = [{"request_key": f"k{i}", "protocol": "p", "task": "t", "item_id": f"i{i}", "video_id": "v", "judge": "j",
             "verdict": 1, "parse_status": 0} for i in range(5)]
    store.append(pa.Table.from_pylist(rows[:3]))
    store.append(pa.Table.from_pylist(rows[2:]))  # k2 twice
    assert len(store.segments()) == 2 and len(store) == 6
    assert store.existing_keys("request_key") == {f"k{i}" for i in range(5)}
    assert store.read(unique_on="request_key")["request_key"].to_pylist() == [f"k{i}" for i in range(5)]
    store.compact(unique_on="request_key")
    assert len(store.segments()) == 1 and len(store) == 5 and not list((tmp_path / "seg").glob(".*.tmp"))
