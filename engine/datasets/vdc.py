"""VDC question sets (rese1f/aurora): <kind>.jsonl, each line {video_id: [{question, answer, category}, ...]}.

One ITEMS row per question: task = category = the file kind (short, detailed, background, main_object, camera),
item_id = "<video_id>/<index>" (numbering continues when a video id repeats), annotation = question, answer = reference answer, extra = the question's own
category label."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa

from capeval.engine import schemas
from capeval.engine.datasets.jsonl import DatasetFormatError, field, read_jsonl

BENCHMARK = "vdc"
KINDS = ("short", "detailed", "background", "main_object", "camera")


def load_questions(root: str | Path, kinds=KINDS) -> pa.Table:
    root = Path(root)
    cols = {k: [] for k in ("task", "item_id", "video_id", "annotation", "answer", "extra")}
    for kind in kinds:
        path = root / f"{kind}.jsonl"
        seen: dict[str, int] = {}
        for line, rec in read_jsonl(path):
            for video_id, qas in rec.items():
                # main_object.jsonl repeats 4 video ids with different question sets: keep all, numbered on
                first = seen.get(video_id, 0)
                seen[video_id] = first + (len(qas) if isinstance(qas, list) else 0)
                if not isinstance(qas, list):
                    raise DatasetFormatError(path, line, f"expected a list of questions, got {type(qas).__name__}",
                                             field=video_id)
                for i, qa in enumerate(qas):
                    if not isinstance(qa, dict):
                        raise DatasetFormatError(path, line, "expected an object", field=f"{video_id}[{i}]")
                    q = field(qa, "question", str, path, line)
                    a = field(qa, "answer", (str, int, float), path, line)
                    cat = field(qa, "category", str, path, line, optional=True)
                    for k, v in zip(cols, (kind, f"{video_id}/{first + i}", video_id, q, str(a),
                                           json.dumps({"question_category": cat, "line": line},
                                                      ensure_ascii=False))):
                        cols[k].append(v)
    n = len(cols["task"])
    table = pa.table({"benchmark": [BENCHMARK] * n, "media_type": ["video"] * n, "category": cols["task"], **cols})
    return schemas.conform(table, schemas.ITEMS)
