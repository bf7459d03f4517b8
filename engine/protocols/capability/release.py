"""CAPability release loader: annotations -> ITEMS, captions -> CAPTIONS, released GPT-4-Turbo judgments -> VERDICTS.

The rules follow the official `evaluation/eval.py` (ali-vilab/CAPability):
  * a `file_id` is unique within one task file only, so everything is keyed by (task, file_id);
  * `action` reuses the `event` videos and captions (the official script copies event captions for action);
  * a judgment's `score` 1 / 0 / -1 maps through codes.FROM_SCORE (for action, -1 "not mentioned" is still a hit);
  * camera_angle / camera_movement / style carry `pred`, a list of categories: MISS when it is (or contains) "N/A",
    POSITIVE when the annotation is in it, NEGATIVE otherwise;
  * dynamic_object_number carries `response`, one score per object: one verdict row per object (`sub_index`);
  * duplicate judgments for one file_id: the official score dict keeps the LAST one; we do the same and count them;
  * annotated items without a judgment get a NO_VERDICT row with ParseStatus.MISSING (one per object for
    dynamic_object_number), so metrics can count them instead of silently dropping them.
"""

from __future__ import annotations

import ast
import json
from dataclasses import dataclass
from pathlib import Path

import polars as pl
import pyarrow as pa

from capeval.engine import schemas
from capeval.engine.datasets.jsonl import DatasetFormatError, field, read_jsonl, to_json_text
from capeval.engine.errors import UsageError
from capeval.engine.inputs.rows import warn
from capeval.engine.keys import content_key
from capeval.engine.protocols.capability.codes import CLASSIFICATION_TASKS, FROM_SCORE, TASKS, CapabilityVerdict

BENCHMARK = "capability"
RELEASED_JUDGE = "gpt-4-turbo"
RELEASED_FRAME_SPEC = "released"
_MEDIA_TYPES = ("image", "video")


def prompt_id_for(media_type: str) -> str:
    """CAPability prompts captioners once per media type."""
    return f"capability/{media_type}"


def _task_files(directory: Path, tasks) -> list[tuple[str, Path]]:
    directory = Path(directory)
    if not directory.is_dir():
        raise FileNotFoundError(f"{directory}: not a directory")
    return [(t, directory / f"{t}.jsonl") for t in tasks]


def annotation_files(annotations: str | Path, tasks=TASKS) -> list[tuple[str, Path]]:
    """(task, file) pairs: an `annotations/` folder gives every task file in it; one `<task>.jsonl` file itself."""
    annotations = Path(annotations)
    if annotations.is_file():
        if annotations.stem not in TASKS:
            raise DatasetFormatError(annotations, None, f"not a CAPability task file (tasks: {', '.join(TASKS)})")
        return [(annotations.stem, annotations)]
    found = [(t, p) for t, p in _task_files(annotations, tasks) if p.is_file() or tasks is not TASKS]
    if not found:
        raise FileNotFoundError(f"{annotations}: no CAPability <task>.jsonl annotation files")
    return found


def is_release_file(path: str | Path) -> bool:
    """True for a CAPability annotation file (or a folder of them): records with file_id, file_path, data_type."""
    path = Path(path)
    if path.is_dir():
        path = next(iter(sorted(path.glob("*.jsonl"))), path)
    if not path.is_file() or path.suffix != ".jsonl":
        return False
    with open(path, encoding="utf-8", errors="replace") as f:  # a sniff: the loader names a byte that is not UTF-8
        first = f.readline()
    try:
        rec = json.loads(first)
    except json.JSONDecodeError:
        return False
    return isinstance(rec, dict) and {"file_id", "file_path", "data_type", "annotation"} <= set(rec)


def judgments_folder_problem(path: str | Path, tasks=TASKS) -> str | None:
    """Why `path` is not ONE model's released judgments folder (judgments/<model>/ with a <task>.jsonl per task),
    or None when it holds at least one of `tasks`' files. The release's judgments/ root is named as such, with
    the model folders it holds, so the caller can say which one to pass."""
    path = Path(path)
    if not path.is_dir():
        return "not a folder" if path.exists() else "not found"
    tasks = list(tasks)
    if any((path / f"{t}.jsonl").is_file() for t in tasks):
        return None
    models = sorted(d.name for d in path.iterdir()
                    if d.is_dir() and any((d / f"{t}.jsonl").is_file() for t in tasks))
    if models:
        shown = ", ".join(models[:8]) + (", ..." if len(models) > 8 else "")
        return (f"this folder holds the judgments of {len(models)} model folders ({shown}): pass one of them, "
                f"e.g. {path / models[0]}")
    entries = sorted(e.name + ("/" if e.is_dir() else "") for e in path.iterdir())
    held = ", ".join(entries[:8]) + (", ..." if len(entries) > 8 else "") if entries else "nothing"
    return (f"no CAPability judgment files (<task>.jsonl, e.g. {tasks[0]}.jsonl) and no model folders holding "
            f"them; it holds: {held}")


