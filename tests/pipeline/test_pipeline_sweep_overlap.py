"""Captioning and judging overlap in a sweep (real videos, real local Ray, the local captioner with an injected
caption latency, the OpenAI-compatible judge against a loopback server): the judge answers while captions are still
being made, and the stored verdicts and the results are exactly those of the same sweep run stage after stage."""

from __future__ import annotations

import json
import time
from pathlib import Path

import polars as pl
import pyarrow.parquet as pq
import pytest
from _sweeps import sweep_toml

from capeval.engine.sweep.config import load_sweep
from capeval.engine.sweep.runner import run_sweep

N_VIDEOS, N_CELLS = 6, 4


def _sweep(tmp_path_factory, base_url: str, overlap: bool) -> Path:
    sweep = tmp_path_factory.mktemp("sweepfile") / "overlap.toml"
    judge = {"name": "openai", "params": {"base_url": base_url, "model": "loopback", "api_key": "test-key",
                                          "structured": "vllm"}, "seeds": [0, 1]}
    sweep.write_text(sweep_toml("overlap-test", n_videos=N_VIDEOS, captioners=[{"name": "local",
                                "params": {"latency_s": 0.25}}], judges=[judge],
                                options={"overlap": overlap}))
    return sweep


def _run(tmp_path_factory, base_url: str, overlap: bool):
    sweep = _sweep(tmp_path_factory, base_url, overlap)
    out = tmp_path_factory.mktemp("overlap-on" if overlap else "overlap-off")
    committed: list[float] = []

    def log(msg: str) -> None:
        if " cell " in msg and "/" in msg:
            committed.append(time.time())

    result = run_sweep(load_sweep(sweep), out, progress=False, log=log)
    return result, committed


@pytest.fixture(scope="module")
def server():
    from capeval.benchmarks.loopback_server import FaultConfig, LoopbackServer

    with LoopbackServer(FaultConfig(latency_s=0.01)) as srv:
        yield srv


@pytest.fixture(scope="module")
def runs(tmp_path_factory, ray_local, server):
    return {overlap: _run(tmp_path_factory, server.base_url, overlap) for overlap in (True, False)}


def _verdicts(out: Path) -> dict[str, pl.DataFrame]:
    return {p.stem: pl.read_parquet(p).drop("latency_s") for p in sorted((out / "verdicts").glob("*.parquet"))}


def _last_caption_write(out: Path) -> float:
    """When the last caption segment was written: the time its name gives (the store names a segment by the time it
    writes it; a merged segment lists the segments it holds), not a file's mtime, which the merge of the trailing
    segments at the end of the run renews."""
    names = []
    for path in (out / "captions").glob("*.parquet"):
        merged = (pq.read_schema(path).metadata or {}).get(b"capeval.merged_from")
        names += json.loads(merged) if merged else [path.name]
    return max(int(name[:20]) for name in names) / 1e9


def test_overlapped_sweep_equals_stage_after_stage(runs):
    (on, _), (off, _) = runs[True], runs[False]
    assert on.cells_run == off.cells_run == N_CELLS
    assert on.caption_stats["captioned"] == off.caption_stats["captioned"] == N_VIDEOS * N_CELLS
    assert on.results.equals(off.results)
    v_on, v_off = _verdicts(on.out_dir), _verdicts(off.out_dir)
    assert v_on.keys() == v_off.keys() and len(v_on) == N_CELLS
    for key in v_on:
        assert v_on[key].equals(v_off[key]), f"cell {key}: verdicts differ between overlapped and staged runs"
    # the same requests were sent (how many rows found their answer cached depends on timing: a row whose twin is
    # still in flight waits for it; one that comes after it was answered reads it from this run's answers)
    assert on.judge_stats["sent"] == off.judge_stats["sent"] > 0
    assert on.exit_code == off.exit_code == 0


def _first_answer(out: Path) -> float:
    """When the judge's first answer was stored (the judgment cache records the time of every answer)."""
    import sqlite3

    with sqlite3.connect(out / "judge_cache" / "judgments.sqlite") as con:
        return con.execute("SELECT min(created) FROM judgments").fetchone()[0]


def test_judging_starts_while_captions_are_still_made(runs):
    (on, committed_on), (off, committed_off) = runs[True], runs[False]
    assert len(committed_on) == len(committed_off) == N_CELLS
    # overlapped: the judge answers before the caption stage writes its last captions
    assert _first_answer(on.out_dir) < _last_caption_write(on.out_dir)
    # stage after stage: every caption is written before the first judge answer and the first committed cell
    assert _first_answer(off.out_dir) >= _last_caption_write(off.out_dir)
    assert min(committed_off) >= _last_caption_write(off.out_dir)


def test_rerun_of_an_overlapped_sweep_redoes_nothing(runs, tmp_path_factory, server):
    on, _ = runs[True]
    sweep = _sweep(tmp_path_factory, server.base_url, True)
    again = run_sweep(load_sweep(sweep), on.out_dir, progress=False, log=lambda m: None)
    assert (again.cells_cached, again.cells_run) == (N_CELLS, 0)
    assert again.results.equals(on.results)


def test_overlap_falls_back_when_judge_actors_would_starve_decoding(tmp_path, ray_local):
    """On 2 CPUs a caption actor and a judge actor leave no CPU for the decode tasks the caption stage waits for:
    the sweep runs stage after stage and says why (it used to wait forever)."""
    from capeval.engine.sweep.runner import _overlap_fits

    def config(**options):
        path = tmp_path / f"s{len(options)}{sorted(options.items())}.toml".replace(" ", "")
        path.write_text(sweep_toml("fits", options=options))
        return load_sweep(path)

    assert _overlap_fits(config()) == (True, "")
    fits, why = _overlap_fits(config(judge_actors=1))
    assert not fits and "need 3 CPUs at once; the cluster has 2" in why
    assert _overlap_fits(config(overlap=False)) == (False, "options.overlap = false")
