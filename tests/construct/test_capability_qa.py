"""`capeval construct capability-qa` end to end on generated videos: questions from a tiny CAPability-style
release, answered by the local captioner from a script (so every answer is known), open answers graded by the replay
judge, caption verdicts from a run folder; KT equals the paper's Eq. 4 computed by hand, the report and the
terminal show it beside F1, and a second run asks nothing again."""

from __future__ import annotations

import json
import re
from pathlib import Path

import polars as pl
import pyarrow.parquet as pq
import pytest

from capeval.engine.cli import main
from capeval.engine.protocols.capability.qa import build_questions
from capeval.engine.protocols.capability.release import load_items, load_judgments

SCENES = ["scene_0", "scene_1", "scene_2", "scene_3"]
COLORS = ["color_0", "color_1", "color_2"]
COUNTS = {"count_0": {"table": 4, "chair": 2}, "count_1": {"sofa": 2}}

# What the model answers (scene: multiple choice, read by the letter parser; object_color: open, graded by the
# replay judge; dynamic_object_number: one multiple-choice question per object).
SCENE_ANSWERS = {"scene_0": "A", "scene_1": "B. No", "scene_2": "The answer is A.", "scene_3": "(A)"}
COLOR_ANSWERS = {"color_0": "red", "color_1": "green", "color_2": "bright red"}
COLOR_GRADES = {"color_0": "yes", "color_1": "no", "color_2": "Yes."}
COUNT_RIGHT = {("count_0", 0): True, ("count_0", 1): False, ("count_1", 0): True}
# The caption verdicts (released scores: 1 positive, 0 miss, -1 negative).
SCENE_SCORES = {"scene_0": 1, "scene_1": 0, "scene_2": -1, "scene_3": 0}
COLOR_SCORES = {"color_0": 0, "color_1": 1, "color_2": 1}
COUNT_SCORES = {"count_0": [1, 0], "count_1": [-1]}


def _jsonl(path: Path, rows) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture(scope="module")
def release(tmp_path_factory):
    from capeval.engine.datasets.synthetic_videos import make_video

    root = tmp_path_factory.mktemp("capqa")
    for i in range(3):
        make_video(root / "media" / f"v{i}.mp4", codec="h264", seconds=1.0, fps=8, size=(96, 64), seed=300 + i)
    anno = root / "annotations"

    def rec(task, fid, a, i):
        return {"file_id": fid, "file_path": f"media/v{i % 3}.mp4", "annotation": a, "task": task,
                "data_type": "video"}

    _jsonl(anno / "scene.jsonl", [rec("scene", f, "park", i) for i, f in enumerate(SCENES)])
    _jsonl(anno / "object_color.jsonl", [rec("object_color", f, {"circle": "red"}, i) for i, f in enumerate(COLORS)])
    _jsonl(anno / "dynamic_object_number.jsonl",
           [rec("dynamic_object_number", f, a, i) for i, (f, a) in enumerate(COUNTS.items())])
    items = load_items(anno, media_root=root)
    answers = []
    for q in build_questions(items):
        if q.task == "scene":
            text = SCENE_ANSWERS[q.item_id]
        elif q.task == "object_color":
            text = COLOR_ANSWERS[q.item_id]
        else:  # the right letter, or the first wrong one
            wrong = next(letter for letter in "ABCD" if letter != q.answer)
            text = q.answer if COUNT_RIGHT[(q.item_id, q.sub_index)] else wrong
        answers.append({"task": q.task, "item_id": q.item_id, "sub_index": q.sub_index, "text": text})
    script = _jsonl(root / "answers.jsonl", answers)
    replies = _jsonl(root / "grades.jsonl", [{"item_id": f, "task": "object_color", "step": "grade", "text": t}
                                              for f, t in COLOR_GRADES.items()])
    judgments = root / "judgments" / "toy"
    _jsonl(judgments / "scene.jsonl", [{"file_id": f, "score": s} for f, s in SCENE_SCORES.items()])
    _jsonl(judgments / "object_color.jsonl", [{"file_id": f, "score": s} for f, s in COLOR_SCORES.items()])
    _jsonl(judgments / "dynamic_object_number.jsonl",
           [{"file_id": f, "response": [{"score": s} for s in ss]} for f, ss in COUNT_SCORES.items()])
    # a run folder holding these caption verdicts, as a sweep leaves them (verdicts/ segments)
    run = root / "run"
    (run / "verdicts").mkdir(parents=True)
    pq.write_table(load_judgments(judgments, items).verdicts, run / "verdicts" / "part-0.parquet")
    return root, anno, script, replies, run


