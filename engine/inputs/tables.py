"""ITEMS and CAPTIONS tables from the files people have (JSONL, CSV, Parquet), with the documented columns
(docs/inputs.md). Checked before any work: a bad table stops the command with a UsageError (exit code 2) naming
file, row and column, never a silently biased metric.

ITEMS columns (most optional):
    item_id                 unique within (benchmark, task); defaults to video_id when each video has one item
    video_id | media_path   the video or image; video_id defaults to media_path as written
    task                    default "default"        benchmark     default: the protocol (or "items")
    annotation | question   text, or an object/array (kept as JSON text)
    options                 array of texts (or JSON text of one)   answer, category   text
    media_type              image | video; default from media_path's suffix
    other columns           kept in `extra` (JSON) unless an `extra` column is given
CAPTIONS columns: video_id | item_id (| file_id), caption (| text), optional captioner, prompt_id, frame_spec,
n_tokens, error.

Duplicates: rows with the same key and the same content are dropped with a warning; the same key with different
content is an error naming the ids.
"""

from __future__ import annotations

import json
from array import array
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from capeval.engine import schemas
from capeval.engine.errors import UsageError
from capeval.engine.frames.images import media_type_of
from capeval.engine.inputs.rows import FORMATS, int_value, is_missing, pick, read_rows, text_value, warn, where
from capeval.engine.inputs.tool_formats import format_problem, tool_caption_rows, tool_captioner_label
from capeval.engine.keys import canonical_json, caption_file_key, repeated_caption_file_key
from capeval.engine.registry import lookup, names
from capeval.engine.safetext import clip

_ITEM_COLUMNS = {"benchmark", "task", "item_id", "video_id", "media_path", "media_type", "annotation", "question",
                 "options", "answer", "category", "extra"}
_OPTION_TYPES = {str, int, float}  # an option's types (bool is not one: type(True) is bool)
_CAPTION_COLUMNS = {"video_id", "item_id", "file_id", "caption", "text", "captioner", "prompt_id", "frame_spec",
                    "n_tokens", "prompt_tokens", "latency_s", "error", "truncated", "frames_sent"}


def _dedupe(rows: list[dict], key_cols: tuple[str, ...], lines: list[int], path: Path, what: str) -> list[dict]:
    """Drop identical duplicate rows (warning); the same key with different content is a UsageError."""
    seen: dict[tuple, tuple[dict, int]] = {}  # key -> its first row and line
    bodies: dict[tuple, str] = {}  # key -> canonical JSON of its first row, made only when the key repeats
    keep, dropped, clashes = [], 0, []
    for row, line in zip(rows, lines):
        key = tuple(map(row.get, key_cols))
        if key in seen:
            if key not in bodies:
                bodies[key] = canonical_json(seen[key][0])
            if bodies[key] == canonical_json(row):
                dropped += 1
                continue
            clashes.append(_clash(key, seen[key][1], line))
            continue
        seen[key] = (row, line)
        keep.append(row)
    _settle_duplicates(path, what, key_cols, clashes, dropped)
    return keep


def _settle_duplicates(path: Path, what: str, key_cols: tuple[str, ...], clashes: list[str], dropped: int) -> None:
    if clashes:
        more = f" and {len(clashes) - 5} more" if len(clashes) > 5 else ""
        raise UsageError(f"{path}: duplicate {what} ids with different content ({', '.join(key_cols)}): "
                         f"{'; '.join(clashes[:5])}{more}")
    if dropped:
        warn(f"{path}: dropped {dropped} identical duplicate {what} row(s)")


def _clash(key: tuple, first_line: int, line: int) -> str:
    ids = "/".join(clip(k, 60) for k in key if k is not None)  # ids from the file: printed escaped
    return f"{ids} (rows {first_line} and {line})"


def _json_text(value: Any, path: Path, row: int, column: str) -> str | None:
    if is_missing(value):
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, (dict, list, int, float, bool)):
        return json.dumps(value, ensure_ascii=False)
    raise UsageError(f"{where(path, row, column)}: expected text or JSON, got {type(value).__name__}")


