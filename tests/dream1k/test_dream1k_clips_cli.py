"""`capeval judge --protocol dream1k` on a file in DREAM-1K's release layout (detected as the `dream1k` kind), then
`capeval dream1k clips` on its verdicts: one row per clip with the release's attributes and values that agree with
the protocol's metrics."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from capeval.engine.cli import main
from capeval.engine.registry import lookup

ROOT = Path(__file__).resolve().parents[2]
DREAM = ROOT.parent / "shared" / "data" / "dream1k" / "DREAM-1k.jsonl"
pytestmark = pytest.mark.skipif(not DREAM.is_file(), reason="DREAM-1K not present")


def _release(tmp_path: Path, n: int = 4) -> tuple[Path, list[dict]]:
    records = [json.loads(line) for line in DREAM.read_text(encoding="utf-8").splitlines()[::200][:n]]
    path = tmp_path / "DREAM-1k.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path, records


def _reference(record: dict) -> str:
    return next(p["reference"] for m in record["messages"] if m["role"] == "assistant" for p in m["content"]
                if p.get("reference"))


def test_release_file_is_detected():
    d1k = lookup("protocol", "dream1k")
    assert d1k.release_dataset_kind(DREAM) == "dream1k"
    assert d1k.release_dataset_kind(DREAM.parent) is None
    assert d1k.release_dataset_kind(DREAM.with_name("LICENSE")) is None


def test_judge_then_clips(tmp_path, capsys):
    items, records = _release(tmp_path)
    captions = tmp_path / "captions.jsonl"
    # even clips: the reference itself; odd clips: a caption about something else
    captions.write_text("".join(json.dumps({"video_id": str(r["vid"]), "caption": _reference(r) if i % 2 == 0
                                            else "A cat sleeps on a sofa all day long."}) + "\n"
                                for i, r in enumerate(records)), encoding="utf-8")
    verdicts, metrics = tmp_path / "v.parquet", tmp_path / "m.csv"
    code = main(["judge", "--protocol", "dream1k", "--items", str(items), "--captions", str(captions),
                 "--judge", "local", "--cache", str(tmp_path / "cache"), "--out", str(verdicts),
                 "--metrics", str(metrics), "--resamples", "0", "--no-progress"])
    assert code == 0, capsys.readouterr().err
    m = pl.read_csv(metrics)
    assert {"F1", "precision", "recall"} <= set(m["metric"])
    capsys.readouterr()

    out = tmp_path / "clips.csv"
    assert main(["dream1k", "clips", str(verdicts), "--items", str(items), "--out", str(out)]) == 0
    printed = capsys.readouterr()
    assert "4 clips" in printed.err
    clips = pl.read_csv(out)
    assert sorted(clips["item_id"].cast(pl.String)) == sorted(str(r["vid"]) for r in records)
    assert set(clips["mode"]) == {"strict"}
    by_id = {str(r["item_id"]): r for r in clips.iter_rows(named=True)}
    for i, record in enumerate(records):
        row = by_id[str(record["vid"])]
        assert row["source"] == record["dataset"]
        assert row["n_events"] == record["extra_info"]["n_events"]
        assert row["duration"] == pytest.approx(record["extra_info"]["duration"])
        assert row["n_r"] == len(record["extra_info"]["events"])
    assert by_id[str(records[0]["vid"])]["recall"] > by_id[str(records[1]["vid"])]["recall"]
    # the clips' mean recall is the strict overall recall (per clip, averaged over clips)
    overall = m.filter((pl.col("bucket") == "all") & (pl.col("metric") == "recall"))["value"][0]
    assert 100 * clips["recall"].mean() == pytest.approx(overall)


def test_clips_refuses_a_run_without_dream1k_verdicts(tmp_path, capsys):
    table = tmp_path / "other.parquet"
    pl.DataFrame({"protocol": ["lvcap"], "video_id": ["v"], "verdict": [1], "item_id": ["v"], "step": ["entail_r"],
                  "detail": ['{"label": "entailment"}']}).write_parquet(table)
    assert main(["dream1k", "clips", str(table)]) == 2
    assert "no verdicts of protocol 'dream1k'" in capsys.readouterr().err