def _construct(release, out: Path) -> int:
    root, anno, script, replies, run = release
    return main(["construct", "capability-qa", "--annotations", str(anno), "--media-root", str(root),
                 "--captioner", "local", "--captioner-option", f"answers={script}", "--label", "toy",
                 "--frames", "uniform:2", "--judge", "replay", "--judge-option", f"replies={replies}",
                 "--caption-verdicts", str(run), "--resamples", "0", "--out", str(out), "--no-progress"])


@pytest.fixture(scope="module")
def first_run(release, ray_local):
    out = release[4] / "capability_qa"
    assert _construct(release, out) == 0
    return out


def _kt_rows(out: Path) -> dict:
    long = pl.read_parquet(out / "kt.parquet")
    return {(r["task"], r["metric"]): r["value"] for r in long.iter_rows(named=True)}


def test_kt_equals_the_papers_formula_by_hand(first_run):
    """Eq. 4: KT = |S_qa(Correct) ∩ (S(Neg) ∪ S(Miss))| / |S_qa(Correct)|, per task; the average is the plain mean."""
    correct = {
        "scene": {f for f in SCENES if SCENE_ANSWERS[f] != "B. No"},  # A, "The answer is A.", "(A)" are right
        "object_color": {f for f, g in COLOR_GRADES.items() if g.lower().startswith("yes")},
        "dynamic_object_number": {k for k, right in COUNT_RIGHT.items() if right},
    }
    told_wrong = {  # negative or miss in the caption verdicts
        "scene": {f for f, s in SCENE_SCORES.items() if s in (0, -1)},
        "object_color": {f for f, s in COLOR_SCORES.items() if s in (0, -1)},
        "dynamic_object_number": {(f, i) for f, ss in COUNT_SCORES.items() for i, s in enumerate(ss) if s in (0, -1)},
    }
    by_hand = {t: 100 * len(correct[t] & told_wrong[t]) / len(correct[t]) for t in correct}
    # checked by eye: scene {0,2,3} ∩ {1,2,3} = 2 of 3; colour {0,2} ∩ {0} = 1 of 2; counts {(0,0),(1,0)} ∩
    # {(0,1),(1,0)} = 1 of 2
    assert by_hand == pytest.approx({"scene": 200 / 3, "object_color": 50.0, "dynamic_object_number": 50.0})
    got = _kt_rows(first_run)
    for task, value in by_hand.items():
        assert got[(task, "kt")] == pytest.approx(value)
    assert got[("avg", "kt")] == pytest.approx(sum(by_hand.values()) / 3)
    # QA accuracy: correct answers over questions
    n_questions = {"scene": len(SCENES), "object_color": len(COLORS), "dynamic_object_number": len(COUNT_RIGHT)}
    for task, n in n_questions.items():
        assert got[(task, "qa_accuracy")] == pytest.approx(100 * len(correct[task]) / n)
    # F1 of the caption verdicts beside it (official: P = pos/(pos+neg), R = pos/all): scene P 1/2, R 1/4
    assert got[("scene", "f1")] == pytest.approx(100 * 2 * (1 / 2) * (1 / 4) / (1 / 2 + 1 / 4))


