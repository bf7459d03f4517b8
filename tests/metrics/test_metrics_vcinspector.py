"""VC-Inspector mean score and score shares against hand-computed values."""

import json

import polars as pl
import pytest

from capeval.engine.protocols.vcinspector.metrics import compute_metrics


def table(scores, videos):
    return pl.DataFrame({"item_id": [f"i{k}" for k in range(len(scores))], "task": "t", "video_id": videos,
                         "captioner": "m", "prompt_id": "p", "frame_spec": "f",
                         "verdict": [s - 1 if s > 0 else -1 for s in scores]}, schema_overrides={"verdict": pl.Int8})


def get(frame, metric, category="all"):
    return frame.filter((pl.col("metric") == metric) & (pl.col("category") == category)).row(0, named=True)


def test_mean_score_and_shares():
    scores, videos = [5, 4, 4, 1, 0], ["a", "a", "b", "c", "c"]  # 0 = no verdict
    out = compute_metrics(table(scores, videos), n_resamples=200, seed=3)
    row = get(out, "mean_score")
    assert row["value"] == pytest.approx((5 + 4 + 4 + 1) / 4) and row["n_no_verdict"] == 1
    assert row["ci_low"] <= row["value"] <= row["ci_high"]
    assert get(out, "share_4")["value"] == pytest.approx(100 * 2 / 5)
    paper = compute_metrics(table(scores, videos), n_resamples=0, paper_compatible=True)
    assert get(paper, "share_4")["value"] == pytest.approx(100 * 2 / 4)
    assert get(paper, "mean_score")["ci_low"] is None  # no resamples: no CI


def test_per_category_with_items():
    t = table([5, 1, 3], ["a", "b", "c"])
    items = pl.DataFrame({"task": "t", "item_id": ["i0", "i1", "i2"], "category": ["x", "x", "y"]})
    out = compute_metrics(t, items=items, n_resamples=20)
    assert get(out, "mean_score", "x")["value"] == pytest.approx(3.0)
    assert get(out, "mean_score", "y")["value"] == pytest.approx(3.0)
    assert get(out, "mean_score")["value"] == pytest.approx(3.0)


def test_score_command_writes_csv_and_names_a_missing_file(tmp_path, capsys):
    from capeval.engine.cli import main

    path = tmp_path / "verdicts.parquet"
    table([5, 3, 0], ["a", "b", "c"]).write_parquet(path)
    out = tmp_path / "metrics.csv"
    assert main(["score", "--protocol", "vcinspector", "--verdicts", str(path), "--out", str(out), "--resamples", "20"]) == 0
    frame = pl.read_csv(out)
    assert frame.filter(pl.col("metric") == "mean_score")["value"][0] == pytest.approx(4.0)
    assert "mean_score" in capsys.readouterr().out
    assert main(["score", "--protocol", "vcinspector", "--verdicts", str(tmp_path / "no.parquet"), "--out", str(out)]) == 2
    assert "no.parquet" in capsys.readouterr().err


# -- official mode: prompt, frames, parsing ------------------------------------------------------------------------
import importlib.util  # noqa: E402
import tomllib  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402

from capeval.engine.judging.requests import to_judge_request  # noqa: E402
from capeval.engine.protocols.vcinspector import PROTOCOL  # noqa: E402
from capeval.engine.protocols.vcinspector.parsing import parse_official  # noqa: E402
from capeval.engine.schemas import CAPTIONS, FRAMES, ITEMS, NO_VERDICT, ParseStatus, conform  # noqa: E402

PACK_DIR = Path(__file__).resolve().parents[2].parent / "shared" / "protocols"


def _frames_row(tmp_path, video_id, spec, n, shade):
    frames = np.full((n, 16, 16, 3), shade, dtype=np.uint8)
    path = tmp_path / f"{video_id}-{spec.replace(':', '_')}.npy"
    np.save(path, frames)
    return {"frames_key": f"fk-{video_id}-{spec}", "video_id": video_id, "frame_spec": spec,
            "timestamps": [float(i) for i in range(n)], "height": 16, "width": 16, "path": str(path)}


def _inputs(tmp_path):
    items = conform(pa.table({"benchmark": ["vcinspector"], "task": ["default"], "item_id": ["v1"],
                              "video_id": ["v1"]}), ITEMS)
    caption = 'A man in a {red} coat walks "two" dogs.\nThen 走る.'
    caps = conform(pa.table({"caption_key": ["k"], "captioner": ["m"], "prompt_id": ["p"], "frame_spec": ["uniform:8"],
                             "video_id": ["v1"], "text": [caption]}), CAPTIONS)
    frames = conform(pa.Table.from_pylist([_frames_row(tmp_path, "v1", "uniform:8", 8, 10),
                                           _frames_row(tmp_path, "v1", "linspace:32", 32, 200)]), FRAMES)
    return items, caps, frames, caption


@pytest.mark.skipif(not (PACK_DIR / "vcinspector.toml").is_file(), reason="shared packs not present")
def test_official_request_is_the_official_prompt_with_32_linspace_frames(tmp_path):
    items, caps, frames, caption = _inputs(tmp_path)
    pack = PACK_DIR / "vcinspector.toml"
    (req,) = PROTOCOL.build_requests(items, caps, judge="j", judge_revision="r", frames=frames, mode="official",
                                     prompts=pack).to_pylist()
    template = {p["id"]: p for p in tomllib.loads(pack.read_text())["prompt"]}["judge/score"]["user"]
    assert req["user"] == template.format(image_tags="<image>" * 32, caption=caption)  # byte for byte
    assert req["system"] is None and req["json_schema"] is None and req["choices"] is None
    assert req["max_tokens"] == 1024
    jr = to_judge_request(req)
    assert jr.temperature is None and len(jr.images) == 32  # the judge's own 32 linspace frames, not the captioner's
    from PIL import Image
    import io

    assert np.asarray(Image.open(io.BytesIO(jr.images[0]))).mean() > 150  # shade 200: the linspace:32 file
    assert PROTOCOL.judging_policy(mode="official").max_reasks == 0
    strict = PROTOCOL.build_requests(items, caps, judge="j", judge_revision="r", frames=frames).to_pylist()[0]
    assert len(to_judge_request(strict).images) == 8 and strict["json_schema"]  # strict: the caption's frames, JSON


def test_official_answer_format_parses_first_line_integer():
    assert parse_official("4\nThe caption does not capture the video. The objects (guitar) are wrong.") == (
        4, "The caption does not capture the video. The objects (guitar) are wrong.")
    assert parse_official(" 5 \n\nAll correct.") == (5, "All correct.")
    assert parse_official("2") == (2, "")
    req = {"context": json.dumps({"parse": {"mode": "official"}})}
    assert PROTOCOL.parse(req, "3\nok")[:2] == (2, ParseStatus.OK)
    for bad in ('{"score": 4, "explanation": "x"}', "Score: 4\nx", "4/5\nx", "6\nx", "0\nx", "", None, "four\nx"):
        assert PROTOCOL.parse(req, bad)[:2] == (NO_VERDICT, ParseStatus.FAILED), bad
    # strict mode keeps the JSON answer
    assert PROTOCOL.parse({}, '{"score": 4, "explanation": "mostly right"}')[:2] == (3, ParseStatus.OK)


def test_official_mode_label_and_denominators():
    out = compute_metrics(table([5, 4, 0], ["a", "b", "c"]), n_resamples=0, mode="official")
    assert set(out["mode"]) == {"official"} and get(out, "share_4")["value"] == pytest.approx(50.0)
