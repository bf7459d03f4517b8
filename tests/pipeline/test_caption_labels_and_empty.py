"""Captioner identity and empty captions through a real sweep (issue 25, items 6 and 7): two OpenAI-compatible
captioner entries told apart by their `label` are stored under those labels (caption rows, verdict rows), so the
report's length sensitivity finds their caption texts; a reply whose content is empty or whitespace is a failed
caption with its reason, never judged, and the next run asks the captioner again. Real local Ray, a real HTTP
captioner server on 127.0.0.1 (tests/pipeline/_caption_server.py), the local judge."""

from __future__ import annotations

import polars as pl
from _caption_server import RecordingServer
from _sweeps import write_sweep

from capeval.engine import exitcodes
from capeval.engine.report.across import across_for_run
from capeval.engine.report.rundir import load_run
from capeval.engine.sweep.config import load_sweep
from capeval.engine.sweep.runner import run_sweep

EMPTY, BLANK = "", " \n\t "


def _sweep(path, base_url: str):
    def captioner(label: str, model: str) -> dict:
        return {"name": "openai", "label": label, "params": {"model": model, "base_url": base_url, "api_key": "t"}}

    return load_sweep(write_sweep(path, "labels", prompts=("brief",), frames=("uniform:2",), n_videos=2,
                                  duration_s=1.0,
                                  captioners=[captioner("capA", "model-a"), captioner("capB", "model-b"),
                                              captioner("capE", "empty"), captioner("capW", "blank")],
                                  options={"n_resamples": 20}))


def _stored(folder) -> pl.DataFrame:
    return pl.concat([pl.read_parquet(p) for p in sorted(folder.glob("*.parquet"))], how="diagonal_relaxed")


def test_labels_name_the_captions_and_empty_captions_fail(tmp_path, ray_local):
    out = tmp_path / "out"
    with RecordingServer(latency_s=0.01, contents={"empty": EMPTY, "blank": BLANK}) as server:
        config = _sweep(tmp_path / "s.toml", server.base_url)
        first = run_sweep(config, out, progress=False, log=lambda m: None)
        asked_first = sum(b["model"] in ("empty", "blank") for b in server.bodies)
        second = run_sweep(config, out, progress=False, log=lambda m: None)
        asked_second = sum(b["model"] in ("empty", "blank") for b in server.bodies)

    # item 6: the label is the captioner's identity in every store
    captions = _stored(out / "captions")
    assert sorted(set(captions["captioner"])) == ["capA", "capB"]
    verdicts = _stored(out / "verdicts")
    assert set(verdicts["captioner"]) == {"capA", "capB", "capE", "capW"}
    length = across_for_run(load_run(out), "protocols", n_resamples=20)
    assert not any("no caption texts" in n for n in length.notes), length.notes
    assert length.length["n_captions"].max() == 4  # capA's and capB's captions of both videos
    assert {"capA", "capB"} <= set(length.controlled["captioner"])

    # item 7: an empty or whitespace-only reply is a failed caption saying so, never judged, asked again next run
    assert first.exit_code == second.exit_code == exitcodes.FAILURES
    assert asked_first == 4 and asked_second == 8  # 2 videos x 2 captioners, each run
    failed = verdicts.filter(pl.col("captioner").is_in(["capE", "capW"]))
    assert failed.height and (failed["item_status"] == "caption_failed").all() and failed["retryable"].all()
    assert failed["raw_output"].is_null().all()  # no judge request was built from an empty caption
    errors = set(failed["error"])
    assert any("caption is empty" in e and "an empty reply" in e for e in errors), errors
    assert any("caption is empty" in e and "only whitespace" in e for e in errors), errors
    metrics = _stored(out / "metrics")
    status = dict(metrics.select("captioner", "cell_status").unique().iter_rows())
    assert status == {"capA": "complete", "capB": "complete", "capE": "incomplete", "capW": "incomplete"}
    judged = verdicts.filter(pl.col("captioner").is_in(["capA", "capB"]))
    assert (judged["item_status"] == "ok").all()