def _options(value: Any, path: Path, row: int) -> list[str] | None:
    if is_missing(value):
        return None
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            raise UsageError(f"{where(path, row, 'options')}: expected an array of texts (JSON text in CSV), got "
                             f"{value[:60]!r}") from None
    if hasattr(value, "tolist"):
        value = value.tolist()
    if not isinstance(value, list) or (not set(map(type, value)) <= _OPTION_TYPES  # the common case at once
                                       and not all(isinstance(o, (str, int, float)) and not isinstance(o, bool)
                                                   for o in value)):
        raise UsageError(f"{where(path, row, 'options')}: expected an array of texts, got {value!r:.60}")
    return [str(o) for o in value]


def read_items(path: str | Path, *, benchmark: str | None = None, resolve_media: bool = True) -> pa.Table:
    """An ITEMS table from a user's file; relative media paths resolve against the file's folder."""
    path = Path(path)
    rows = _ItemRows(path)
    for n, rec in read_rows(path):
        if "file_id" in rec and "data_type" in rec and "item_id" not in rec:  # release annotations, not items
            kind = release_kind_of(path)
            if kind is None:
                raise UsageError(f"{path}: this looks like a benchmark's release annotation file (file_id, data_type, "
                                 f"no item_id); read it with --dataset KIND, the benchmark's dataset kind")
            raise UsageError(f"{path}: this is a {kind} release annotation file; use --dataset {kind} "
                             f"(or a sweep dataset of kind '{kind}')")
        vcol, video = pick(rec, ("video_id",))
        video = text_value(video, path, n, "video_id", required=False, id_like=True)
        media = text_value(rec.get("media_path"), path, n, "media_path", required=False)
        if video is None and media is None:
            raise UsageError(f"{where(path, n, 'video_id')}: every item needs video_id or media_path")
        video = video or media
        item = text_value(rec.get("item_id"), path, n, "item_id", required=False, id_like=True)
        if "item_id" in rec and item is None:
            raise UsageError(f"{where(path, n, 'item_id')}: empty or NaN item id")
        acol, anno = pick(rec, ("annotation", "question"))
        media_type = text_value(rec.get("media_type"), path, n, "media_type", required=False)
        if media_type is None and media is not None:
            media_type = media_type_of(media)
        if media_type not in (None, "image", "video"):
            raise UsageError(f"{where(path, n, 'media_type')}: expected 'image' or 'video', got {media_type!r}")
        if media and resolve_media and not Path(media).is_absolute():
            media = str((path.parent / media).resolve())
        others = {k: v for k, v in rec.items() if k not in _ITEM_COLUMNS and not is_missing(v)}
        extra = _json_text(rec.get("extra"), path, n, "extra") if "extra" in rec else (
            json.dumps(others, ensure_ascii=False, default=str) if others else None)
        rows.add({
            "benchmark": text_value(rec.get("benchmark"), path, n, "benchmark", required=False) or benchmark or "items",
            "task": text_value(rec.get("task"), path, n, "task", required=False, id_like=True) or "default",
            "item_id": item, "video_id": video, "media_path": media, "media_type": media_type or "video",
            "annotation": _json_text(anno, path, n, acol or "annotation"),
            "options": _options(rec.get("options"), path, n),
            "answer": text_value(rec.get("answer"), path, n, "answer", required=False),
            "category": text_value(rec.get("category"), path, n, "category", required=False, id_like=True),
            "extra": extra,
        }, n)
    return rows.table()


_ITEM_KEY = ("benchmark", "task", "item_id")
_BATCH_ROWS = 4096  # item rows made into Arrow at a time


