"""`capeval construct vcinspector` end to end on a few captions: scripted (in process) and replayed (CLI) judges, the
labels checked against the paper's rule, the chain against what was asked, the outputs read back by `capeval judge`
and `capeval align`, and resumption (a rerun sends nothing; a run killed with os._exit resumes where it died)."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from _vcinspector_inputs import (ALTERNATIVES, OFFICIAL_PACK, SOURCES, ScriptedJudge, replay_replies, run_construct,
                                 write_source)
from capeval.engine.cli import main
from capeval.engine.protocols.vcinspector.augment import quality_label, quality_score
from capeval.engine.protocols.vcinspector.parsing import parse_official

HERE = Path(__file__).resolve().parent
ELEMENTS = {c: (objs, acts) for _, c, objs, acts in SOURCES}


def _labels(out: Path) -> pl.DataFrame:
    return pl.read_parquet(out / "labels.parquet").sort("item_id")


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _check_outputs(out: Path) -> pl.DataFrame:
    """What every run must satisfy, whatever the judge: labels by the rule, captions changed exactly by the plan,
    explanations naming the new elements, fine-tuning targets the official parser reads back."""
    labels = _labels(out)
    assert labels.height > 0
    items = {r["item_id"]: r for r in _jsonl(out / "items.jsonl")}
    records = {r["id"]: r for r in _jsonl(out / "finetune.jsonl")}
    assert set(items) == set(records) == set(labels["item_id"])
    for row in labels.iter_rows(named=True):
        objs, acts = ELEMENTS[row["reference"]]
        n = len(objs) + len(acts)
        assert (row["n_objects"], row["n_actions"]) == (len(objs), len(acts))
        assert row["quality"] == float(quality_score(row["n_replaced"], n))
        assert row["label"] == quality_label(row["n_replaced"], n)
        extra = json.loads(items[row["item_id"]]["extra"])
        assert len(extra["replaced"]) == row["n_replaced"] and extra["label"] == row["label"]
        assert items[row["item_id"]]["category"] == str(row["label"])
        for rep in extra["replaced"]:
            assert ALTERNATIVES[rep["old"]] == rep["new"]
            assert rep["new"].lower() in row["caption"].lower() and rep["new"] in row["explanation"]
        if row["n_replaced"] == 0:
            assert row["caption"] == row["reference"] and row["label"] == 5
        else:
            assert row["caption"] != row["reference"]
        user, assistant = (m["content"] for m in records[row["item_id"]]["messages"])
        assert user.startswith("<video>") and row["caption"] in user
        assert parse_official(assistant) == (row["label"], row["explanation"])
    # candidate indices number each video's pseudo captions 0..k-1 (the keys `capeval align` joins on)
    for _, group in labels.group_by("video_id"):
        assert sorted(group["candidate_index"]) == list(range(group.height))
    return labels


def test_strict_run_follows_the_rule_and_a_rerun_sends_nothing(tmp_path):
    source = write_source(tmp_path / "source.jsonl")
    judge = ScriptedJudge("strict")
    run_construct(tmp_path / "out", "strict", judge, source=source)
    labels = _check_outputs(tmp_path / "out")
    steps = [s for s, _ in judge.sent]
    assert steps.count("extract_objects") == steps.count("extract_actions") == len(SOURCES)
    # strict substitutes as written and asks the LLM only for "play" (the caption says "plays")
    asked = [r.fields["old"] for s, r in judge.sent if s == "substitute"]
    assert asked and set(asked) == {"play"}
    assert labels["label"].n_unique() >= 3
    record = pl.read_parquet(tmp_path / "out" / "record.parquet")
    assert set(record["step"]) >= {"extract_objects", "extract_actions", "plan", "new_object", "new_action",
                                   "substitute", "score"}
    assert record.filter((pl.col("step") == "score") & pl.col("kept")).height == labels.height

    again = ScriptedJudge("strict")
    run_construct(tmp_path / "out", "strict", again, source=source)
    assert again.calls == 0  # every generation answered from the judgment cache
    assert _labels(tmp_path / "out").equals(labels)
    summary = json.loads((tmp_path / "out" / "construct.json").read_text())
    assert sum(s["sent"] for s in summary["steps"].values()) == 0


def test_killed_run_resumes_without_regenerating(tmp_path):
    clean_dir, killed_dir = tmp_path / "clean", tmp_path / "killed"
    for d in (clean_dir, killed_dir):
        d.mkdir()
        write_source(d / "source.jsonl")
    clean = ScriptedJudge("strict")
    run_construct(clean_dir, "strict", clean, source=clean_dir / "source.jsonl", max_in_flight=1)
    died_after = clean.calls // 2
    proc = subprocess.run([sys.executable, str(HERE / "_vcinspector_inputs.py"), str(killed_dir), "strict",
                           str(died_after)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 9, proc.stderr[-2000:]
    assert not (killed_dir / "labels.parquet").exists()  # died before writing anything
    resumed = ScriptedJudge("strict")
    run_construct(killed_dir, "strict", resumed, source=killed_dir / "source.jsonl", max_in_flight=1)
    # the steps that finished before the kill are not asked again (answers of the step in progress are committed in
    # groups: the last, uncommitted group is asked again)
    answered = {r.key for _, r in clean.sent[:died_after]}
    done_before_kill = [r.key for s, r in clean.sent[:died_after]
                        if all(r2.key in answered for s2, r2 in clean.sent if s2 == s)]
    assert done_before_kill, "the kill should come after at least one finished step"
    assert not {r.key for _, r in resumed.sent} & set(done_before_kill)
    assert resumed.calls <= clean.calls - len(done_before_kill)
    assert _labels(killed_dir).equals(_labels(clean_dir))
    assert (killed_dir / "finetune.jsonl").read_text() == (clean_dir / "finetune.jsonl").read_text()


@pytest.mark.skipif(not OFFICIAL_PACK.is_file(), reason="the official VC-Inspector pack is not beside the project")
def test_official_run_sends_the_official_prompts_and_writes_the_papers_explanation(tmp_path):
    source = write_source(tmp_path / "source.jsonl")
    judge = ScriptedJudge("official")
    run_construct(tmp_path / "out", "official", judge, source=source, samples=3)
    labels = _check_outputs(tmp_path / "out")
    assert set(labels["variant"]) <= {"obj", "act", "obj_act"} and labels["variant"].n_unique() == 3
    pack = {p["id"]: p for p in tomllib.loads(OFFICIAL_PACK.read_text(encoding="utf-8"))["prompt"]}
    for step, r in judge.sent:  # byte for byte the official template, system message included, no JSON schema
        p = pack[f"augment/{step}"]
        caption = {"cap": r.fields.get("caption")}
        fields = {"extract_objects": caption, "extract_actions": caption,
                  "new_object": {"obj": r.fields.get("element")}, "new_action": {"act": r.fields.get("element")},
                  "substitute": {"cap": r.fields.get("caption"), "ow": r.fields.get("old"),
                                 "nw": r.fields.get("new")}}[step]
        assert (r.system, r.user, r.json_schema, r.temperature) == (p["role_system"], p["user"].format(**fields),
                                                                    None, 0.0)
    # official mode asks the LLM for every substitution (identical asks share one request key), never in place
    asked = {(r.fields["old"], r.fields["new"]) for s, r in judge.sent if s == "substitute"}
    replaced = {(rep["old"], rep["new"]) for r in _jsonl(tmp_path / "out" / "items.jsonl")
                for rep in json.loads(r["extra"])["replaced"]}
    assert replaced and replaced <= asked
    record = pl.read_parquet(tmp_path / "out" / "record.parquet").filter(pl.col("step") == "substitute")
    assert record.height > 0 and record["request_key"].is_not_null().all()
    changed = labels.filter(pl.col("n_replaced") > 0)
    assert all("(" in e and e.endswith("are incorrect.") for e in changed["explanation"])


def test_captions_without_elements_or_with_a_failed_extraction_are_recorded(tmp_path):
    sources = SOURCES[:1] + [("v9", "Nothing at all.", [], []), ("v8", "A broken reply.", ["x"], ["y"])]
    source = write_source(tmp_path / "source.jsonl", sources=sources)
    replies = replay_replies(sources[:2]) + [{"item_id": "v8", "step": "extract_objects", "attempt": a,
                                              "text": "I cannot do that"} for a in range(3)]
    replies += [{"item_id": "v8", "step": "extract_actions", "text": json.dumps({"actions": ["y"]})},
                {"item_id": "v1", "step": "substitute", "text": json.dumps({"caption": "unused"})}]
    from capeval.adapters.replay import ReplayJudge

    judge = ReplayJudge(replies)
    run_construct(tmp_path / "out", "strict", judge, source=source, samples=2)
    record = pl.read_parquet(tmp_path / "out" / "record.parquet")
    plan = {r["item_id"]: r["reason"] for r in record.filter(pl.col("step") == "plan").iter_rows(named=True)}
    assert "undefined for n = 0" in plan["v9"] and "extraction failed" in plan["v8"]
    assert set(_labels(tmp_path / "out")["video_id"]) <= {"v1"}


def _fake_ratings(labels: pl.DataFrame, seed: int = 0) -> pl.DataFrame:
    """Three annotators whose ratings follow the label with noise (one of them exactly)."""
    rng = np.random.default_rng(seed)
    lab = labels["label"].to_numpy().astype(float)
    return labels.select("video_id", "candidate_index").with_columns(
        pl.Series("rating_0", lab),
        pl.Series("rating_1", np.clip(lab + rng.integers(-1, 2, lab.size), 1, 5)),
        pl.Series("rating_2", np.clip(lab + rng.integers(-1, 2, lab.size), 1, 5)))


def test_cli_run_with_replayed_replies_resumes_and_goes_through_align(tmp_path, capsys):
    sources = SOURCES[1:]  # every element occurs as written: no substitution reply needed
    source = write_source(tmp_path / "source.jsonl", sources=sources)
    replies = tmp_path / "replies.jsonl"
    replies.write_text("".join(json.dumps(r) + "\n" for r in replay_replies(sources)))
    out = tmp_path / "out"
    argv = ["construct", "vcinspector", "--source", str(source), "--samples", "6", "--judge", "replay",
            "--judge-option", f"replies={replies}", "--out", str(out), "--no-progress"]
    assert main(argv) == 0
    first = json.loads((out / "construct.json").read_text())
    assert sum(s["sent"] for s in first["steps"].values()) > 0
    labels = _labels(out)
    assert main(argv) == 0  # rerun: nothing sent, same outputs
    second = json.loads((out / "construct.json").read_text())
    assert sum(s["sent"] for s in second["steps"].values()) == 0
    assert _labels(out).equals(labels)

    ratings = tmp_path / "ratings.csv"
    _fake_ratings(labels).write_csv(ratings)
    capsys.readouterr()
    assert main(["align", "--ratings", str(ratings), "--scores", str(out / "labels.parquet"), "--column", "label",
                 "--resamples", "50", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["n"] == labels.height and result["n_excluded"] == 0
    assert result["n_videos"] == len(sources)
    assert result["tau_b"] > 0.5 and result["rho"] > 0.5  # the labels agree with ratings built from them


def test_outputs_load_in_capeval_judge_and_give_metrics(tmp_path, capsys):
    from capeval.engine.datasets.synthetic_videos import make_video

    media = {}
    for i, (v, *_rest) in enumerate(SOURCES[:2]):
        media[v] = tmp_path / f"{v}.mp4"
        make_video(media[v], codec="h264", seconds=1, fps=8, seed=i)
    source = write_source(tmp_path / "source.jsonl", media=media, sources=SOURCES[:2])
    run_construct(tmp_path / "out", "strict", ScriptedJudge("strict"), source=source, samples=3)
    labels = _labels(tmp_path / "out")
    records = _jsonl(tmp_path / "out" / "finetune.jsonl")
    assert all(r["videos"] == [str(media[r["id"].split("/")[0]])] for r in records)
    capsys.readouterr()
    verdicts = tmp_path / "verdicts.parquet"
    assert main(["judge", "--protocol", "vcinspector", "--items", str(tmp_path / "out" / "items.jsonl"),
                 "--captions", str(tmp_path / "out" / "captions.parquet"), "--judge", "local", "--param",
                 "judge_frames=linspace:2", "--cache", str(tmp_path / "cache"), "--out", str(verdicts),
                 "--no-progress", "--resamples", "0"]) == 0
    judged = pl.read_parquet(verdicts)
    assert judged.height == labels.height and (judged["verdict"] >= 0).all()
    assert set(judged["item_id"]) == set(labels["item_id"])
    assert "mean_score" in capsys.readouterr().out
