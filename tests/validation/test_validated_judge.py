"""A sweep's judge names its validation file (`[[judges]] validated = "FILE"`, written by `capeval judge validate
--out`): run.json and the report show the validated judge, the reference, agreement, kappa and the metrics outside
tolerance; a judge without one is marked unvalidated in both."""

from __future__ import annotations

import json

import polars as pl
import pytest

from _sweeps import write_sweep
from capeval.engine.cli import main
from capeval.engine.metrics.validation import validate
from capeval.engine.runrecord import read_run_records
from capeval.engine.sweep.config import SweepFileError, load_sweep


def _validation_file(path, tolerance=0.5):
    """A real validation report (capeval.engine.metrics.validation.validate) of a judge that disagrees with its reference
    on one video's verdicts, written as `capeval judge validate --out` writes it."""
    rows = [{"task": "mc", "item_id": f"v{i}-{k}", "video_id": f"v{i}", "verdict": (i + k) % 3}
            for i in range(30) for k in range(2)]
    reference = pl.DataFrame(rows)
    judged = reference.with_columns(pl.when(pl.col("video_id") == "v0").then((pl.col("verdict") + 1) % 3)
                                    .otherwise(pl.col("verdict")).alias("verdict"))
    report = validate(reference, judged, protocol="capquiz", tolerance=tolerance, n_resamples=200)
    report |= {"judge": {"name": "local-minilm", "revision": "all-MiniLM-L6-v2+rules-v1"},
               "reference": {"label": "gpt-4-turbo on test captions"}}
    path.write_text(json.dumps(report))
    return report


def test_validated_path_resolves_against_the_sweep_file_and_must_exist(tmp_path):
    _validation_file(tmp_path / "local.json")
    sweep = write_sweep(tmp_path, "v", judges=[{"name": "local", "validated": "local.json"}])
    config = load_sweep(sweep, check_registry=False)
    assert config.judges[0].validated == str((tmp_path / "local.json").resolve())
    sweep.write_text(sweep.read_text().replace("local.json", "absent.json"))
    with pytest.raises(SweepFileError, match=r"judges\[0\]\.validated: file not found"):
        load_sweep(sweep, check_registry=False)


def test_run_json_and_report_show_validated_and_unvalidated_judges(tmp_path, ray_local):
    report = _validation_file(tmp_path / "local.json")
    sweep = write_sweep(tmp_path, "val", prompts=("brief",), frames=("uniform:2",), n_videos=2,
                        judges=[{"name": "local", "validated": "local.json"},
                                {"name": "local", "seeds": [1], "label": "local-seed1"}])
    out = tmp_path / "run"
    assert main(["sweep", str(sweep), "--out", str(out)]) == 0
    shown = read_run_records(out)[-1]["judge_validation"]
    assert shown["local-seed1"] == {"status": "unvalidated"}
    local = shown["local"]
    assert local["status"] == "validated" and local["file"] == str((tmp_path / "local.json").resolve())
    assert local["judge"] == "local-minilm" and local["reference"] == "gpt-4-turbo on test captions"
    assert local["agreement"] == report["overall"]["agreement"] < 1
    assert local["kappa"] == report["overall"]["kappa"]
    assert local["revision_matches"] is True  # the local judge's revision is the one the file validated
    flagged = [f"overall.{m}" for m, v in report["overall"]["metrics"].items() if v["outside_tolerance"]]
    assert flagged and local["outside_tolerance"][:len(flagged)] == flagged
    assert "not_validated_for" not in local  # validated on capquiz, the sweep's only protocol

    assert main(["report", str(out)]) == 0
    page = (out / "report.html").read_text()
    section = page[page.index('<section id="validation">'):page.index('<section id="run">')]
    assert "local-seed1" in section and "<b>unvalidated</b>" in section
    assert "gpt-4-turbo on test captions" in section and f"{report['overall']['agreement']:.3f}" in section
    assert flagged[0] in section


def test_submit_ships_the_validation_file(tmp_path):
    from capeval.engine.staging import stage_sweep

    _validation_file(tmp_path / "local.json")
    sweep = write_sweep(tmp_path, "v", judges=[{"name": "local", "validated": "local.json"}])
    staged, shipped = stage_sweep(sweep, tmp_path / "stage")
    (source, rel), = [(s, r) for s, r in shipped if s.endswith("local.json")]
    assert (tmp_path / "stage" / rel).read_bytes() == (tmp_path / "local.json").read_bytes()
    assert f"validated: {rel}" in staged.read_text()


def test_a_validation_holds_only_for_its_protocol(tmp_path):
    """A judge validated on one protocol is listed as not validated for the sweep's other protocols (record and
    report), instead of passing as validated for all of them."""
    from types import SimpleNamespace

    from capeval.engine.metrics.validation import judge_validation_record
    from capeval.engine.report.validation import validation_html

    _validation_file(tmp_path / "local.json")  # made on capquiz
    judge = SimpleNamespace(name="local", display="local", validated=str(tmp_path / "local.json"))
    record = judge_validation_record([judge], {}, ["capquiz", "vidcapbench", "capability"])
    assert record["local"]["status"] == "validated"
    assert record["local"]["not_validated_for"] == ["capability", "vidcapbench"]
    assert "not validated for capability, vidcapbench" in validation_html([{"judge_validation": record}])
    assert "not_validated_for" not in judge_validation_record([judge], {}, ["capquiz"])["local"]
