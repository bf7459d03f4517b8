"""`capeval judge validate` compares the judge and the reference over the same tasks and the same rows, and says
what it left out: on a subset of the shared CAPability release, a replay judge that calls every OCR mention
wrong leaves OCR's precision 0, recall 0 and F1 undefined. Each overall metric is then averaged over the same
tasks for BOTH judges: F1 over the tasks where both define it (OCR named, with why), precision and recall over
every task (OCR's 0 included, so the judge's failure shows in the overall bias). Reference rows that match no
item are counted and warned about, and a reference that is another protocol's stops with exit 2 before anything
is judged."""

from __future__ import annotations

import json

import numpy as np
import polars as pl
import pytest

from capeval.engine.cli import main
from capeval.engine.protocols.capability.release import load_items, load_judgments
from capeval.engine.registry import lookup

TASKS = ("object_color", "scene", "OCR", "event")
N_ITEMS = 20
ALL_WRONG = "OCR"  # the replayed judge answers -1 (NEGATIVE) for every OCR item


@pytest.fixture(scope="module")
def release(shared_data, tmp_path_factory):
    root = shared_data / "capability"
    tmp = tmp_path_factory.mktemp("capability")
    (tmp / "annotations").mkdir()
    records = {}
    for task in TASKS:
        lines = (root / "annotations" / f"{task}.jsonl").read_text().splitlines()[:N_ITEMS]
        (tmp / "annotations" / f"{task}.jsonl").write_text("\n".join(lines) + "\n")
        ids = {json.loads(line)["file_id"] for line in lines}
        for line in (root / "judgments" / "gpt-4o-0806" / f"{task}.jsonl").read_text().splitlines():
            rec = json.loads(line)
            if rec["file_id"] in ids:
                records[(task, rec["file_id"])] = rec
    replies = []
    for (task, item), rec in sorted(records.items()):
        answer = {k: v for k, v in rec.items() if k != "file_id"}
        if task == ALL_WRONG:
            answer["score"] = -1
        replies.append({"task": task, "item_id": item, "step": "judge", "sub_index": 0, "text": json.dumps(answer)})
    (tmp / "replies.jsonl").write_text("".join(json.dumps(r) + "\n" for r in replies))
    items = load_items(tmp / "annotations")
    reference = pl.from_arrow(load_judgments(root / "judgments" / "gpt-4o-0806", items, on_unknown="count").verdicts)
    return {"tmp": tmp, "annotations": tmp / "annotations", "judgments": root / "judgments" / "gpt-4o-0806",
            "captions": root / "captions" / "gpt-4o-0806", "reference": reference, "n_replies": len(replies)}


def _args(release, reference, out, *extra):
    tmp = release["tmp"]
    return ["judge", "validate", "--protocol", "capability", "--items", str(release["annotations"]),
            "--captions", str(release["captions"]), "--reference", str(reference), "--judge", "replay",
            "--judge-option", f"replies={tmp / 'replies.jsonl'}", "--cache", str(tmp / "cache"), "--no-progress",
            "--resamples", "200", "--json", "--out", str(out), *extra]


