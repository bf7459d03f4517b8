"""Two real processes judging the same requests on one judgment cache: every key is sent exactly once in all (claims
in the cache, re-checked right before sending), both get complete and identical verdict tables; a claim left by a
killed process is taken over at once."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from test_judging_streaming import _vidcapbench

from capeval.engine.store.judgment_cache import JudgmentCache

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]

_CHILD = textwrap.dedent("""
    import sys, time
    sys.path[:0] = [{here!r}, {repo!r}]
    import pyarrow.parquet as pq
    from _judging_backends import ScriptedJudge
    from capeval.engine.judging.runner import run_judging
    reqs = pq.read_table({reqs!r})
    judge = ScriptedJudge(log_path={log!r}, delay_s=0.08)
    while time.time() < {start}:  # both processes begin together
        time.sleep(0.005)
    out = run_judging(reqs, judge, cache_dir={cache!r}, protocol="vidcapbench", batch_size=4, max_in_flight=4,
                      progress=False)
    pq.write_table(out, {out!r})
""")


@pytest.mark.timeout(240)
def test_two_processes_on_one_cache_send_each_key_once(tmp_path):
    p, reqs = _vidcapbench(n_items=40, n_captions=4)
    pq.write_table(reqs, tmp_path / "requests.parquet")
    start = time.time() + 6.0  # after both interpreters have imported everything
    procs = []
    for name in ("a", "b"):
        code = _CHILD.format(here=str(HERE), repo=str(REPO), reqs=str(tmp_path / "requests.parquet"),
                             log=str(tmp_path / f"{name}.log"), cache=str(tmp_path / "cache"),
                             out=str(tmp_path / f"{name}.parquet"), start=start)
        procs.append(subprocess.Popen([sys.executable, "-c", code], cwd=REPO))
    for proc in procs:
        assert proc.wait(timeout=200) == 0
    sent = {n: (tmp_path / f"{n}.log").read_text().split() if (tmp_path / f"{n}.log").exists() else []
            for n in ("a", "b")}
    every = sent["a"] + sent["b"]
    assert len(every) == len(set(every)) == 80  # 40 answer + 40 score requests, each paid once in all
    assert sent["a"] and sent["b"]  # both worked (the work was shared, not done by one after the other)
    a, b = pq.read_table(tmp_path / "a.parquet"), pq.read_table(tmp_path / "b.parquet")
    assert a.num_rows == b.num_rows == 40
    assert a.drop_columns(["latency_s"]).equals(b.drop_columns(["latency_s"]))
    with JudgmentCache(tmp_path / "cache") as cache:
        assert len(cache) == 80 and cache._db.execute("SELECT COUNT(*) FROM claims").fetchone()[0] == 0


def test_claims_of_a_dead_process_are_taken_over_and_live_ones_are_waited_for(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    with JudgmentCache(tmp_path) as cache:
        cache._db.execute("INSERT INTO claims VALUES ('k-dead', ?, ?, ?)", (dead.pid, cache.host, time.time()))
        cache._db.execute("INSERT INTO claims VALUES ('k-live', ?, ?, ?)", (os.getppid(), cache.host, time.time()))
        cache._db.execute("INSERT INTO claims VALUES ('k-old', ?, ?, ?)", (os.getppid(), cache.host, time.time() - 1e4))
        res = cache.claim(["k-dead", "k-live", "k-old", "k-new"])
        assert sorted(res.claimed) == ["k-dead", "k-new", "k-old"] and list(res.held) == ["k-live"]
        assert res.held["k-live"][0] == os.getppid()
