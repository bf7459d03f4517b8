"""VidCapBench official mode against a reference model of the official eval.py's rules (written here from
shared/protocols/README.md, not from the script), on seeded random cases that mix what the oracle cases hold one
at a time: unscored replies, stray digits, answer and judge replies with no content, sub_categories outside the map
(exact spelling), QA pairs without a caption line, caption lines without QA pairs, dimensions without pairs. Each
case goes through the production path of test_vidcapbench_oracle and is checked with its `_check`."""

from __future__ import annotations

import importlib.util
import random
from pathlib import Path

import pytest


def _oracle_module():
    spec = importlib.util.spec_from_file_location("_vidcapbench_oracle_rules",
                                                  Path(__file__).with_name("test_vidcapbench_oracle.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


ORACLE = _oracle_module()
DIMENSIONS = {
    "aesthetics": ["cinematography", "composition", "lighting", "color", "style"],
    "content": ["background", "subjects", "events"],
    "motion": ["attribute changes", "object motion", "body movements", "environmental motion",
               "spatiotemporal transformations"],
    "physics": ["spatial relationships", "counter intuitive", "common sense"],
}
NAMES = [s for subs in DIMENSIONS.values() for s in subs]
NOT_NAMES = ["Color", "object_motion", "Object Motion", "aesthetics", "unknown"]
GRADES = ["{'score': 2, 'analysis': 'Same.'}", "{'score': 1, 'analysis': 'Partly.'}",
          "{'score': 0, 'analysis': 'Not mentioned.'}", "{'score': -1, 'analysis': 'Wrong.'}",
          "{'score': 0, 'analysis': 'The first 10 words.'}", "{'score': -1, 'analysis': 'About 2 people.'}"]
ODD_REPLIES = [None, "I cannot judge this.", "", "{'score': 'two'}"]
ANSWERS = ["Red.", "Two dogs walk.", "", None]


def reference(case: dict) -> dict:
    """What the official chain gives: cases' captions in order, for each the QA pairs of its video in order."""
    by_video: dict[str, list] = {}
    for qa in case["qa"]:
        by_video.setdefault(qa["video_dir"], []).append(qa)
    counts = {k: dict.fromkeys("ABCD", 0) for k in ("overall", *DIMENSIONS)}
    avg = sum(c["t5_tokens"] for c in case["captions"]) / len(case["captions"])
    for cap in case["captions"]:
        for qa in by_video.get(cap["video_dir"], []):
            reply = qa["judge_reply"]
            if reply is None:
                return {"status": "error", "error": "KeyError: 'correctness'"}
            letter = next((x for d, x in (("2", "A"), ("-1", "D"), ("1", "B"), ("0", "C")) if d in reply), None)
            if letter is None:
                continue
            dim = next((d for d, subs in DIMENSIONS.items() if qa["sub_category"] in subs), None)
            counts["overall"][letter] += 1
            if dim is None:
                return {"status": "error", "error": "ValueError: Category Wrong"}
            counts[dim][letter] += 1
    out = {"status": "ok", "avg_token_num": avg}
    for key, c in counts.items():
        a, b, cc, d = c["A"], c["B"], c["C"], c["D"]
        if a + b + cc + d == 0 or a + b + d == 0:
            return {"status": "error", "error": "ZeroDivisionError: float division by zero"}
        acc = 100 * a / (a + b + cc + d)
        out[key] = {**c, "accuracy": acc, "precision": 100 * (a + b) / (a + b + d),
                    "coverage": 100 * (a + b + d) / (a + b + cc + d), "conciseness": 100 * acc / avg}
    return out


def random_case(seed: int) -> dict:
    rng = random.Random(seed)
    videos = [f"vid_{i}" for i in range(rng.randint(1, 4))]
    captioned = [v for v in videos if rng.random() < 0.9] or videos[:1]
    if rng.random() < 0.2:
        captioned.append("vid_without_qa")
    rng.shuffle(captioned)
    qa = []
    for v in videos:
        subs = rng.sample(NAMES, k=min(len(NAMES), rng.randint(1, 16)))
        for k, sub in enumerate(subs):
            if rng.random() < 0.06:
                sub = rng.choice(NOT_NAMES)
            reply = rng.choice(ODD_REPLIES) if rng.random() < 0.12 else rng.choice(GRADES)
            qa.append({"video_dir": v, "question_id": f"{v}-{k}", "question": f"Question {k}?", "answer": "Red.",
                       "sub_category": sub, "pred": rng.choice(ANSWERS), "judge_reply": reply,
                       "official_correctness": None})
    rng.shuffle(qa)
    return {"case_id": f"random-{seed}", "captions": [
        {"video_dir": v, "caption": f"A caption of {v}.", "t5_tokens": rng.randint(5, 60)} for v in captioned],
        "qa": qa}


@pytest.mark.parametrize("seed", range(40))
def test_official_mode_equals_the_reference_rules(seed, tmp_path):
    case = random_case(seed)
    expected = reference(case)
    params = {"mode": "official", "prompts": str(ORACLE.PACK_DIR / "vidcapbench.toml")}
    _, verdicts, metrics = ORACLE._run(case, tmp_path, **params)
    ORACLE._check(expected, metrics, verdicts, "official")
    if expected["status"] == "error" and not expected["error"].startswith("ZeroDivision"):
        assert metrics["value"].is_null().all()  # the script stopped before printing anything


def test_the_random_cases_cover_every_outcome():
    kinds = {reference(random_case(s)).get("error", "ok").split(":")[0] for s in range(40)}
    assert kinds == {"ok", "KeyError", "ValueError", "ZeroDivisionError"}, kinds
