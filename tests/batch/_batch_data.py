"""Small item and caption files for the batch tests: CapQuiz multiple-choice items and VidCapBench QA pairs about a
few videos, with captions written for them (no videos are needed: the captions come from a file)."""

from __future__ import annotations

import json
from pathlib import Path

CAPTIONS = {
    "v1": "Two red balls roll slowly across a wooden table while a hand reaches in from the left.",
    "v2": "A brown dog runs to the left across a green lawn and jumps over a small fence.",
    "v3": "A city street at night: lamps glow, a blue bus passes, two people wait at a stop.",
    "v4": "A woman pours tea into a white cup in a bright kitchen, then sits down by the window.",
}

CAPQUIZ = [
    ("v1", "What colour are the balls?", ["red", "blue", "green", "yellow"], "red"),
    ("v1", "How many balls are there?", ["one", "two", "three", "four"], "two"),
    ("v2", "Which way does the dog run?", ["left", "right", "up", "stays still"], "left"),
    ("v2", "What does the dog jump over?", ["a fence", "a chair", "a ball", "a car"], "a fence"),
    ("v3", "When is the scene?", ["morning", "noon", "night", "dawn"], "night"),
    ("v3", "What passes by?", ["a bus", "a bike", "a train", "a boat"], "a bus"),
    ("v4", "What does the woman pour?", ["tea", "milk", "water", "juice"], "tea"),
    ("v4", "Where does she sit?", ["by the window", "on the floor", "in a car", "on a bench"], "by the window"),
]

VIDCAPBENCH = [
    ("v1", "What colour are the balls?", "red", "color"),
    ("v1", "What moves across the table?", "two balls", "object"),
    ("v2", "Where does the dog run?", "to the left", "motion"),
    ("v3", "What time of day is it?", "night", "scene"),
    ("v4", "What is poured into the cup?", "tea", "action"),
]


def write_inputs(folder: Path, protocol: str) -> tuple[Path, Path]:
    """(items file, captions file) in `folder` for `protocol` ("capquiz" or "vidcapbench")."""
    folder.mkdir(parents=True, exist_ok=True)
    items = folder / f"{protocol}-items.jsonl"
    rows = []
    if protocol == "capquiz":
        for i, (video, question, options, answer) in enumerate(CAPQUIZ):
            rows.append({"item_id": f"{video}#{i}", "video_id": video, "question": question, "options": options,
                         "answer": answer, "task": "default", "category": "Action"})
    else:
        for i, (video, question, answer, sub) in enumerate(VIDCAPBENCH):
            rows.append({"item_id": f"{video}#{i}", "video_id": video, "question": question, "answer": answer,
                         "category": sub})
    items.write_text("".join(json.dumps(r) + "\n" for r in rows))
    captions = folder / "captions.jsonl"
    captions.write_text("".join(json.dumps({"video_id": v, "caption": c}) + "\n" for v, c in CAPTIONS.items()))
    return items, captions


def _toml(value) -> str:
    """A TOML value: tables inline (nested too), booleans lower case, strings and numbers as JSON writes them."""
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {_toml(v)}" for k, v in value.items()) + " }"
    if isinstance(value, bool):
        return "true" if value else "false"
    return json.dumps(value)


def file_sweep(folder: Path, protocol: str, judge: dict) -> Path:
    """A sweep file judging `protocol` on the items and captions above (captions from a file: no video, no
    captioner). `judge`: {"name": ..., "params": {...}}; values that are tables are written as inline tables."""
    items, captions = write_inputs(folder, protocol)
    path = folder / f"{protocol}.toml"
    path.write_text(f"""name = "batch-{protocol}"

[[datasets]]
name = "qa"
kind = "items"
path = {json.dumps(str(items))}
benchmark = "{protocol}"

[[captions]]
path = {json.dumps(str(captions))}
captioner = "filecap"

[[protocols]]
name = "{protocol}"

[[judges]]
name = {json.dumps(judge["name"])}
params = {_toml(judge["params"])}

[options]
n_resamples = 50
""")
    return path


def requests_for(folder: Path, protocol: str, judge_name: str, judge_revision: str, **params):
    """The protocol's first-step request table for the files above."""
    from capeval.engine.inputs import read_captions, read_items
    from capeval.engine.registry import lookup

    items_path, captions_path = write_inputs(folder, protocol)
    items = read_items(items_path, benchmark=protocol)
    captions = read_captions(captions_path, captioner="filecap")
    return lookup("protocol", protocol).build_requests(items, captions, judge=judge_name,
                                                       judge_revision=judge_revision, **params)
