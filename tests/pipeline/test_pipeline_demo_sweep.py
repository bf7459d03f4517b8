"""The demo sweep end to end on real generated videos and real local Ray: decode -> caption -> judge -> metrics ->
results table; a rerun redoes nothing; a sweep killed with SIGKILL resumes without redoing finished cells and ends
with the same table as an uninterrupted run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pytest

from _sweeps import sweep_toml
from capeval.engine.sweep.config import load_sweep
from capeval.engine.sweep.runner import run_sweep


REPO = Path(__file__).resolve().parents[2]
SWEEP = sweep_toml("demo-test", frames=("uniform:2", "uniform:6"), n_videos=3)
N_VIDEOS, ITEMS_PER_VIDEO, N_CELLS = 3, 4, 4


@pytest.fixture(scope="module")
def sweep_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("sweepfile") / "demo_test.toml"
    path.write_text(SWEEP)
    return path


@pytest.fixture(scope="module")
def uninterrupted(sweep_file, tmp_path_factory, ray_local):
    out = tmp_path_factory.mktemp("uninterrupted")
    return run_sweep(load_sweep(sweep_file), out, progress=False, log=lambda m: None)


def test_demo_sweep_end_to_end(uninterrupted):
    res = uninterrupted
    assert (res.cells_total, res.cells_cached, res.cells_run) == (N_CELLS, 0, N_CELLS)
    assert res.caption_stats["captioned"] == N_VIDEOS * N_CELLS and res.caption_stats["failed"] == 0
    df = res.results
    overall = df.filter((pl.col("family") == "all") & (pl.col("question_type") == "all"))
    cells = overall.select("prompt_id", "frame_spec").unique()
    assert cells.height == N_CELLS
    assert set(overall["metric"]) == {"CapP", "CapR", "CapF1"}
    # every item of every video judged once per cell, nothing silently dropped
    assert set(overall["n"] + overall["n_no_verdict"]) == {N_VIDEOS * ITEMS_PER_VIDEO}
    assert overall["value"].is_between(0, 100).all()
    assert ((overall["ci_low"] <= overall["value"]) & (overall["value"] <= overall["ci_high"])).all()
    on_disk = pl.read_parquet(res.out_dir / "results.parquet")
    assert on_disk.equals(df) and pl.read_csv(res.out_dir / "results.csv").height == df.height
    # the verdicts behind the metrics are stored, keyed by cell
    verdicts = pl.concat([pl.read_parquet(p) for p in sorted((res.out_dir / "verdicts").glob("*.parquet"))])
    assert verdicts.height == N_CELLS * N_VIDEOS * ITEMS_PER_VIDEO and verdicts["cell_key"].n_unique() == N_CELLS


def test_rerun_redoes_nothing(uninterrupted, sweep_file):
    out = uninterrupted.out_dir
    before = {d: sorted(p.name for p in (out / d).glob("*.parquet")) for d in ("captions", "verdicts", "metrics")}
    again = run_sweep(load_sweep(sweep_file), out, progress=False, log=lambda m: None)
    assert (again.cells_cached, again.cells_run) == (N_CELLS, 0)
    after = {d: sorted(p.name for p in (out / d).glob("*.parquet")) for d in before}
    assert after == before
    assert again.results.equals(uninterrupted.results)


def _sweep_cmd(sweep_file: Path, out: Path) -> list[str]:
    run_cli = "import sys; from capeval.engine.cli import main; sys.exit(main(sys.argv[1:]))"
    return [sys.executable, "-c", run_cli, "sweep", str(sweep_file), "--out", str(out), "--no-progress"]


def test_sigkilled_sweep_resumes_without_redoing_cells(uninterrupted, sweep_file, tmp_path):
    out = tmp_path / "killed"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.Popen(_sweep_cmd(sweep_file, out), cwd=REPO, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    metrics = out / "metrics"
    deadline = time.monotonic() + 240
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            if metrics.is_dir() and any(metrics.glob("*.parquet")):
                break
            time.sleep(0.01)
        assert proc.poll() is None, "the sweep finished before any cell could be observed; cannot test a kill"
        os.killpg(proc.pid, signal.SIGKILL)  # the driver and its Ray processes, with no chance to clean up
    finally:
        proc.wait(timeout=60)
    done_before = {p.name: pl.read_parquet(p)["cell_key"][0] for p in metrics.glob("*.parquet")}
    assert 1 <= len(done_before) < N_CELLS
    assert not (out / "results.parquet").exists()

    rerun = subprocess.run(_sweep_cmd(sweep_file, out), cwd=REPO, env=env, capture_output=True, text=True,
                           timeout=300)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert f"{N_CELLS} cells: {len(done_before)} cached (skipped), {N_CELLS - len(done_before)} to run" in rerun.stderr
    after = {p.name: pl.read_parquet(p)["cell_key"][0] for p in metrics.glob("*.parquet")}
    assert {k: after[k] for k in done_before} == done_before  # finished cells untouched
    new_keys = [v for k, v in after.items() if k not in done_before]
    assert len(new_keys) == N_CELLS - len(done_before) and not set(new_keys) & set(done_before.values())
    final = pl.read_parquet(out / "results.parquet")
    assert final.equals(uninterrupted.results)


def test_judge_on_ray_actor_pool_gives_the_same_table(sweep_file, uninterrupted, tmp_path, ray_local):
    """options.judge_actors = 1: the judge runs in a Ray actor (capeval.adapters.ray_pool.JudgePool), same results."""
    pooled = sweep_file.parent / "demo_pool.toml"
    pooled.write_text(SWEEP.replace("n_resamples = 100", "n_resamples = 100\njudge_actors = 1"))
    config = load_sweep(pooled)
    assert config.options.judge_actors == 1
    res = run_sweep(config, tmp_path, progress=False, log=lambda m: None)
    cols = ["prompt_id", "frame_spec", "family", "question_type", "metric", "value", "ci_low", "ci_high", "n"]
    order = cols[:5]
    assert res.results.select(cols).sort(order).equals(uninterrupted.results.select(cols).sort(order))
