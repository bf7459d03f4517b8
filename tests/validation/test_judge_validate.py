"""`capeval judge validate` on the shared CAPability release (read in place): a replay judge that answers with
GPT-4-Turbo's released judgments agrees with them exactly; a replay of a copy with a known share of verdicts
changed agrees on exactly the rest, and each metric's bias equals the difference of the protocol's own metrics
computed from the two verdict sets.

The replies are the released judgment records themselves (the judge's parsed JSON answer: score and reason, `pred`
for the classification tasks, one answer per object for dynamic_object_number), written as the replay judge's
reply text; capeval's strict parser reads them back to the same codes."""

from __future__ import annotations

import json

import polars as pl
import pytest

from capeval.engine.cli import main
from capeval.engine.protocols.capability.codes import FROM_SCORE
from capeval.engine.protocols.capability.release import load_items, load_judgments
from capeval.engine.registry import lookup

#: scored tasks (the score is changed in the perturbed copy), a classification task, the per-object task, and
#: action/event (they share videos: one cluster for the bootstrap)
TASKS = ("object_color", "scene", "OCR", "camera_angle", "dynamic_object_number", "action", "event")
N_ITEMS = 30  # per task: enough that every task's precision and recall are defined
CHANGE_EVERY = 5  # the perturbed copy changes every 5th scored reply
NEXT_SCORE = {1: 0, 0: -1, -1: 1}  # a different code for each score


@pytest.fixture(scope="module")
def release(shared_data, tmp_path_factory):
    """A subset of the release: N_ITEMS annotated items per task (files in a tmp folder), the released judgments'
    records for them (last one per item, as the official script keeps), and the released captions' folder."""
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
    return {"annotations": tmp / "annotations", "judgments": root / "judgments" / "gpt-4o-0806",
            "captions": root / "captions" / "gpt-4o-0806", "records": records, "tmp": tmp}


def _replies(records: dict, change: bool) -> tuple[list[dict], dict]:
    """Replay replies from the released records; with `change`, every CHANGE_EVERY-th scored reply gets another
    score. Returns the replies and {(task, item_id, sub_index): new score} of the changed ones."""
    replies, changed, k = [], {}, 0
    for (task, item), rec in sorted(records.items()):
        answers = ([(i, r) for i, r in enumerate(rec["response"])] if task == "dynamic_object_number"
                   else [(0, {key: v for key, v in rec.items() if key != "file_id"})])
        for sub, answer in answers:
            if change and "score" in answer:
                k += 1
                if k % CHANGE_EVERY == 0:
                    score = NEXT_SCORE[int(answer["score"])]
                    answer = {**answer, "score": score}
                    changed[(task, item, sub)] = score
            replies.append({"task": task, "item_id": item, "step": "judge", "sub_index": sub,
                            "text": json.dumps(answer)})
    return replies, changed


def _validate(release, name: str, replies: list[dict], *extra: str) -> dict:
    tmp = release["tmp"]
    (tmp / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in replies))
    out = tmp / f"{name}.json"
    code = main(["judge", "validate", "--protocol", "capability", "--items", str(release["annotations"]),
                 "--captions", str(release["captions"]), "--reference", str(release["judgments"]),
                 "--judge", "replay", "--judge-option", f"replies={tmp / f'{name}.jsonl'}",
                 "--cache", str(tmp / "cache"), "--no-progress", "--resamples", "200", "--json", "--out", str(out),
                 *extra])
    assert code == 0
    return json.loads(out.read_text())


def _reference_verdicts(release) -> pl.DataFrame:
    items = load_items(release["annotations"])
    v = pl.from_arrow(load_judgments(release["judgments"], items, on_unknown="count").verdicts)
    return v.filter(pl.col("verdict") >= 0)  # validation compares the rows the reference judged


