"""`capeval capquiz filter`: the blind-solvability rule (every judge right in >= 2 of 3 shuffled trials without the
video) with two recorded judges, semantic de-duplication with the local MiniLM model (the cluster keeps its hardest
question), and the local judge end to end; kept items and the per-item record of why."""

from __future__ import annotations

import json

import polars as pl
import pytest

from capeval.engine.cli import main

OPTS = {
    "sky": ["grey and overcast", "bright blue", "orange at sunset", "pitch black", "pink"],
    "dog": ["a golden retriever", "a black poodle", "a dalmatian", "a pug", "a husky"],
    "cup": ["on the windowsill", "in the sink", "on the table", "on the floor", "in his hand"],
    "count": ["two", "three", "four", "five", "six"],
    "hold": ["a red umbrella", "a newspaper", "a coffee cup", "a phone", "a leash"],
    "door": ["she knocks", "she runs", "she waves", "she sits", "she sings"],
}
ITEMS = [
    {"item_id": "v1-sky", "video_id": "v1", "question": "What does the sky look like?", "options": OPTS["sky"],
     "answer": "grey and overcast", "category": "Setting"},
    {"item_id": "v1-dog", "video_id": "v1", "question": "Which dog breed appears?", "options": OPTS["dog"],
     "answer": "a dalmatian", "category": "Entity"},
    {"item_id": "v2-cup", "video_id": "v2", "question": "Where is the cup left?", "options": OPTS["cup"],
     "answer": "in the sink", "category": "Relational Reasoning"},
    {"item_id": "v2-count", "video_id": "v2", "question": "How many cups are there?", "options": OPTS["count"],
     "answer": "three", "category": "Attribute"},
    {"item_id": "v3-hold-a", "video_id": "v3", "question": "What is the man holding in his right hand?",
     "options": OPTS["hold"], "answer": "a red umbrella", "category": "Entity"},
    {"item_id": "v3-hold-b", "video_id": "v3", "question": "What does the man hold in his right hand?",
     "options": OPTS["hold"], "answer": "a red umbrella", "category": "Entity"},
    {"item_id": "v3-door", "video_id": "v3", "question": "What does the woman do at the door?",
     "options": OPTS["door"], "answer": "she knocks", "category": "Action"},
]
# trials answered right (True), wrong (False) or unparseable (None) per judge
PLAN = {
    "g41": {"v1-sky": [1, 1, 1], "v1-dog": [1, 1, 1], "v2-cup": [1, 1, 0], "v2-count": [1, 1, 0],
            "v3-hold-a": [1, 0, 0], "v3-hold-b": [0, 0, 0], "v3-door": [0, 0, 0]},
    "gem": {"v1-sky": [1, 1, 1], "v1-dog": [1, 0, 0], "v2-cup": [0, 1, 1], "v2-count": [None, None, 1],
            "v3-hold-a": [0, 0, 0], "v3-hold-b": [0, 0, 0], "v3-door": [0, 0, 1]},
}


def _write_items(path):
    path.write_text("".join(json.dumps(i) + "\n" for i in ITEMS))
    return path


def _replies(path, plan):
    lines = []
    for item in ITEMS:
        wrong = next(o for o in item["options"] if o != item["answer"])
        for trial, ok in enumerate(plan[item["item_id"]]):
            # the judge answers with the option's text, so the reply does not depend on the shuffle
            text = "I would rather not say" if ok is None else (item["answer"] if ok else wrong)
            lines.append({"item_id": item["item_id"], "step": "blind", "seed": trial, "attempt": 0, "text": text})
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path


def test_blind_rule_with_two_judges_and_dedup_keeps_the_hardest(tmp_path, capsys):
    items = _write_items(tmp_path / "quiz.jsonl")
    args = ["capquiz", "filter", "--items", str(items), "--judges", "replay@g41,replay@gem", "--trials", "3",
            "--out", str(tmp_path / "kept.jsonl"), "--record", str(tmp_path / "why.parquet"),
            "--cache", str(tmp_path / "cache"), "--no-progress"]
    for label in PLAN:
        args += ["--judge-option", f"{label}:replies={_replies(tmp_path / f'{label}.jsonl', PLAN[label])}"]
    assert main(args) == 0
    record = pl.read_parquet(tmp_path / "why.parquet")
    by_id = {r["item_id"]: r for r in record.iter_rows(named=True)}
    assert set(by_id) == {i["item_id"] for i in ITEMS}
    # both judges right in >= 2 of 3: removed
    assert by_id["v1-sky"]["blindly_solvable"] and by_id["v2-cup"]["blindly_solvable"]
    assert "blindly solvable" in by_id["v1-sky"]["reason"]
    # only one judge right often enough, or unparseable trials counted as not right: kept
    assert not by_id["v1-dog"]["blindly_solvable"] and not by_id["v2-count"]["blindly_solvable"]
    assert json.loads(by_id["v2-count"]["blind_right"]) == {"g41": 2, "gem": 1}
    # paraphrased duplicates in v3: the cluster keeps the hardest (hold-b: 0 of 6 right; hold-a: 1 of 6)
    assert by_id["v3-hold-a"]["duplicate_of"] == "v3-hold-b" and not by_id["v3-hold-a"]["kept"]
    assert by_id["v3-hold-a"]["question_similarity"] >= 0.85 and by_id["v3-hold-b"]["kept"]
    assert by_id["v3-door"]["kept"] and by_id["v3-door"]["duplicate_of"] is None
    kept = [json.loads(line)["item_id"] for line in (tmp_path / "kept.jsonl").read_text().splitlines()]
    assert kept == ["v1-dog", "v2-count", "v3-hold-b", "v3-door"]
    assert "4 kept" in capsys.readouterr().out
    # a rerun asks nothing new (every blind judgment is in the cache) and decides the same
    assert main(args) == 0
    assert pl.read_parquet(tmp_path / "why.parquet").equals(record)
    # without de-duplication both paraphrases stay
    assert main(args + ["--no-dedup"]) == 0
    assert pl.read_parquet(tmp_path / "why.parquet").filter(pl.col("item_id") == "v3-hold-a")["kept"][0]


