"""Inputs for the CapQuiz construction tests: real H.264 videos of moving shapes (capeval.engine.datasets.synthetic_videos),
a dense description of each written from its ground truth, and generation replies built from the same truth (the
synthetic dataset's own questions, plus a paraphrase, a blindly solvable question and a malformed entry per video),
so every filtering rule has something to act on."""

from __future__ import annotations

import json
from pathlib import Path

from capeval.engine.protocols.capquiz.dataset_kind import SIZE, capquiz_items
from capeval.engine.datasets.synthetic_videos import make_video

N_VIDEOS = 3


def description(truth: dict) -> str:
    parts = [f"The video shows {truth['n_shapes']} shapes on a {truth['background']} background."]
    for s in truth["shapes"]:
        vx, vy = s["velocity"]
        parts.append(f"A {s['color']} {s['shape']} moves with velocity ({vx:.0f}, {vy:.0f}) pixels per second.")
    return " ".join(parts)


def make_videos(folder: Path, n: int = N_VIDEOS) -> tuple[Path, dict]:
    """(input JSONL, video_id -> truth)."""
    folder.mkdir(parents=True, exist_ok=True)
    rows, truths = [], {}
    for i in range(n):
        vid = f"vid{i}"
        path = folder / f"{vid}.mp4"
        truths[vid] = make_video(path, codec="h264", seconds=1.0, fps=8, size=SIZE, seed=100 + i)
        rows.append({"video_id": vid, "description": description(truths[vid]), "media_path": path.name})
    out = folder / "videos.jsonl"
    out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return out, truths


def generated_questions(vid: str, truth: dict) -> list[dict]:
    """What a generator might answer for the video: entries in the paper's output format."""
    out = []
    for item in capquiz_items(vid, "", truth, SIZE):
        out.append({"category": item["category"], "question": item["annotation"], "options": item["options"],
                    "answer": item["answer"]})
    bg = truth["background"]
    first = out[0]  # the background question, asked again in other words: a duplicate
    out.append({"category": "Setting", "question": "What is the color of the background in the video?",
                "options": list(reversed(first["options"])), "answer": bg})
    others = [o for o in first["options"] if o != bg][:4]
    out.append({"category": "Attribute", "question": f"The background is {bg}. Which colour is the background?",
                "options": others[:2] + [bg] + others[2:], "answer": bg})  # the question gives its answer away
    out.append({"category": "Entity", "question": "What is on screen?", "options": ["a", "b", "c", "d"],
                "answer": "a"})  # four options: malformed
    out.append({"category": "Counting", "question": f"How many {truth['shapes'][0]['shape']}s of colour "
                f"{truth['shapes'][0]['color']} are there?", "options": ["0", "1", "2", "3", "4"],
                "answer": str(sum(s["shape"] == truth["shapes"][0]["shape"] and s["color"] == truth["shapes"][0][
                    "color"] for s in truth["shapes"]))})  # a label that names none of the ten types
    return out


def generation_replies(truths: dict) -> list[dict]:
    return [{"item_id": vid, "step": "generate", "text": json.dumps(generated_questions(vid, t))}
            for vid, t in truths.items()]
