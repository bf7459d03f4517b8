"""`dream1k_synthetic`: real H.264 clips with DREAM-1K-style items (the `dream1k` kind's shape) whose reference
events are the ground truth's motions and bounces, and which the `dream1k` protocol judges end to end with the local
judge in both modes."""

from __future__ import annotations

import json
from pathlib import Path

import av
import polars as pl
import pyarrow as pa
import pytest

from capeval.engine.datasets.registry import load
from capeval.engine.protocols.dream1k import synthetic_kind
from capeval.engine.protocols.lvcap import dream1k as dream1k_release
from capeval.engine.registry import lookup
from capeval.engine.schemas import CAPTIONS, conform

PACKS = Path(__file__).resolve().parents[2].parent / "shared" / "protocols"


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    out = tmp_path_factory.mktemp("d1ksyn")
    return out, load("dream1k_synthetic", {"n_videos": 4, "seed": 3, "duration_s": 3.0}, base_dir=out, out_dir=out,
                     name="syn")


def test_items_have_the_dream1k_kinds_shape(loaded):
    _, data = loaded
    items = data.items
    assert items.num_rows == 4
    like = dream1k_release.clip_items([("v", ["An event."], "A description.", "DREAM/x",
                                        {"duration": 1.0, "dataset": "DREAM/x", "idx": "DREAM/x_0", "n_events": 1,
                                         "n_shots": 1, "n_subjects": 1})])
    assert items.schema == like.schema
    for row in items.to_pylist():
        assert (row["benchmark"], row["task"], row["item_id"]) == ("dream1k", "events", row["video_id"])
        events = json.loads(row["annotation"])
        assert events and all(isinstance(e, str) and e.startswith("The ") for e in events)
        extra = json.loads(row["extra"])
        assert set(json.loads(like.column("extra")[0].as_py())) <= set(extra)
        assert extra["n_events"] == len(events) and extra["n_shots"] == 1
        assert row["category"] == extra["dataset"] and row["category"].startswith("DREAM/synthetic_")
        assert extra["duration"] == pytest.approx(3.0)
        assert all(e in row["answer"] for e in events)  # the description narrates the events
    assert lookup("protocol", "dream1k").dataset_problem("dream1k_synthetic", items) is None


def test_videos_are_real_and_reused(loaded):
    out, data = loaded
    for video_id, path in data.media.items():
        with av.open(path) as f:
            assert f.streams.video[0].codec_context.name == "h264"
            assert sum(1 for _ in f.decode(video=0)) == 36
    first = Path(next(iter(data.media.values())))
    mtime = first.stat().st_mtime_ns
    again = load("dream1k_synthetic", {"n_videos": 4, "seed": 3, "duration_s": 3.0}, base_dir=out, out_dir=out,
                 name="syn")
    assert first.stat().st_mtime_ns == mtime and again.items.equals(data.items)


def _position(p0: float, v: float, t: float, span: float) -> float:
    x = (p0 + v * t) % (2 * span)
    return x if x <= span else 2 * span - x


def test_events_follow_the_drawn_motion():
    truth = {"background": "gray", "n_shapes": 2, "shapes": [
        {"shape": "circle", "color": "red", "size_px": 20, "start": [130.0, 50.0], "velocity": [30.0, 2.0]},
        {"shape": "circle", "color": "red", "size_px": 20, "start": [10.0, 90.0], "velocity": [1.0, -1.0]}]}
    events = synthetic_kind.clip_events(truth, (160, 120), 3.0)
    # the first circle reaches the right edge (x = 140) after 1/3 s, the second barely moves
    assert events == ["The first red circle moves to the right.", "The second red circle stays still.",
                      "The first red circle bounces off the right edge."]
    two = {**truth, "shapes": truth["shapes"][:1] + [{**truth["shapes"][0], "color": "orange"}]}
    assert synthetic_kind.description(two, []) == \
        "On a plain gray background there are a red circle and an orange circle."
    for t, edge in synthetic_kind.bounces(truth["shapes"][0], (160, 120), 10.0):
        x = _position(130.0, 30.0, t, 140.0)
        assert x == pytest.approx(140.0 if edge == "right edge" else 0.0)
    down = {"shape": "square", "color": "blue", "size_px": 20, "start": [70.0, 10.0], "velocity": [0.0, -40.0]}
    assert [e for _, e in synthetic_kind.bounces(down, (160, 120), 4.0)] == ["top edge", "bottom edge"]


@pytest.mark.parametrize("mode", ["strict", "official"])
def test_local_judge_runs_it_end_to_end(loaded, mode, tmp_path):
    from capeval.adapters.local_judge import LocalJudge
    from capeval.engine.judging.runner import run_judging

    _, data = loaded
    protocol = lookup("protocol", "dream1k")
    items = data.items
    refs = items.column("answer").to_pylist()
    vids = items.column("video_id").to_pylist()
    # two captioners: the reference itself, and a caption that says nothing of the motion
    texts = refs + ["A still picture of some coloured shapes."] * len(vids)
    captions = conform(pa.table({"caption_key": [f"c{i}" for i in range(2 * len(vids))],
                                 "captioner": ["ref"] * len(vids) + ["vague"] * len(vids),
                                 "prompt_id": ["dream1k"] * 2 * len(vids), "frame_spec": ["f"] * 2 * len(vids),
                                 "video_id": vids * 2, "text": texts}), CAPTIONS)
    params = {"mode": mode} if mode == "strict" else {"mode": "official", "prompts": str(PACKS / "autodq.toml")}
    judge = LocalJudge()
    requests = protocol.build_requests(items, captions, judge=judge.name, judge_revision=judge.revision, **params)
    verdicts = pl.from_arrow(run_judging(requests, judge, cache_dir=tmp_path, protocol=protocol,
                                         protocol_params=params, progress=False))
    assert set(verdicts["protocol"]) == {"dream1k"}
    assert (verdicts.filter(pl.col("step") != "extract")["verdict"] >= 0).all()  # every reply parsed
    metrics = protocol.compute_metrics(verdicts, items=pl.from_arrow(items), n_resamples=0, mode=mode)
    f1 = {r["captioner"]: r["value"] for r in metrics.filter((pl.col("bucket") == "all") & (pl.col("metric") == "F1"))
          .iter_rows(named=True)}
    assert f1["ref"] > 80.0 and (f1["vague"] or 0.0) < f1["ref"]
    assert any(b.startswith("source:DREAM/synthetic_") for b in metrics["bucket"])
