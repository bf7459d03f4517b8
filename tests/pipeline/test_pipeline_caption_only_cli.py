"""A caption-only sweep (no [[protocols]]) through the real CLI: it prints a headline of its captions, exits 0 and
writes run.json (it used to crash in the results headline, which expected metric values, and write no record)."""

from __future__ import annotations

import json

import polars as pl

from engine.cli import main as cli_main


def test_caption_only_sweep_via_cli_exits_0_and_writes_run_json(tmp_path, ray_local, capsys):
    sweep = tmp_path / "caponly.toml"
    sweep.write_text('name = "caponly"\nprompts = ["brief"]\nframes = ["uniform:2"]\n\n[[datasets]]\n'
                     'name = "shapes"\nkind = "synthetic"\nn_videos = 2\nduration_s = 1.0\n\n'
                     '[[captioners]]\nname = "local"\n\n[options]\nbatch_size = 2\n')
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
