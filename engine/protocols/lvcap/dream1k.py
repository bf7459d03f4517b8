"""DREAM-1K (bytedance/tarsier): 1,000 clips with a reference description and its event list (no videos).

`load_clips` gives one ITEMS row per clip in the shape the LVCap-Eval protocol judges (task "events", annotation =
JSON list of the reference events as stored, answer = reference description, category = source dataset such as
"DREAM/youtube", extra = duration, idx and the n_events / n_shots / n_subjects counts that AutoDQ buckets by);
`load_events` one row per event. `clip_items` builds the same rows from records already in memory."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa

from capeval.engine import schemas
from capeval.engine.datasets.jsonl import DatasetFormatError, field, read_jsonl

BENCHMARK = "dream1k"
TASK = "events"  # the LVCap-Eval task that judges a clip's events (AutoDQ)


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


def clip_items(clips) -> pa.Table:
    """ITEMS rows from (vid, events, reference, source, extra) tuples (what `_records` yields)."""
    rows = {k: [] for k in ("item_id", "annotation", "answer", "category", "extra")}
    seen = set()
    for vid, events, reference, source, extra in clips:
        if vid in seen:
            raise ValueError(f"duplicate vid {vid!r}")
        seen.add(vid)
        for k, v in zip(rows, (vid, json.dumps(events, ensure_ascii=False), reference, source,
                               json.dumps(extra, ensure_ascii=False))):
            rows[k].append(v)
    n = len(rows["item_id"])
    table = pa.table({"benchmark": [BENCHMARK] * n, "task": [TASK] * n, "video_id": rows["item_id"],
                      "media_type": ["video"] * n, **rows})
    return schemas.conform(table, schemas.ITEMS)


def load_clips(path: str | Path) -> pa.Table:
    path = Path(path)
    try:
        return clip_items(_records(path))
    except DatasetFormatError:
        raise
    except ValueError as exc:
        raise DatasetFormatError(path, None, str(exc), field="vid") from None


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
