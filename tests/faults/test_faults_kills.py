"""kill -9 at five points of one sweep (issue 8, fault suite): decode, caption, judge, between a cell's verdicts and
its metrics, and during the results write. Each run is a real `capeval sweep` process killed with SIGKILL (by its
own kill point, engine/sweep/faultpoints.py, or by the judge server mid-judging); every next run resumes the same
folder. The final results equal an uninterrupted run's, and no store holds a row twice."""

from __future__ import annotations

import os
import signal
import threading

import polars as pl
import pytest

from capeval.benchmarks.loopback_server import answer_for, completion_body
from _faults_support import (KILLED, AppServer, assert_no_duplicates, cli_env, finish, openai_judge, read_store,
                      start_capeval, sweep_text, synthetic)
from capeval.engine import exitcodes

N_VIDEOS, ITEMS_PER_VIDEO, N_CELLS = 4, 4, 2
PER_CELL = N_VIDEOS * ITEMS_PER_VIDEO


class KillingJudge:
    """An OpenAI-compatible judge that answers like the loopback server and SIGKILLs `victim` when its
    `kill_at`-th request arrives (a kill in the middle of judging, at a point the test knows)."""

    def __init__(self):
        self.requests = 0
        self.kill_at: int | None = None
        self.victim: int | None = None
        self.killed = threading.Event()

    def app(self):
        from aiohttp import web

        async def chat(request):
            import asyncio

            body = await request.json()
            self.requests += 1
            await asyncio.sleep(0.1)  # ~40 answers/s at 4 in flight: the cache's group commits (every 50 ms) keep up
            if self.kill_at is not None and self.requests >= self.kill_at and self.victim and not self.killed.is_set():
                os.kill(self.victim, signal.SIGKILL)
                self.killed.set()
            return web.Response(body=completion_body(body, answer_for(body)), content_type="application/json")

        app = web.Application()
        app.router.add_post("/v1/chat/completions", chat)
        return app


def _results(out) -> pl.DataFrame:
    cols = ["frame_spec", "family", "question_type", "metric", "value", "ci_low", "ci_high", "n", "n_no_verdict"]
    return pl.read_parquet(out / "results.parquet").select(cols).sort(cols[:4])


def _run(sweep_file, out, kill_at: str | None = None, judge: KillingJudge | None = None):
    env = cli_env(**({"CAPEVAL_KILL_AT": kill_at} if kill_at else {}))
    proc = start_capeval(["sweep", sweep_file, "--out", out, "--no-progress"], env=env)
    if judge is not None:
        judge.victim = proc.pid
    return finish(proc, timeout=300)


@pytest.mark.slow
def test_kill_nine_at_five_points_then_resume(tmp_path):
    judge = KillingJudge()
    with AppServer(judge.app()) as server:
        # The judge's arrivals are the requests paid, so no tail hedging: its copies are extra arrivals whose number
        # depends on timing (a reference run with copies set a kill point the killed run never reached).
        text = sweep_text(dataset=synthetic(N_VIDEOS), frames=("uniform:2", "uniform:3"),
                          judge=openai_judge(server.base_url, max_in_flight=4, hedge=0))
        path = tmp_path / "sweep.toml"
        path.write_text(text)

        reference = _run(path, tmp_path / "reference")
        assert reference.returncode == exitcodes.OK, reference
        distinct = judge.requests  # requests with equal prompts (equal captions) are sent once, across cells too
        assert 0 < distinct <= N_CELLS * PER_CELL
        judge.requests = 0

        out = tmp_path / "killed"
        runs = {}
        runs["decode"] = _run(path, out, "decode@2")
        assert not (out / "metrics").exists() or not list((out / "metrics").glob("*.parquet"))
        runs["caption"] = _run(path, out, "caption@1")
        assert not list((out / "verdicts").glob("*.parquet"))
        judge.kill_at = distinct - 1  # near the end of judging: the last cell is killed mid-judging
        runs["judge"] = _run(path, out, judge=judge)
        assert judge.killed.is_set()
        judge.kill_at = None
        committed = len(list((out / "metrics").glob("*.parquet")))
        assert committed < N_CELLS
        runs["verdicts/metrics"] = _run(path, out, "cell_verdicts@1")
        # the next cell's verdicts are written, its metrics are not
        assert len(list((out / "verdicts").glob("*.parquet"))) == committed + 1, runs["verdicts/metrics"]
        assert len(list((out / "metrics").glob("*.parquet"))) == committed
        runs["results write"] = _run(path, out, "write:results.parquet@1")
        assert not (out / "results.parquet").exists()
        for point, run in runs.items():
            assert run.returncode == KILLED, (point, run)

        final = _run(path, out)
        assert final.returncode == exitcodes.OK, final
        assert f"{N_CELLS} cells: {N_CELLS} cached (skipped), 0 to run" in final.stderr
    assert _results(out).equals(_results(tmp_path / "reference"))
    counts = assert_no_duplicates(out)
    assert counts["verdicts"] == N_CELLS * PER_CELL and counts["captions"] == N_CELLS * N_VIDEOS
    assert counts == assert_no_duplicates(tmp_path / "reference")
    # what was answered before the kills was not paid again: at most the requests in flight at the judge kill (4)
    # and the answers of the cache's last group commit window (50 ms, ~2 answers at this pace), with some slack
    assert judge.requests <= distinct + 8
    assert set(read_store(out / "metrics")["cell_status"]) == {"complete"}


