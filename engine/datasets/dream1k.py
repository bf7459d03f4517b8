"""DREAM-1K (bytedance/tarsier): 1,000 clips with a reference description and its event list (no videos).

`load_clips` gives one ITEMS row per clip (annotation = JSON list of events, answer = reference description,
category = source dataset, extra = duration and counts); `load_events` one row per event (the unit of
AutoDQ-style event precision/recall)."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa

from engine import schemas
from engine.datasets.jsonl import DatasetFormatError, field, read_jsonl

BENCHMARK = "dream1k"


def _records(path: Path):
    for line, rec in read_jsonl(path):
        vid = field(rec, "vid", (int, str), path, line)
        info = field(rec, "extra_info", dict, path, line)
        events = field(info, "events", list, path, line)
        if not all(isinstance(e, str) for e in events):
            raise DatasetFormatError(path, line, "expected a list of strings", field="extra_info.events")
        duration = field(info, "duration", (int, float), path, line, optional=True)
        messages = field(rec, "messages", list, path, line)
        reference = None
        for m in messages:
            if isinstance(m, dict) and m.get("role") == "assistant":
                for part in m.get("content") or []:
                    if isinstance(part, dict) and isinstance(part.get("reference"), str):
                        reference = part["reference"]
        if reference is None:
            raise DatasetFormatError(path, line, "no assistant message with a 'reference' text", field="messages")
        source = field(rec, "dataset", str, path, line, optional=True)
        extra = {"duration": duration, "dataset": source, "idx": rec.get("idx"),
                 **{k: info.get(k) for k in ("n_events", "n_shots", "n_subjects")}}
        yield str(vid), events, reference, source, extra


def load_clips(path: str | Path) -> pa.Table:
    path = Path(path)
    rows = {k: [] for k in ("item_id", "annotation", "answer", "category", "extra")}
    seen = set()
    for vid, events, reference, source, extra in _records(path):
        if vid in seen:
            raise DatasetFormatError(path, None, f"duplicate vid {vid!r}", field="vid")
        seen.add(vid)
        for k, v in zip(rows, (vid, json.dumps(events, ensure_ascii=False), reference, source,
                               json.dumps(extra, ensure_ascii=False))):
            rows[k].append(v)
    n = len(rows["item_id"])
    table = pa.table({"benchmark": [BENCHMARK] * n, "task": ["caption"] * n, "video_id": rows["item_id"],
                      "media_type": ["video"] * n, **rows})
    return schemas.conform(table, schemas.ITEMS)


def load_events(path: str | Path) -> pa.Table:
    path = Path(path)
    rows = {k: [] for k in ("item_id", "video_id", "annotation", "category", "extra")}
    for vid, events, _, source, extra in _records(path):
        for k, event in enumerate(events):
            for key, v in zip(rows, (f"{vid}/{k}", vid, event, source,
                                     json.dumps({"event_index": k, "n_events": len(events),
                                                 "duration": extra["duration"]}))):
                rows[key].append(v)
    n = len(rows["item_id"])
    table = pa.table({"benchmark": [BENCHMARK] * n, "task": ["event"] * n, "media_type": ["video"] * n, **rows})
    return schemas.conform(table, schemas.ITEMS)