def test_local_judge_removes_questions_whose_answer_echoes_the_stem(tmp_path):
    items = [
        {"item_id": "e1", "video_id": "v", "question": "What colour is the red ball that bounces?",
         "options": ["the red ball", "a green cube", "a blue cone", "a white sheet", "a black cat"],
         "answer": "the red ball", "category": "Attribute"},
        {"item_id": "e2", "video_id": "v", "question": "What colour is the red ball that bounces?",
         "options": ["yellow", "the red ball", "purple", "grey", "orange"], "answer": "yellow",
         "category": "Attribute"},
    ]
    path = tmp_path / "quiz.jsonl"
    path.write_text("".join(json.dumps(i) + "\n" for i in items))
    code = main(["capquiz", "filter", "--items", str(path), "--judge", "local", "--out", str(tmp_path / "k.parquet"),
                 "--record", str(tmp_path / "why.csv"), "--cache", str(tmp_path / "cache"), "--no-progress",
                 "--no-dedup"])
    assert code == 0
    record = pl.read_csv(tmp_path / "why.csv")
    solvable = dict(zip(record["item_id"], record["blindly_solvable"]))
    assert solvable == {"e1": True, "e2": False}
    assert pl.read_parquet(tmp_path / "k.parquet")["item_id"].to_list() == ["e2"]


@pytest.mark.parametrize("bad,msg", [(["--trials", "3", "--min-correct", "4"], "min-correct"),
                                     (["--judges", "replay,replay"], "NAME@LABEL"),
                                     (["--judge-option", "nobody:x=1"], "no judge labelled")])
def test_clear_usage_errors(tmp_path, capsys, bad, msg):
    items = _write_items(tmp_path / "quiz.jsonl")
    code = main(["capquiz", "filter", "--items", str(items), "--out", str(tmp_path / "k.jsonl"), *bad])
    assert code == 2 and msg in capsys.readouterr().err


def test_blind_requests_shuffle_per_trial_and_render_the_papers_prompt_from_its_pack(tmp_path):
    import os
    import tomllib
    from pathlib import Path

    from capeval.engine.inputs.tables import read_items
    from capeval.engine.protocols.capquiz.filtering import BlindProtocol

    items = read_items(_write_items(tmp_path / "quiz.jsonl"), benchmark="capquiz", resolve_media=False)
    reqs = BlindProtocol().requests(items, judge="j", judge_revision="r", trials=3).to_pylist()
    assert len(reqs) == 3 * len(ITEMS) and {r["trial"] for r in reqs} == {0, 1, 2}
    orders = {}
    for r in reqs:
        ctx = json.loads(r["context"])
        orders.setdefault(r["item_id"], set()).add(tuple(ctx["parse"]["order"]))
    assert any(len(o) > 1 for o in orders.values())  # trials see different option orders
    pack = Path(os.environ.get("CAPEVAL_PACK_DIR", Path(__file__).resolve().parents[2].parent / "shared" / "protocols"))
    pack = pack / "capquiz.toml"
    if not pack.is_file():
        pytest.skip(f"{pack} not present")
    template = next(p["user"] for p in tomllib.loads(pack.read_text(encoding="utf-8"))["prompt"]
                    if p["id"] == "construct/blind_solvability")
    official = BlindProtocol(prompts=str(pack)).requests(items, judge="j", judge_revision="r", trials=1).to_pylist()
    first = next(r for r in official if r["item_id"] == "v1-sky")
    shown = json.loads(first["context"])["parse"]["shown"]
    options = "\n".join(f"{k}. {o}" for k, o in zip("ABCDE", shown))
    assert first["user"] == template.format(question=ITEMS[0]["question"], options=options)


def test_filter_judge_mistakes_exit_2_naming_the_option(tmp_path):
    """A judge option the backend refuses is the user's mistake: exit 2 with the option named (was exit 1, an
    internal error, because the filter built its judges without the CLI's checks)."""
    import subprocess
    import sys

    items = tmp_path / "items.jsonl"
    items.write_text('{"item_id": "q1", "video_id": "v1", "question": "What colour?", "options": ["red", "blue"], '
                     '"answer": "A"}\n')
    proc = subprocess.run([sys.executable, "-m", "capeval.engine.cli", "capquiz", "filter", "--items", str(items),
                           "--judges", "openai", "--judge-option", "model=m", "--judge-option",
                           "base_url=http://127.0.0.1:9/v1", "--judge-option", "timeout_s=-1", "--out", str(tmp_path / "k.jsonl")],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr
    assert "timeout_s" in proc.stderr and "Traceback" not in proc.stderr