def load_items(annotations_dir: str | Path, tasks=TASKS, *, media_root: str | Path | None = None) -> pa.Table:
    """One ITEMS row per annotated item; `annotation` is JSON text when structured ({object: number}, ...).
    `annotations_dir` is the release's annotations/ folder or one task file; `media_root`: the folder the
    records' `file_path` are relative to (media_path stays as released when None)."""
    cols = {k: [] for k in ("task", "item_id", "video_id", "media_path", "media_type", "annotation")}
    root = Path(media_root) if media_root is not None else None
    for task, path in annotation_files(annotations_dir, tasks):
        seen: dict[str, dict] = {}
        dropped = 0
        for line, rec in read_jsonl(path):
            file_id = field(rec, "file_id", str, path, line)
            media_path = field(rec, "file_path", str, path, line)
            anno = field(rec, "annotation", (str, dict, list), path, line)
            rec_task = field(rec, "task", str, path, line)
            media_type = field(rec, "data_type", str, path, line)
            if rec_task != task:
                raise DatasetFormatError(path, line, f"is {rec_task!r} in the file for task {task!r}", field="task")
            if media_type not in _MEDIA_TYPES:
                raise DatasetFormatError(path, line, f"expected one of {_MEDIA_TYPES}, got {media_type!r}",
                                         field="data_type")
            if task == "dynamic_object_number" and not (isinstance(anno, dict) and anno):
                raise DatasetFormatError(path, line, "expected a non-empty {object: number} object",
                                         field="annotation")
            if file_id in seen:
                if seen[file_id] == rec:  # the same record twice: harmless once dropped, said so
                    dropped += 1
                    continue
                raise DatasetFormatError(path, line, f"duplicate file_id {file_id!r} in one task file, with a "
                                         f"different record", field="file_id")
            seen[file_id] = rec
            if root is not None and not Path(media_path).is_absolute():
                media_path = str(root / media_path)
            for k, v in zip(cols, (task, file_id, file_id, media_path, media_type, to_json_text(anno))):
                cols[k].append(v)
        if dropped:
            warn(f"{path}: dropped {dropped} identical duplicate record(s)")
    n = len(cols["task"])
    cols["benchmark"] = [BENCHMARK] * n
    return schemas.conform(pa.table(cols), schemas.ITEMS)


def load_captions(captions_dir: str | Path, items: pa.Table | None = None, captioner: str | None = None) -> pa.Table:
    """One CAPTIONS row per video/image of one captioning model (`captions_dir` = captions/<model>).

    file_ids repeat only across event/action, which share videos and captions: action.jsonl (when present) must
    agree with event.jsonl, and is used alone when event.jsonl is absent."""
    captions_dir = Path(captions_dir)
    captioner = captioner or captions_dir.name
    media = {}
    if items is not None:
        media = dict(zip(items.column("video_id").to_pylist(), items.column("media_type").to_pylist()))
    text: dict[str, str] = {}
    origin: dict[str, tuple[Path, int]] = {}
    ordered = [t for t in TASKS if t != "action"] + ["action"]
    found = False
    for task, path in _task_files(captions_dir, ordered):
        if not path.is_file():
            continue
        found = True
        for line, rec in read_jsonl(path):
            file_id = field(rec, "file_id", str, path, line)
            caption = field(rec, "caption", str, path, line)
            if file_id in text and text[file_id] != caption:
                p0, l0 = origin[file_id]
                raise DatasetFormatError(path, line, f"caption for {file_id!r} differs from {p0}:{l0}", field="caption")
            text.setdefault(file_id, caption)
            origin.setdefault(file_id, (path, line))
    if not found:
        raise FileNotFoundError(f"{captions_dir}: no <task>.jsonl caption files")
    ids = list(text)
    types = [media.get(i) or ("video" if origin[i][0].stem in ("event", "action", "camera_movement",
                                                                 "dynamic_object_number") else "image") for i in ids]
    prompts = [prompt_id_for(t) for t in types]
    keys = [content_key(BENCHMARK, captioner, p, RELEASED_FRAME_SPEC, i, text[i]) for p, i in zip(prompts, ids)]
    table = pa.table({"caption_key": keys, "captioner": [captioner] * len(ids), "prompt_id": prompts,
                      "frame_spec": [RELEASED_FRAME_SPEC] * len(ids), "video_id": ids,
                      "text": [text[i] for i in ids]})
    return schemas.conform(table, schemas.CAPTIONS)


