"""`capeval construct lvcap` end to end on H.264 clips with hard cuts at known frames: PySceneDetect shots, the
local pixel-statistics captioner per shot, scene narratives / events / yes-no QA from the local judge (strict pack),
the replay judge (scenes that span several shots, a malformed reply re-asked) and the paper's prompts (official
mode, read from ../shared/protocols). A rerun asks neither the captioner nor the judge anything; the items load in
`capeval judge --protocol lvcap` and give metrics."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pyarrow.parquet as pq
import pytest

from _scene_videos import make_cut_video
from capeval.adapters.local_captioner import LocalCaptioner
from capeval.adapters.local_judge import LocalJudge
from capeval.engine.registry import register

FPS = 24
VIDEOS = {"alpha": [("red", 36), ("green", 50), ("blue", 20)], "beta": [("yellow", 30), ("purple", 42)]}
COLOUR_OF = {"alpha": ["red", "green", "blue"], "beta": ["yellow", "purple"]}
SHARED = Path(__file__).resolve().parents[3] / "shared" / "protocols" / "lvcap.toml"
CALLS: dict[str, list] = {"captioner": [], "judge": []}


@register("captioner", "counting-local")
class CountingCaptioner(LocalCaptioner):
    """The local captioner, counting every request it answers."""

    def caption(self, requests):
        CALLS["captioner"] += [r.key for r in requests]
        return super().caption(requests)


@register("judge", "counting-local")
class CountingJudge(LocalJudge):
    """The local judge, keeping every request it answers."""

    def judge(self, requests):
        CALLS["judge"] += list(requests)
        return super().judge(requests)


@pytest.fixture(scope="module")
def videos(tmp_path_factory) -> tuple[Path, dict]:
    root = tmp_path_factory.mktemp("lvcap_videos")
    cuts = {vid: make_cut_video(root / f"{vid}.mp4", shots, fps=FPS) for vid, shots in VIDEOS.items()}
    return root, cuts


def _construct(*args) -> int:
    from capeval.engine.cli import main

    return main(["construct", "lvcap", *map(str, args), "--no-progress"])


def _items(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "items.jsonl").read_text().splitlines()]


def _close(a, b) -> bool:
    return len(a) == len(b) and all(abs(x - y) <= 1 / FPS + 1e-6 for x, y in zip(a, b))


def test_strict_run_builds_scene_and_event_items_and_a_rerun_asks_nothing(videos, tmp_path):
    root, cuts = videos
    out = tmp_path / "gt"
    CALLS["captioner"].clear(), CALLS["judge"].clear()
    assert _construct("--videos", root, "--out", out, "--captioner", "counting-local", "--judge",
                      "counting-local", "--shot-frames", 4, "--questions", 6) == 0
    n_shots = sum(len(s) for s in VIDEOS.values())
    assert len(CALLS["captioner"]) == n_shots  # one caption per shot
    # strict generation is schema-constrained wherever the backend has structured output: every step sends its schema
    generation = [r for r in CALLS["judge"] if r.task in ("lvcap/gt/narrative", "lvcap/gt/events", "lvcap/gt/qa")]
    assert {r.task for r in generation} == {"lvcap/gt/narrative", "lvcap/gt/events", "lvcap/gt/qa"}
    assert all(r.json_schema for r in generation)
    items = _items(out)
    for vid, shots in VIDEOS.items():
        mine = [i for i in items if i["video_id"] == vid]
        (events,) = [i for i in mine if i["task"] == "events"]
        scene_items = [i for i in mine if i["task"] == "scene"]
        extra = json.loads(events["extra"])
        # every shot differs (its colour), so the local judge makes each shot a scene: the scene cuts are the
        # detected cuts, which lie within a frame of the true ones
        assert _close(extra["shot_boundaries"], cuts[vid]) and extra["scene_boundaries"] == extra["shot_boundaries"]
        assert extra["n_scenes"] == len(shots) and extra["duration"] == pytest.approx(sum(n for _, n in shots) / FPS,
                                                                                     abs=1e-3)
        assert events["answer"].count("\n\n") == len(shots) - 1  # the reference: the scenes' narratives
        assert json.loads(events["annotation"]) and events["media_path"] == str((root / f"{vid}.mp4").resolve())
        by_scene: dict[int, list] = {}
        for i in scene_items:
            e = json.loads(i["extra"])
            by_scene.setdefault(e["scene"], []).append(i)
            assert COLOUR_OF[vid][e["scene"] - 1] in e["scene_description"]  # the shot's own caption
            assert e["scene_start"] < e["scene_end"] and i["answer"] in ("yes", "no") and i["annotation"]
        assert sorted(by_scene) == list(range(1, len(shots) + 1))
        for qs in by_scene.values():  # balanced yes/no, at most the number asked for
            answers = [q["answer"] for q in qs]
            assert 2 <= len(qs) <= 6 and answers.count("yes") == answers.count("no")
    record = pl.read_parquet(out / "record.parquet")
    steps = record.group_by("step").agg(pl.len()).sort("step").rows()
    assert dict(steps)["captions"] == n_shots and dict(steps)["narrative"] == len(VIDEOS)
    assert record.filter(pl.col("step") == "events")["request_key"].null_count() == len(VIDEOS)  # the video rows
    scenes = pq.read_table(out / "scenes.parquet").to_pylist()
    assert len(scenes) == n_shots and all(s["first_shot"] == s["last_shot"] for s in scenes)
    summary = json.loads((out / "construct.json").read_text())
    assert summary["steps"]["captions"]["sent"] == n_shots and summary["steps"]["narrative"]["sent"] == len(VIDEOS)

    before = (out / "items.jsonl").read_bytes()
    CALLS["captioner"].clear(), CALLS["judge"].clear()
    assert _construct("--videos", root, "--out", out, "--captioner", "counting-local", "--judge",
                      "counting-local", "--shot-frames", 4, "--questions", 6) == 0
    assert CALLS == {"captioner": [], "judge": []}  # shots, captions and every generation come from the stores
    again = json.loads((out / "construct.json").read_text())["steps"]
    assert all(s["sent"] == 0 and s["cached"] == s["asks"] for s in again.values()), again
    assert (out / "items.jsonl").read_bytes() == before


def test_items_load_in_capeval_judge_and_give_metrics(videos, tmp_path):
    from capeval.engine.cli import main

    root, _ = videos
    out = tmp_path / "gt"
    assert _construct("--videos", root, "--out", out, "--judge", "local", "--questions", 4) == 0
    items = _items(out)
    reference = {i["video_id"]: i["answer"] for i in items if i["task"] == "events"}
    # alpha's caption is its own reference description; beta's says something else entirely
    texts = {"alpha": reference["alpha"], "beta": "A dog runs along a beach at sunset."}
    captions = tmp_path / "captions.jsonl"
    captions.write_text("".join(json.dumps({"video_id": v, "text": t}) + "\n" for v, t in texts.items()))
    metrics = tmp_path / "metrics.csv"
    assert main(["judge", "--protocol", "lvcap", "--items", str(out / "items.jsonl"), "--captions", str(captions),
                 "--judge", "local", "--out", str(tmp_path / "v.parquet"), "--metrics", str(metrics),
                 "--cache", str(tmp_path / "cache"), "--resamples", "50", "--no-progress"]) == 0
    verdicts = pl.read_parquet(tmp_path / "v.parquet")
    scene = verdicts.filter(pl.col("task") == "scene")
    assert scene.height == sum(i["task"] == "scene" for i in items) and scene["error"].null_count() == scene.height
    per_video = {v: (d["verdict"] == 1).mean() for (v,), d in scene.partition_by("video_id", as_dict=True).items()}
    assert per_video["alpha"] == 1.0 and per_video["beta"] == 0.5  # beta: every "no" right, every "yes" wrong
    table = pl.read_csv(metrics)
    overall = {r["metric"]: r["value"] for r in table.filter(pl.col("bucket") == "all").to_dicts()}
    assert {"S_s", "S_e"} <= set(overall) and 0 < overall["S_s"] < 100 and 0 <= overall["S_e"] <= 100


def test_scenes_spanning_shots_and_a_malformed_reply_re_asked(videos, tmp_path):
    root, cuts = videos
    replies = tmp_path / "narratives.jsonl"
    gap = [{"scene": 1, "first_shot": 1, "last_shot": 1, "narrative": "A red room."},
           {"scene": 2, "first_shot": 3, "last_shot": 3, "narrative": "A blue room."}]  # shot 2 missing
    two = [{"scene": 1, "first_shot": 1, "last_shot": 2, "narrative": "A red room turns green, and a square slides."},
           {"scene": 2, "first_shot": 3, "last_shot": 3, "narrative": "A blue room, and a square slides."}]
    one = [{"scene": 1, "first_shot": 1, "last_shot": 2, "narrative": "A yellow room, then a purple one."}]
    lines = lambda scenes: "\n".join(json.dumps(s) for s in scenes)  # noqa: E731
    replies.write_text("".join(json.dumps(r) + "\n" for r in (
        {"item_id": "alpha", "step": "narrative", "attempt": 0, "text": lines(gap)},
        {"item_id": "alpha", "step": "narrative", "attempt": 1, "text": "```json\n" + lines(two) + "\n```"},
        {"item_id": "beta", "step": "narrative", "attempt": 0, "text": lines(one)})))
    out = tmp_path / "gt"
    assert _construct("--videos", root, "--out", out, "--judge", "local", "--step-judge", "narrative=replay",
                      "--judge-option", f"replay:replies={replies}", "--questions", 4) == 0
    items = _items(out)
    extra = {i["video_id"]: json.loads(i["extra"]) for i in items if i["task"] == "events"}
    assert extra["alpha"]["n_scenes"] == 2 and _close(extra["alpha"]["scene_boundaries"], cuts["alpha"][1:])
    assert extra["beta"]["n_scenes"] == 1 and extra["beta"]["scene_boundaries"] == []
    assert _close(extra["beta"]["shot_boundaries"], cuts["beta"])
    first = [json.loads(i["extra"]) for i in items if i["item_id"] == "alpha/s1/q1"][0]
    assert first["scene_start"] == 0.0 and abs(first["scene_end"] - cuts["alpha"][1]) <= 1 / FPS + 1e-6
    narrative = pl.read_parquet(out / "record.parquet").filter(pl.col("step") == "narrative").to_dicts()
    assert [r["reason"] for r in narrative] == ["2 scenes", "1 scenes"]
    summary = json.loads((out / "construct.json").read_text())
    assert summary["steps"]["narrative"]["sent"] == 3  # alpha asked twice: its first reply skipped shot 2


@pytest.mark.skipif(not SHARED.is_file(), reason="the paper's prompts are read from ../shared/protocols")
def test_official_mode_sends_the_papers_prompts_and_reads_their_layouts(videos, tmp_path):
    import tomllib

    root, cuts = videos
    CALLS["judge"].clear()
    out = tmp_path / "gt"
    assert _construct("--videos", root, "--out", out, "--mode", "official", "--prompts", SHARED, "--judge",
                      "counting-local") == 0
    pack = {p["id"]: p["user"] for p in tomllib.loads(SHARED.read_text())["prompt"]}
    sent = {(r.task, r.meta.get("item_id")): r for r in CALLS["judge"]}
    for (task, item), r in sent.items():
        pid = {"lvcap/gt/narrative": "gt/scene_narrative", "lvcap/gt/events": "gt/extract_events",
               "lvcap/gt/qa": "gt/scene_qa_generation"}[task]
        assert r.user.startswith(pack[pid].format() + "\n\n") and r.system is None and r.temperature is None
        assert r.json_schema is None  # the paper's prompts go unconstrained, as the paper sent them
    assert "Shot 2 [1.50-3.58 s]: " in sent[("lvcap/gt/narrative", "alpha")].user  # the inputs follow the prompt
    items = _items(out)
    extra = {i["video_id"]: json.loads(i["extra"]) for i in items if i["task"] == "events"}
    # Prompt1's narratives name no shots: the scenes have no times, the items keep the detected cuts
    assert all("scene_boundaries" not in e and _close(e["shot_boundaries"], cuts[v]) for v, e in extra.items())
    questions = [i for i in items if i["task"] == "scene"]
    assert len(questions) == 10 * sum(len(s) for s in VIDEOS.values())  # Prompt3's ten per scene, one ask per video
    assert sum(1 for (task, _) in sent if task == "lvcap/gt/qa") == len(VIDEOS)


def test_paper_qa_layout_parser_reads_the_prompts_own_format():
    from capeval.engine.construct.base import ParseFailure
    from capeval.engine.protocols.lvcap.construction_steps import parse_paper_qa

    reply = """Scene: 1
Description: A man sits at a table.
Question 1:
    Dimension: [Temporal]
    Question: Did the man sit down before speaking?
    Options: ["Yes", "No"]
    Correct Answer: "Yes"
    Analysis: He sits first.
**Question 2:**
    **Dimension:** Factuality
    **Question:** Was the table red?
    Options: ["Yes", "No"]
    **Correct Answer:** No
    Analysis: The table is brown.
Scene: 2
Question 1:
    Question: Is it night?
    Correct Answer: "No"
"""
    got = parse_paper_qa(reply, 2)
    assert [q["answer"] for q in got["1"]] == ["yes", "no"] and got["2"][0]["question"] == "Is it night?"
    assert got["1"][1]["question"] == "Was the table red?" and got["1"][0]["dimension"] == "[temporal]"
    with pytest.raises(ParseFailure, match="scene 3"):
        parse_paper_qa(reply.replace("Scene: 2", "Scene: 3"), 2)
    with pytest.raises(ParseFailure, match="no complete question"):
        parse_paper_qa("Scene: 1\nQuestion 1:\n    Question: no answer line?", 1)