def test_replaying_the_reference_agrees_exactly(release):
    replies, _ = _replies(release["records"], change=False)
    report = _validate(release, "same", replies, "--tolerance", "0")
    assert report["overall"]["n"] == len(replies) == _reference_verdicts(release).height
    assert report["overall"]["n_judge_no_verdict"] == 0
    assert set(report["tasks"]) == set(TASKS)
    for name, block in [("overall", report["overall"]), *report["tasks"].items()]:
        assert block["agreement"] == 1.0, name
        assert block["ac1"] == 1.0, name
        counts = block["confusion"]["counts"]
        used = [i for i, row in enumerate(counts) if sum(row)]
        if len(used) > 1:
            assert block["kappa"] == pytest.approx(1.0, abs=1e-12), name
        else:  # both judges used one single code: chance agreement is 1 and kappa is undefined (null)
            assert block["kappa"] is None, name
        assert all(counts[i][j] == 0 for i in range(len(counts)) for j in range(len(counts[i])) if i != j)
        assert set(block["metrics"]) == set(lookup("protocol", "capability").headline)
        for m, v in block["metrics"].items():
            assert v["bias"] == 0.0 and v["ci_low"] == 0.0 and v["ci_high"] == 0.0, (name, m)
            assert v["judge"] == v["reference"] is not None, (name, m)
            assert v["outside_tolerance"] is False, (name, m)
    assert report["overall"]["kappa"] == pytest.approx(1.0, abs=1e-12)


def test_changed_share_gives_exact_agreement_and_bias(release):
    replies, changed = _replies(release["records"], change=True)
    assert changed
    report = _validate(release, "changed", replies, "--tolerance", "1")
    n = len(replies)
    assert report["overall"]["n"] == n
    assert report["overall"]["agreement"] == pytest.approx(1 - len(changed) / n, abs=1e-12)
    counts = report["overall"]["confusion"]["counts"]
    assert n - sum(counts[i][i] for i in range(len(counts))) == len(changed)  # exactly the changed rows disagree
    for task, block in report["tasks"].items():
        share = sum(1 for (t, _, _) in changed if t == task) / block["n"]
        assert block["agreement"] == pytest.approx(1 - share, abs=1e-12), task
    assert report["overall"]["kappa"] < 1 and report["overall"]["ac1"] < 1

    # the two verdict sets, built independently of the validation: the reference, and the reference with the
    # changed rows' codes replaced by the codes of their new scores
    reference = _reference_verdicts(release)
    new_code = pl.DataFrame([{"task": t, "item_id": i, "_sub": s, "_new": int(FROM_SCORE[score])}
                             for (t, i, s), score in changed.items()])
    perturbed = (reference.with_columns(pl.col("sub_index").fill_null(0).alias("_sub"))
                 .join(new_code, on=["task", "item_id", "_sub"], how="left")
                 .with_columns(pl.coalesce("_new", "verdict").cast(pl.Int8).alias("verdict")).drop("_sub", "_new"))
    assert (perturbed["verdict"] != reference["verdict"]).sum() == len(changed)
    protocol = lookup("protocol", "capability")
    ours = protocol.compute_metrics(perturbed, mode="strict", n_resamples=0)
    theirs = protocol.compute_metrics(reference, mode="strict", n_resamples=0)
    expected = ours.join(theirs, on=["task", "metric"], suffix="_ref").with_columns(
        (pl.col("value") - pl.col("value_ref")).alias("bias"))
    checked = 0
    for row in expected.iter_rows(named=True):
        block = report["overall"] if row["task"] == "avg" else report["tasks"][row["task"]]
        got = block["metrics"][row["metric"]]
        assert got["bias"] == pytest.approx(row["bias"], abs=1e-9), (row["task"], row["metric"])
        assert got["judge"] == pytest.approx(row["value"], abs=1e-9)
        assert got["reference"] == pytest.approx(row["value_ref"], abs=1e-9)
        assert got["ci_low"] <= got["bias"] <= got["ci_high"]
        assert got["outside_tolerance"] == (got["ci_low"] < -1 or got["ci_high"] > 1)
        checked += 1
    assert checked == (len(TASKS) + 1) * len(protocol.headline)
    assert any(v["outside_tolerance"] for v in report["overall"]["metrics"].values())


def test_per_task_sample_is_seeded_and_capped_by_the_task_size():
    from capeval.engine.judge_run.validation import sample_per_task

    keys = pl.DataFrame({"task": ["a"] * 10 + ["b"] * 3, "item_id": [f"a{i}" for i in range(10)] + ["b0", "b1", "b2"]})
    first = sample_per_task(keys, 4, seed=7)
    assert first.group_by("task").len().sort("task")["len"].to_list() == [4, 3]
    assert first.equals(sample_per_task(keys.reverse(), 4, seed=7))  # the same sample whatever the row order
    assert not first.equals(sample_per_task(keys, 4, seed=8))
    assert first.join(keys, on=["task", "item_id"], how="anti").is_empty()
