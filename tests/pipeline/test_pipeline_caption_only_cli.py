"""A caption-only sweep (no [[protocols]]) through the real CLI: it prints a headline of its captions, exits 0 and
writes run.json (it used to crash in the results headline, which expected metric values, and write no record)."""

from __future__ import annotations

import json

import polars as pl
from _sweeps import write_sweep

from capeval.engine.cli import main as cli_main


def test_caption_only_sweep_via_cli_exits_0_and_writes_run_json(tmp_path, ray_local, capsys):
    sweep = write_sweep(tmp_path, "caponly", prompts=("brief",), frames=("uniform:2",), n_videos=2, duration_s=1.0,
                        protocols=(), judges=(), options={"n_resamples": None})
    out = tmp_path / "out"
    code = cli_main(["sweep", str(sweep), "--out", str(out), "--no-progress"])
    printed = capsys.readouterr()
    assert code == 0, printed.err[-2000:]
    record = json.loads((out / "run.json").read_text())
    runs = record["runs"] if isinstance(record, dict) and "runs" in record else record
    assert runs, record
    captions = pl.read_parquet(out / "captions.parquet")
    assert captions.height == 2 and set(captions["item_status"]) == {"ok"}
    assert "captions" in printed.out  # the headline counts the captions of each caption cell
    # the table it names is the one it wrote (a caption-only sweep writes captions.parquet, no results.parquet)
    assert f"full table: {out / 'captions.parquet'}" in printed.out and "results.parquet" not in printed.out


def test_results_go_to_the_stdout_of_the_moment(capsys):
    """print_results writes to sys.stdout as it is when called, not as it was when capeval.engine.cli.sweep was imported (a
    stream bound at import — e.g. an earlier test's closed capture — failed a later sweep with 'I/O operation on
    closed file')."""
    import io
    import sys
    from types import SimpleNamespace

    import capeval.engine.cli.sweep as sweep_cli

    old = io.StringIO()
    old.close()
    result = SimpleNamespace(results=pl.DataFrame(), out_dir=__import__("pathlib").Path("/nonexistent"),
                             summary=lambda: "summary line")
    import importlib

    real = sys.stdout
    try:
        sys.stdout = old  # the module imported while another stream was current (closed since)
        importlib.reload(sweep_cli)
        sys.stdout = io.StringIO()
        sweep_cli.print_results(result)
        printed = sys.stdout.getvalue()
    finally:
        sys.stdout = real
        importlib.reload(sweep_cli)
    assert "summary line" in printed