@dataclass
class CapabilityJudgments:
    """Released judgments as VERDICTS rows (MISSING rows included) and per-task bookkeeping counts."""

    verdicts: pa.Table
    counts: pl.DataFrame  # task, n_items, n_records, n_duplicates, n_unknown, n_missing_items, n_verdicts


def _score_code(value, path, line, name="score") -> int:
    if isinstance(value, str) and value.strip() in ("1", "0", "-1"):
        value = int(value)
    if isinstance(value, bool) or value not in FROM_SCORE:
        raise DatasetFormatError(path, line, f"expected 1, 0 or -1, got {value!r}", field=name)
    return int(FROM_SCORE[value])


def _pred_code(rec, anno: str, path, line) -> int:
    pred = field(rec, "pred", (list, str), path, line)
    # As the official post_validate_format_*: any "N/A" makes the prediction ["N/A"]; a string is a Python list.
    if pred == "N/A" or "N/A" in pred:
        return int(CapabilityVerdict.MISS)
    if isinstance(pred, str):
        try:
            pred = ast.literal_eval(pred)
        except (ValueError, SyntaxError):
            raise DatasetFormatError(path, line, f"not a list of categories: {pred[:60]!r}", field="pred") from None
        if not isinstance(pred, list):
            raise DatasetFormatError(path, line, f"expected a list of categories, got {pred!r}", field="pred")
    if not all(isinstance(p, str) for p in pred):
        raise DatasetFormatError(path, line, "expected a list of strings", field="pred")
    return int(CapabilityVerdict.POSITIVE if anno in pred else CapabilityVerdict.NEGATIVE)


def _codes_of(task: str, rec: dict, anno_text: str, path, line) -> list[int]:
    """Verdict codes of one judgment record (several for dynamic_object_number)."""
    if task in CLASSIFICATION_TASKS:
        return [_pred_code(rec, anno_text, path, line)]
    if task == "dynamic_object_number":
        responses = field(rec, "response", list, path, line)
        codes = []
        for i, r in enumerate(responses):
            if not isinstance(r, dict) or "score" not in r:
                raise DatasetFormatError(path, line, f"element {i} has no 'score'", field="response")
            codes.append(_score_code(r["score"], path, line, name=f"response[{i}].score"))
        return codes
    if "score" not in rec:
        raise DatasetFormatError(path, line, "missing", field="score")
    return [_score_code(rec["score"], path, line)]


