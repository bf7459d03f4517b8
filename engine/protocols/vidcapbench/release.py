"""VidCapBench QA files (the released AE / HE question sets) -> ITEMS rows.

Layout read by the official eval.py (VidCapBench @ 30fb5f1): one JSON object per line (a JSON array of such
objects is accepted too), each

    {"video_dir": "<video>", "QA_pairs": [{"question": ..., "answer": ..., "sub_category": ..., ...}, ...]}

One ITEMS row per QA pair (the flattened `QA_pairs`): video_id = video_dir (captions are matched to questions by
it, as the official script matches caption lines and QA lines), item_id = "<video_dir>#<question_id>" when the pair
has a `question_id` (or `id`), else (or when that id is taken) "<video_dir>#<n>", n = the pair's position among
all pairs of that video_dir in file order: a video may have several QA lines, and the official script judges the
pairs of every one of them; annotation = question; answer = reference answer; category = sub_category as written;
extra = {"sub_category", "dimension", "line", plus any other fields of the pair}. `dimension` is the official
sub_category -> dimension map (aesthetics, content, motion, physics); a sub_category outside it is kept with
dimension "other" (the official script raises ValueError on it; the metrics report that in official mode instead
of dropping the pair). A pair without a `sub_category` is refused (DatasetFormatError, exit 2): the official script
reads `sub_category` of every scored pair and stops with a KeyError without one.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa

from capeval.engine import schemas
from capeval.engine.datasets.jsonl import DatasetFormatError, field, read_jsonl
from capeval.engine.protocols.vidcapbench.metrics import dimension_of

BENCHMARK = "vidcapbench"
TASK = "qa"


def _records(path: Path):
    """(line, record) for JSON lines, or for the elements of one JSON array."""
    head = path.read_text(encoding="utf-8").lstrip()[:1] if path.is_file() else ""
    if head == "[":
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise DatasetFormatError(path, exc.lineno, f"malformed JSON ({exc.msg})") from None
        for i, rec in enumerate(data):
            if not isinstance(rec, dict):
                raise DatasetFormatError(path, None, f"element {i}: expected an object, got {type(rec).__name__}")
            yield i + 1, rec
    else:
        yield from read_jsonl(path)


def load_vidcapbench(path: str | Path) -> pa.Table:
    """ITEMS table of every QA pair in a VidCapBench QA file (see the module docstring)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such VidCapBench QA file")
    rows: dict[str, list] = {k: [] for k in ("item_id", "video_id", "annotation", "answer", "category", "extra")}
    seen: set[str] = set()
    n_pairs: dict[str, int] = {}  # pairs of each video_dir so far, over all its QA lines
    for line, rec in _records(path):
        video = field(rec, "video_dir", str, path, line)
        pairs = field(rec, "QA_pairs", list, path, line)
        for i, qa in enumerate(pairs):
            where = f"QA_pairs[{i}]"
            position = n_pairs.get(video, 0)
            n_pairs[video] = position + 1
            if not isinstance(qa, dict):
                raise DatasetFormatError(path, line, f"expected an object, got {type(qa).__name__}", field=where)
            try:
                question = field(qa, "question", str, path, line)
                answer = field(qa, "answer", (str, int, float), path, line)
                if "sub_category" not in qa:
                    raise DatasetFormatError(path, line, "missing: every QA pair needs one (the official eval.py "
                                                         "files each scored pair under its sub_category and stops "
                                                         "with KeyError 'sub_category' without one)",
                                             field="sub_category")
                sub = field(qa, "sub_category", str, path, line)
                qid = qa.get("question_id", qa.get("id"))
            except DatasetFormatError as exc:
                raise DatasetFormatError(path, line, f"{where}: {exc.args[0].split(': ', 1)[-1]}") from None
            item_id = f"{video}#{qid if qid is not None else position}"
            extra = {k: v for k, v in qa.items() if k not in ("question", "answer")}
            if item_id in seen:  # the official script scores every pair, ids or not: keep it, numbered by position
                if qid is not None:
                    extra["duplicate_id_of"] = item_id
                item_id = f"{video}#{position}"
                if item_id in seen:  # an explicit id elsewhere took that number
                    item_id = f"{video}#{position}@line{line}"
                if item_id in seen:
                    raise DatasetFormatError(path, line, f"duplicate QA pair id {item_id!r}", field=where)
            seen.add(item_id)
            extra.update(sub_category=sub, dimension=dimension_of(sub), line=line)
            for k, v in zip(rows, (item_id, video, question, str(answer), sub,
                                   json.dumps(extra, ensure_ascii=False, sort_keys=True))):
                rows[k].append(v)
    n = len(rows["item_id"])
    table = pa.table({"benchmark": [BENCHMARK] * n, "task": [TASK] * n, "media_type": ["video"] * n, **rows})
    return schemas.conform(table, schemas.ITEMS)