class _ItemRows:
    """read_items' rows, made into the ITEMS table a batch at a time: a big file's rows are never all held as dicts
    (their memory, and the garbage collector's passes over them, grew with the file). item_id defaults to video_id
    (a video with several different items without ids is an error naming their rows); identical duplicates are
    dropped with a warning, the same id with different content is an error (_dedupe's rules and texts).

    Duplicates are found on the table (`_duplicates`), not with a Python dict of every row's key: such a dict (a
    tuple of three strings per row) was ~37 MB at 100,000 items and, freed after the checks, left its memory in
    the interpreter's arenas for the rest of the run (issue 30's scale RSS). Only the rows of repeated keys are
    made back into dicts, to compare their bodies."""

    def __init__(self, path: Path):
        self.path = path
        self.read = 0
        self.batches: list[pa.Table] = []
        self.pending: list[dict] = []  # rows not made into a batch yet
        self.lines = array("q")  # each row's line (row number), by position in the table
        # (benchmark, task, video_id) of rows without item_id -> [their lines, the first as read (then its canonical
        # JSON), whether another differs from it]
        self.unnamed: dict[tuple, list] = {}

    def add(self, row: dict, line: int) -> None:
        self.read += 1
        if row["item_id"] is None:
            group = self.unnamed.get(at := (row["benchmark"], row["task"], row["video_id"]))
            if group is None:
                self.unnamed[at] = [[line], dict(row), False]
            else:
                group[0].append(line)
                if isinstance(group[1], dict):
                    group[1] = canonical_json(group[1])
                group[2] = group[2] or canonical_json(row) != group[1]
            row["item_id"] = row["video_id"]
        self.lines.append(line)
        self.pending.append(row)
        if len(self.pending) >= _BATCH_ROWS:
            self._flush()

    def _flush(self) -> None:
        if self.pending:
            # column by column: every row has read_items' keys, and a column's list is typed as `from_pylist` would
            # type it, in a third of the time (Python lists, not a dict lookup per row and column in Arrow)
            rows = self.pending
            self.batches.append(schemas.conform(pa.table({name: [row[name] for row in rows] for name in rows[0]}),
                                                schemas.ITEMS))
            self.pending = []

    def _duplicates(self, table: pa.Table) -> tuple[list[int], list[str], int]:
        """(positions of the rows to leave out, clash messages, identical rows dropped): a key's first row is kept,
        a later one identical to it is dropped, a different one is a clash naming both lines, in file order."""
        keys = list(_ITEM_KEY)
        counts = table.select(keys).group_by(keys, use_threads=False).aggregate([([], "count_all")])
        if counts.num_rows == table.num_rows:  # every key once (the usual case)
            return [], [], 0
        repeated = counts.filter(pc.greater(counts.column("count_all"), 1)).select(keys)
        # the keys only: a join cannot carry the list column (options) along
        positioned = table.select(keys).append_column("_position", pa.array(np.arange(table.num_rows)))
        positions = np.sort(positioned.join(repeated, keys=keys, join_type="inner").column("_position").to_numpy())
        first: dict[tuple, tuple[dict, int]] = {}  # repeated key -> its first row and line
        bodies: dict[tuple, str] = {}  # repeated key -> canonical JSON of its first row
        leave_out, clashes, dropped = [], [], 0
        for position, row in zip(positions.tolist(), table.take(pa.array(positions)).to_pylist()):
            key, line = tuple(map(row.get, keys)), self.lines[position]
            if key not in first:
                first[key] = (row, line)
                continue
            leave_out.append(position)
            if key not in bodies:
                bodies[key] = canonical_json(first[key][0])
            if bodies[key] == canonical_json(row):
                dropped += 1
            else:
                clashes.append(_clash(key, first[key][1], line))
        return leave_out, clashes, dropped

    def table(self) -> pa.Table:
        if not self.read:
            raise UsageError(f"{self.path}: no items")
        for (_, task, vid), (lines, _, differ) in self.unnamed.items():
            if differ:
                raise UsageError(f"{self.path}: video {vid!r} (task {task!r}) has several items (rows {lines[:5]}) "
                                 f"and no item_id column to tell them apart; add item_id")
        self._flush()
        # One contiguous copy, the batches freed: each batch's buffers were allocated between the garbage of reading
        # the next rows, and left Arrow's allocator holding pages it could not give back (+22 MB at 100,000 items)
        table = self.batches[0] if len(self.batches) == 1 else pa.concat_tables(self.batches).combine_chunks()
        self.batches = []
        leave_out, clashes, dropped = self._duplicates(table)
        _settle_duplicates(self.path, "item", _ITEM_KEY, clashes, dropped)
        if leave_out:
            keep = np.ones(table.num_rows, dtype=bool)
            keep[leave_out] = False
            table = table.filter(pa.array(keep))
        return table