def test_overall_is_over_the_tasks_both_judges_define(release, capsys):
    out = release["tmp"] / "report.json"
    assert main(_args(release, release["judgments"], out)) == 0
    report = json.loads(out.read_text())
    overall = report["overall"]["metrics"]
    tasks = [t for t in lookup("protocol", "capability").tasks if t in TASKS]
    others = [t for t in tasks if t != ALL_WRONG]
    assert overall["f1"]["tasks"] == len(others)
    assert overall["f1"]["tasks_left_out"] == {ALL_WRONG: "undefined for the judge (0/0)"}
    for metric in ("precision", "recall", "hit_rate"):
        assert overall[metric]["tasks"] == len(tasks) and overall[metric]["tasks_left_out"] == {}
    ocr = report["tasks"][ALL_WRONG]["metrics"]
    assert ocr["f1"]["judge"] is None and ocr["f1"]["reference"] is not None and ocr["f1"]["bias"] is None
    assert ocr["f1"]["reason"] == "undefined for the judge (0/0)"
    assert ocr["precision"]["judge"] == 0.0 and ocr["recall"]["judge"] == 0.0

    # each side's overall value is the mean of the protocol's own per-task values over the same tasks
    protocol = lookup("protocol", "capability")
    reference = release["reference"].filter(pl.col("verdict") >= 0)
    judged = reference.with_columns(
        pl.when(pl.col("task") == ALL_WRONG).then(pl.lit(2, pl.Int8)).otherwise(pl.col("verdict")).alias("verdict"))
    for side, verdicts in (("judge", judged), ("reference", reference)):
        per_task = protocol.compute_metrics(verdicts, mode="strict", n_resamples=0)
        for metric, entry in overall.items():
            averaged = others if metric == "f1" else tasks
            values = per_task.filter(pl.col("task").is_in(averaged) & (pl.col("metric") == metric))["value"]
            assert values.len() == len(averaged)
            assert entry[side] == pytest.approx(float(np.mean(values.to_numpy())), abs=1e-9), (side, metric)
    for entry in overall.values():
        assert entry["bias"] == pytest.approx(entry["judge"] - entry["reference"], abs=1e-9)
    assert overall["recall"]["bias"] < -10  # the judge's failure on OCR is in the overall recall

    capsys.readouterr()
    assert main(_args(release, release["judgments"], release["tmp"] / "text.json")[:-3]) == 0
    text = capsys.readouterr().out
    assert "    f1*" in text and "    recall " in text
    assert (f"* f1: mean over the {len(others)} of {len(tasks)} tasks both judges define it on; left out of both "
            f"sides: {ALL_WRONG} (undefined for the judge (0/0))") in text


def test_reference_rows_matching_no_item_are_counted_and_warned(release, capsys):
    reference = release["reference"]
    renamed = reference.with_columns(
        pl.when((pl.col("task") == "scene") & pl.col("item_id").str.ends_with("1"))
        .then(pl.lit("renamed-") + pl.col("item_id")).otherwise(pl.col("item_id")).alias("item_id"))
    n_renamed = int((renamed["item_id"] != reference["item_id"]).sum())
    assert n_renamed > 0
    path = release["tmp"] / "renamed.parquet"
    renamed.write_parquet(path)
    out = release["tmp"] / "renamed.json"
    assert main(_args(release, path, out)) == 0
    report = json.loads(out.read_text())
    assert report["counts"]["reference_rows_not_in_items"] == n_renamed
    assert report["overall"]["n"] == reference.filter(pl.col("verdict") >= 0).height - n_renamed
    err = capsys.readouterr().err
    assert f"warning: {n_renamed} of {reference.height} reference rows match no item of --items" in err
    assert "renamed-scene_" in err


@pytest.mark.parametrize("protocol", ["vidcapbench", "capquiz"])
def test_a_reference_of_another_protocol_exits_2_before_judging(release, protocol, capsys):
    path = release["tmp"] / "capability-reference.parquet"
    release["reference"].write_parquet(path)
    args = _args(release, path, release["tmp"] / f"{protocol}.json")
    args[args.index("--protocol") + 1] = protocol
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "holds verdicts of protocol capability" in err and f"not of --protocol {protocol}" in err
    assert not (release["tmp"] / f"{protocol}.json").exists()


def test_verdict_codes_the_protocol_does_not_have_exit_2(release, capsys):
    path = release["tmp"] / "foreign-codes.parquet"
    release["reference"].drop("protocol").with_columns(
        pl.when(pl.col("verdict") == 2).then(pl.lit(4, pl.Int8)).otherwise(pl.col("verdict")).alias("verdict")
    ).write_parquet(path)
    assert main(_args(release, path, release["tmp"] / "codes.json")) == 2
    assert "verdict codes [4] are not codes of protocol capability" in capsys.readouterr().err