def test_qa_verdicts_say_how_each_answer_was_read(first_run):
    qa = pl.read_parquet(first_run / "qa_verdicts.parquet")
    assert qa.height == len(SCENES) + len(COLORS) + len(COUNT_RIGHT)
    scene = {r["item_id"]: json.loads(r["detail"]) for r in qa.filter(pl.col("task") == "scene").iter_rows(named=True)}
    assert scene["scene_1"]["picked"] == "B" and scene["scene_2"]["read"] == "leading letter"
    color = qa.filter(pl.col("task") == "object_color")
    assert set(color["judge"].to_list()) == {"replay"}
    assert dict(zip(color["item_id"].to_list(), color["raw_output"].to_list())) == COLOR_ANSWERS
    assert set(qa.filter(pl.col("task") != "object_color")["judge"].to_list()) == {"letter-parser"}
    items = [json.loads(line) for line in (first_run / "items.jsonl").read_text().splitlines()]
    assert {i["item_id"] for i in items if i["task"] == "dynamic_object_number"} == {"count_0/0", "count_0/1",
                                                                                   "count_1/0"}


def test_report_shows_kt_beside_f1(first_run, release):
    from capeval.engine.report.html import write_report

    page = write_report(release[4]).read_text()
    section = page[page.index('<section id="kt">'):]
    section = section[:section.index("</section>")]
    got = _kt_rows(first_run)
    row = re.search(r"<tr><td>scene</td>(.*?)</tr>", section).group(1)
    cells = re.findall(r"<td class='num'>([^<]*)", row)
    assert cells[:3] == [f"{got[('scene', m)]:.1f}" for m in ("f1", "qa_accuracy", "kt")]
    assert "captioner toy" in section


def test_terminal_table_shows_kt_beside_f1(release, capsys):
    root, anno, *_ = release
    qa = release[4] / "capability_qa" / "qa_verdicts.parquet"
    assert main(["capability", "kt", "--qa-verdicts", str(qa), "--caption-verdicts", str(root / "judgments" / "toy"),
                 "--annotations", str(anno), "--resamples", "0"]) == 0
    text = capsys.readouterr().out
    head = next(line for line in text.splitlines() if line.startswith("dimension"))
    assert head.split() == ["dimension", "f1", "qa_accuracy", "kt", "n_kt"]
    scene = next(line for line in text.splitlines() if line.startswith("scene")).split()
    assert scene[1:4] == ["33.33", "75.00", "66.67"] and scene[4] == "3"
    assert any(line.startswith("avg") for line in text.splitlines())


def test_second_run_asks_nothing_again(first_run, release):
    assert _construct(release, first_run) == 0
    steps = json.loads((first_run / "construct.json").read_text())["steps"]
    assert steps["answer"]["sent"] == 0 and steps["answer"]["cached"] == steps["answer"]["asks"] == 10
    assert steps["grade"]["sent"] == 0 and steps["grade"]["cached"] == 3


def test_a_task_answered_all_wrong_has_no_kt_and_no_average(release):
    """No S_qa(Correct): Eq. 4 is 0/0 for that task; its row says so and the average over tasks is undefined too."""
    from capeval.engine.protocols.capability.kt import kt_table
    from capeval.engine.protocols.capability.kt_grading import choice_row, qa_verdicts

    root, anno, *_ = release
    items = load_items(anno, media_root=root)
    rows = []
    for q in build_questions(items):
        if q.kind != "choice":
            continue
        right = q.task == "scene"  # every scene question right, every count question wrong
        text = q.answer if right else next(letter for letter in "ABCD" if letter != q.answer)
        rows.append(choice_row(q, {"caption_key": q.qa_id, "text": text, "frame_spec": "uniform:2"}, "toy"))
    caption = load_judgments(root / "judgments" / "toy", items).verdicts
    long = kt_table(qa_verdicts(rows), caption, n_resamples=0)
    kt = {r["task"]: r for r in long.filter(pl.col("metric") == "kt").iter_rows(named=True)}
    told_wrong = {f for f, s in SCENE_SCORES.items() if s in (0, -1)}
    assert kt["scene"]["value"] == pytest.approx(100 * len(set(SCENES) & told_wrong) / len(SCENES))
    assert kt["dynamic_object_number"]["value"] is None and "0/0" in kt["dynamic_object_number"]["note"]
    assert kt["avg"]["value"] is None and kt["avg"]["note"].startswith("undefined")
