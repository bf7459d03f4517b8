"""Items of one video for `capeval construct lvcap` (construction.py): the scene questions and the events
item, in the shape engine/protocols/lvcap/prompts.py reads, and the record of each question kept or left out."""

from __future__ import annotations

import json

from capeval.engine.construct.base import RecordLog
from capeval.engine.frames.scenes import ShotList

BENCHMARK = "lvcap"


def _video_extra(shots: ShotList, scenes: list[dict]) -> dict:
    extra = {"source": "capeval construct lvcap", "duration": round(shots.duration, 3), "n_scenes": len(scenes),
             "n_shots": len(shots.shots), "shot_boundaries": list(shots.cuts)}
    if all(s.get("start") is not None for s in scenes):  # strict mode: every scene has its shots, hence times
        extra["scene_boundaries"] = [s["start"] for s in scenes[1:]]
    return extra


def _kept_questions(vid: str, scene: int, qs: list[dict], n: int | None, log: RecordLog) -> list[dict]:
    """The questions of a scene that become items: the first `n` distinct ones (n None: all distinct ones)."""
    kept, seen = [], {}
    for k, q in enumerate(qs, start=1):
        item_id = f"{vid}/s{scene}/q{len(kept) + 1}"
        norm = " ".join(q["question"].lower().split())
        if norm in seen:
            log.add("qa", f"{vid}/s{scene}/reply{k}", vid, kept=False, output=q,
                    reason=f"duplicate of {seen[norm]}")
            continue
        if n is not None and len(kept) >= n:
            log.add("qa", f"{vid}/s{scene}/reply{k}", vid, kept=False, output=q,
                    reason=f"beyond the {n} questions asked for")
            continue
        seen[norm] = item_id
        kept.append({**q, "item_id": item_id})
        log.add("qa", item_id, vid, kept=True, output=q, reason=f"answer {q['answer']}")
    return kept


def video_items(video: dict, shots: ShotList, scenes: list[dict], events: dict, questions: dict,
                log: RecordLog, n_questions: int | None = None) -> tuple[list[dict], list[dict]]:
    vid = video["video_id"]
    base = {"benchmark": BENCHMARK, "video_id": vid, "media_path": video["media_path"], "media_type": "video",
            "category": video.get("category")}
    common = _video_extra(shots, scenes)
    items, scene_rows = [], []
    for s in scenes:
        n = s["scene"]
        qs = questions.get((vid, n))
        times = {"scene_start": s["start"], "scene_end": s["end"]} if s.get("start") is not None else {}
        if qs is None:
            log.add("qa", f"{vid}/s{n}", vid, kept=False, reason="no questions for this scene")
            qs = []
        kept = _kept_questions(vid, n, qs, n_questions, log)
        answers = [q["answer"] for q in kept]
        if kept and answers.count("yes") != answers.count("no"):
            log.add("qa", f"{vid}/s{n}", vid, kept=True, reason=f"unbalanced answers: {answers.count('yes')} yes, "
                    f"{answers.count('no')} no (the paper asks for 1:1); kept")
        for q in kept:
            extra = {**common, "scene": n, "scene_description": s["narrative"], **times,
                     "dimension": q.get("dimension"), "analysis": q.get("analysis")}
            items.append({**base, "task": "scene", "item_id": q["item_id"], "annotation": q["question"],
                          "answer": q["answer"], "extra": json.dumps(extra, ensure_ascii=False)})
        scene_rows.append({"video_id": vid, "scene": n, "first_shot": s.get("first_shot"),
                           "last_shot": s.get("last_shot"), "start": s.get("start"), "end": s.get("end"),
                           "narrative": s["narrative"], "n_events": len(events.get((vid, n)) or []),
                           "n_questions": len(kept)})
    missing = [s["scene"] for s in scenes if (vid, s["scene"]) not in events]
    if missing:
        log.add("events", f"{vid}/events", vid, kept=False,
                reason=f"no events item: the events of scene(s) {missing} were not extracted")
        return items, scene_rows
    all_events = [e for s in scenes for e in events[(vid, s["scene"])]]
    reference = "\n\n".join(s["narrative"] for s in scenes)
    items.append({**base, "task": "events", "item_id": f"{vid}/events",
                  "annotation": json.dumps(all_events, ensure_ascii=False), "answer": reference,
                  "extra": json.dumps({**common, "n_events": len(all_events)}, ensure_ascii=False)})
    log.add("events", f"{vid}/events", vid, kept=True, output=all_events,
            reason=f"{len(all_events)} events over {len(scenes)} scenes")
    return items, scene_rows