def load_judgments(judgments_dir: str | Path, items: pa.Table, *, captioner: str | None = None,
                   judge: str = RELEASED_JUDGE, on_unknown: str = "error", tasks=None) -> CapabilityJudgments:
    """Released judgments of ONE captioning model (`judgments_dir` = judgments/<model>) as VERDICTS rows.

    on_unknown: "error" (default) fails on a judgment whose file_id is not annotated for its task (the official
    script would crash on it); "count" skips it and counts it in `counts.n_unknown`."""
    if on_unknown not in ("error", "count"):
        raise ValueError(f"on_unknown must be 'error' or 'count', not {on_unknown!r}")
    judgments_dir = Path(judgments_dir)
    captioner = captioner or judgments_dir.name
    it = pl.from_arrow(items.select(["task", "item_id", "media_type", "annotation"]))
    tasks = tasks or [t for t in TASKS if t in set(it["task"].unique().to_list())]
    out = {k: [] for k in ("task", "item_id", "sub_index", "verdict", "parse_status", "detail", "media_type")}
    count_rows = []
    for task, path in _task_files(judgments_dir, tasks):
        sub = it.filter(pl.col("task") == task)
        anno = dict(zip(sub["item_id"].to_list(), sub["annotation"].to_list()))
        mtype = dict(zip(sub["item_id"].to_list(), sub["media_type"].to_list()))
        judged: dict[str, tuple[list[int], str]] = {}
        n_records = n_dup = n_unknown = 0
        for line, rec in read_jsonl(path):
            n_records += 1
            file_id = field(rec, "file_id", str, path, line)
            if file_id not in anno:
                if on_unknown == "error":
                    raise DatasetFormatError(path, line, f"{file_id!r} is not annotated for task {task!r}",
                                             field="file_id")
                n_unknown += 1
                continue
            codes = _codes_of(task, rec, anno[file_id], path, line)
            if file_id in judged:
                n_dup += 1
                del judged[file_id]  # keep the last, in file order (the official dict overwrite)
            detail = {k: v for k, v in rec.items() if k != "file_id"}
            judged[file_id] = (codes, json.dumps(detail, ensure_ascii=False))
        n_missing = 0
        for file_id, (codes, detail) in judged.items():
            for i, code in enumerate(codes):
                _append(out, task, file_id, i if task == "dynamic_object_number" else None, code,
                        schemas.ParseStatus.OK, detail, mtype[file_id])
        for file_id in anno:
            if file_id in judged:
                continue
            n_missing += 1
            n_sub = len(json.loads(anno[file_id])) if task == "dynamic_object_number" else 1
            for i in range(n_sub):
                _append(out, task, file_id, i if task == "dynamic_object_number" else None, schemas.NO_VERDICT,
                        schemas.ParseStatus.MISSING, None, mtype[file_id])
        count_rows.append({"task": task, "n_items": len(anno), "n_records": n_records, "n_duplicates": n_dup,
                           "n_unknown": n_unknown, "n_missing_items": n_missing})
    n = len(out["task"])
    media = out.pop("media_type")
    keys = [content_key(BENCHMARK, judge, captioner, t, i, s) for t, i, s in zip(out["task"], out["item_id"],
                                                                              out["sub_index"])]
    table = pa.table({
        "request_key": keys, "protocol": [BENCHMARK] * n, **{k: out[k] for k in ("task", "item_id")},
        "video_id": out["item_id"], "captioner": [captioner] * n, "prompt_id": [prompt_id_for(m) for m in media],
        "frame_spec": [RELEASED_FRAME_SPEC] * n, "sub_index": pa.array(out["sub_index"], pa.int32()),
        "judge": [judge] * n, "verdict": pa.array(out["verdict"], pa.int8()),
        "parse_status": pa.array(out["parse_status"], pa.int8()), "detail": out["detail"],
    })
    return CapabilityJudgments(schemas.conform(table, schemas.VERDICTS), pl.DataFrame(count_rows))


def _append(out, task, item_id, sub_index, code, status, detail, media_type):
    out["task"].append(task)
    out["item_id"].append(item_id)
    out["sub_index"].append(sub_index)
    out["verdict"].append(int(code))
    out["parse_status"].append(int(status))
    out["detail"].append(detail)
    out["media_type"].append(media_type)


def label_released_captions(captions: pa.Table, items: pa.Table) -> pa.Table:
    """Captions read from a caption file for release items, labelled as `capeval capability score` labels the
    released ones: the per-media prompt id and the "released" frame spec where the file named none ("file")."""
    media = dict(zip(items.column("video_id").to_pylist(), items.column("media_type").to_pylist()))
    prompts = [prompt_id_for(media.get(v) or "video") if p == "file" else p
               for v, p in zip(captions.column("video_id").to_pylist(), captions.column("prompt_id").to_pylist())]
    specs = [RELEASED_FRAME_SPEC if f == "file" else f for f in captions.column("frame_spec").to_pylist()]
    captions = captions.set_column(captions.schema.get_field_index("prompt_id"), "prompt_id",
                                   pa.array(prompts, pa.string()))
    return captions.set_column(captions.schema.get_field_index("frame_spec"), "frame_spec",
                               pa.array(specs, pa.string()))


def released_verdicts(path: Path, items: pa.Table, flag: str) -> tuple[pl.DataFrame, int]:
    """(VERDICTS rows (polars) of `items` from the released judgments/<model>/ folder `path`, the number of released
    records for ids that are no item of `items`): what `capeval score --verdicts` and `capeval judge validate
    --reference` read from such a folder. A UsageError naming `flag` when the folder is not one model's (the
    judgments/ root lists its model folders) or lacks a task of the items."""
    problem = judgments_folder_problem(path)
    if problem:
        raise UsageError(f"{flag} {path}: {problem}")
    tasks = list(dict.fromkeys(items.column("task").to_pylist()))
    absent = [t for t in tasks if not (path / f"{t}.jsonl").is_file()]
    if absent:
        raise UsageError(f"{flag} {path}: no judgments for task(s) {', '.join(absent)} (<task>.jsonl)")
    loaded = load_judgments(path, items, on_unknown="count", tasks=tasks)
    return pl.from_arrow(loaded.verdicts), int(loaded.counts["n_unknown"].sum())