def read_captions(path: str | Path, *, captioner: str | None = None, prompt_id: str | None = None,
                  frame_spec: str | None = None, every_line: bool = False, empty_text: bool = False,
                  caption_format: str | None = None, id_field: str | None = None, keys: bool = True) -> pa.Table:
    """A CAPTIONS table from a user's caption file (captions written elsewhere, e.g. a model's released ones).
    captioner defaults to the `captioner` column, else the file's folder name for a `<model>/<task>.jsonl` layout,
    else the file name; prompt_id and frame_spec to the columns, else "file".

    `caption_format` other than "capeval" (capeval's own table) reads another tool's output file instead
    (capeval.engine.inputs.tool_formats: "lmms-eval", "vlmevalkit", "inspect"), its records named by `id_field`
    (default: the tool's own id) and its captioner by `captioner`, else the model the file names.

    For protocols whose official script judges every line of the caption file (JudgeProtocol.caption_file_rules):
    `every_line` keeps each line as its own caption -- a repeated line is not dropped, a second caption of a video
    is not an error -- each with its own caption_key (a line's first occurrence has the usual key, its k-th repeat
    that key with k, so each line is judged on its own and moving lines keeps the keys);
    `empty_text` accepts an empty (or blank) caption as the text to judge, as such a script formats it into its
    prompt. A missing (null) caption stays an error. `keys=False` (a check that reads the file only to refuse what
    the run would refuse) leaves caption_key empty instead of hashing every caption."""
    path = Path(path)
    rows, lines = [], []
    if problem := format_problem(caption_format, id_field):
        raise UsageError(f"{path}: {problem[0]}: {problem[1]}")
    from_tool = caption_format not in (None, "capeval")
    if from_tool:
        records = tool_caption_rows(path, caption_format, id_field, keep_empty=empty_text)
        default_captioner = captioner or tool_captioner_label(path, caption_format)
    else:
        records = read_rows(path)
        default_captioner = captioner or _captioner_from_path(path)
    for n, rec in records:
        unknown = set(rec) - _CAPTION_COLUMNS
        if "caption" not in rec and "text" not in rec:
            raise UsageError(f"{where(path, n, 'caption')}: missing; a caption file needs a `caption` column "
                             f"(have {sorted(rec)})")
        icol, vid = pick(rec, ("video_id", "item_id", "file_id"))
        if icol is None:
            raise UsageError(f"{where(path, n, 'video_id')}: every caption needs video_id or item_id "
                             f"(have {sorted(rec)})")
        vid = text_value(vid, path, n, icol, required=True, id_like=True)
        ccol = "caption" if "caption" in rec else "text"
        error = text_value(rec.get("error"), path, n, "error", required=False)
        raw = rec.get(ccol)
        if empty_text and isinstance(raw, str) and not raw.strip():
            text = raw
        else:
            text = text_value(raw, path, n, ccol, required=error is None)
        cap = text_value(rec.get("captioner"), path, n, "captioner", required=False) or default_captioner
        pid = text_value(rec.get("prompt_id"), path, n, "prompt_id", required=False) or prompt_id or "file"
        spec = text_value(rec.get("frame_spec"), path, n, "frame_spec", required=False) or frame_spec or "file"
        rows.append({"captioner": cap, "prompt_id": pid, "frame_spec": spec, "video_id": vid, "text": text,
                     "n_tokens": int_value(rec.get("n_tokens"), path, n, "n_tokens"),
                     "prompt_tokens": int_value(rec.get("prompt_tokens"), path, n, "prompt_tokens"),
                     "error": error})
        lines.append(n)
        if unknown and len(lines) == 1:
            warn(f"{path}: ignoring column(s) {sorted(unknown)}")
    if not rows:
        raise UsageError(f"{path}: no captions" + (f" ({caption_format} records)" if from_tool else ""))
    if every_line:
        seen: dict[str, int] = {}
        for r in rows:
            key = caption_file_key(r["captioner"], r["prompt_id"], r["frame_spec"], r["video_id"], r["text"])
            repeat = seen.get(key, 0)
            seen[key] = repeat + 1
            r["caption_key"] = key if not repeat else repeated_caption_file_key(key, repeat)
        return schemas.conform(pa.Table.from_pylist(rows), schemas.CAPTIONS)
    rows = _dedupe(rows, ("captioner", "prompt_id", "frame_spec", "video_id"), lines, path, "caption")
    for r in rows:
        r["caption_key"] = caption_file_key(r["captioner"], r["prompt_id"], r["frame_spec"], r["video_id"],
                                            r["text"]) if keys else ""
    return schemas.conform(pa.Table.from_pylist(rows), schemas.CAPTIONS)