# Group commit at small sizes (3 rows a segment, a merge once 3 small segments trail) so that a sweep of a few videos
# commits and compacts many times; the interval is long, so what is buffered at a kill depends on nothing but rows.
SMALL_COMMITS = {"CAPEVAL_STORE_COMMIT": "rows=3,interval_s=60,compact_after=3"}


def _run_env(sweep_file, out, kill_at: str | None = None):
    env = cli_env(**SMALL_COMMITS, **({"CAPEVAL_KILL_AT": kill_at} if kill_at else {}))
    return finish(start_capeval(["sweep", sweep_file, "--out", out, "--no-progress"], env=env), timeout=300)


@pytest.mark.slow
def test_kill_nine_during_group_commits_and_compaction_then_resume(tmp_path):
    """The group-committed stores (captions, frames index): a kill -9 with caption rows buffered, one right after a
    commit, and one inside a compaction (merged segment renamed, parts not yet unlinked) each lose at most the
    buffered rows; the rerun redoes exactly those, the results equal an uninterrupted run's, no row is stored
    twice, and at every point each row is readable once."""
    from capeval.engine.store import SegmentStore

    n_videos = 8
    path = tmp_path / "sweep.toml"
    path.write_text(sweep_text(dataset=synthetic(n_videos, duration_s=0.5), frames=("uniform:2", "uniform:3")))
    reference = _run_env(path, tmp_path / "reference")
    assert reference.returncode == exitcodes.OK, reference

    out = tmp_path / "killed"
    runs = {"caption, rows buffered": _run_env(path, out, "caption@5"),
            "after a captions commit": _run_env(path, out, "commit:captions@1"),
            "inside a compaction": _run_env(path, out, "compact@1")}
    for point, run in runs.items():
        assert run.returncode == KILLED, (point, run)
        for name, key in (("captions", ["caption_key"]), ("frames_index", ["video_id", "frame_spec"])):
            stored = pl.from_arrow(SegmentStore(out / name).read()) if (out / name).exists() else pl.DataFrame()
            assert stored.is_empty() or stored.select(key).is_duplicated().sum() == 0, (point, name)
    # the compaction was killed between its rename and the unlinking: parts and merge are both on disk
    on_disk = [p.name for p in out.rglob("*.parquet") if p.parent.name in ("captions", "frames_index")]
    assert any(n.endswith("-merged.parquet") for n in on_disk)

    final = _run_env(path, out)
    assert final.returncode == exitcodes.OK, final
    assert _results(out).equals(_results(tmp_path / "reference"))
    counts = assert_no_duplicates(out)  # every file on disk read raw: the leftover parts are gone
    assert counts == assert_no_duplicates(tmp_path / "reference")
    assert counts["captions"] == 2 * n_videos and counts["frames_index"] == 2 * n_videos