def release_kind_of(path: Path) -> str | None:
    """The dataset kind that reads `path` as a registered benchmark's release layout (its protocol's
    `release_dataset_kind`), else None."""
    return next((kind for name in names("protocol") if (kind := lookup("protocol", name).release_dataset_kind(path))),
                None)


def _captioner_from_path(path: Path) -> str:
    """`<model>/<task>.jsonl` (a task a registered protocol declares, e.g. a benchmark's released captions) names
    its captioner by the folder; any other file by its own name."""
    tasks = {t for n in names("protocol") for t in lookup("protocol", n).tasks}
    return path.parent.name if path.stem in tasks and path.parent.name else path.stem


def item_location(source: str | Path | None, item: dict, column: str) -> str:
    """Where an item's problem is, for a message: "FILE: row N, column 'C'" when `source` is the table file the item
    was read from (the row found again by its id), else "item 'ID' (task 'T'), column 'C'"; followed by the columns
    of that row capeval does not read, kept in `extra` (a misnamed column, `choices` for `options`, is read there
    and the real column looks empty)."""
    extra = item.get("extra")
    try:
        unknown = sorted(json.loads(extra)) if extra else []
    except (json.JSONDecodeError, TypeError):
        unknown = []
    path = Path(source) if source is not None else None
    row = _row_of(path, item) if path is not None and path.is_file() and path.suffix.lower() in FORMATS else None
    if row is not None:
        unknown = row[1]
        at = f"{path}: row {row[0]}, column {column!r}"
    else:
        at = f"item {clip(item.get('item_id'), 60)!r} (task {clip(item.get('task'), 40)!r}), column {column!r}"
    if unknown and isinstance(unknown, list):
        at += (f" (column(s) {', '.join(repr(clip(u, 40)) for u in unknown[:8])} of this row are not capeval's and "
               f"were kept in `extra`; the columns capeval reads are listed in docs/inputs.md)")
    return at


def _row_of(path: Path, item: dict) -> tuple[int, list[str]] | None:
    """(row number, unknown columns) of `item` in table `path`: the row whose item_id (or, without one, whose
    video_id / media_path) is the item's id, of the item's task when the row names one."""
    want, task = item.get("item_id"), item.get("task")
    try:
        for n, rec in read_rows(path):
            if rec.get("task") not in (None, task) and str(rec.get("task")) != task:
                continue
            ids = [rec.get("item_id")] if not is_missing(rec.get("item_id")) else [rec.get("video_id"),
                                                                                   rec.get("media_path")]
            if any(v is not None and not is_missing(v) and str(v) == want for v in ids):
                return n, sorted(k for k in rec if k not in _ITEM_COLUMNS and not is_missing(rec[k]))
    except (UsageError, OSError):
        return None
    return None
