"""Rows of a user's table file (JSONL, CSV or Parquet), each with the row number a person would look for: the
line for JSONL and CSV (the header is line 1), the 1-based row for Parquet. Value checks name file, column and row.
"""

from __future__ import annotations

import csv
import json
import math
import sys
from pathlib import Path
from typing import Any, Iterator

from capeval.engine.errors import UsageError
from capeval.engine.safetext import for_terminal

try:  # see _decode_line
    from msgspec.json import decode as _msgspec_decode
except ImportError:  # pragma: no cover - msgspec is a declared dependency
    _msgspec_decode = None

FORMATS = {".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "jsonl", ".csv": "csv", ".tsv": "tsv",
           ".parquet": "parquet", ".pq": "parquet"}


def warn(message: str) -> None:
    """A warning on stderr; file names and ids in it come from the user's files, so it is printed escaped."""
    print(f"capeval: warning: {for_terminal(message)}", file=sys.stderr, flush=True)


def table_format(path: Path) -> str:
    fmt = FORMATS.get(path.suffix.lower())
    if fmt is None:
        raise UsageError(f"{path}: unknown table format {path.suffix!r} (use .jsonl, .csv, .tsv or .parquet)")
    return fmt


def read_rows(path: str | Path) -> Iterator[tuple[int, dict]]:
    """(row number, record) for every row of `path`; a malformed file is a UsageError naming the row."""
    path = Path(path)
    if not path.is_file():
        raise UsageError(f"{path}: no such file" + (" (a folder: name a file in it)" if path.is_dir() else ""))
    fmt = table_format(path)
    try:
        if fmt == "jsonl":
            yield from _jsonl(path)
        elif fmt in ("csv", "tsv"):
            yield from _csv(path, "\t" if fmt == "tsv" else ",")
        else:
            yield from _parquet(path)
    except UnicodeDecodeError:
        raise not_utf8(path) or UsageError(f"{path}: not UTF-8 text; save the file as UTF-8") from None


def not_utf8(path: Path) -> UsageError | None:
    """The UsageError for a text file that is not UTF-8, naming the first bad line and byte (None when every line
    decodes). Found by a second
    pass over the raw lines: the decoder's position is within its read buffer, not the file, and a UTF-8
    character never spans a newline, so decoding line by line finds exactly the first bad byte."""
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, 1):
            try:
                raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                return UsageError(f"{path}:{lineno}: not UTF-8 text (byte 0x{raw[exc.start]:02x} at byte "
                                  f"{exc.start + 1} of the line); save the file as UTF-8")
    return None


def _decode_line(line: str):
    """json.loads(line), ~3x faster through msgspec (declared in pyproject.toml; plain json where it is missing). msgspec
    refuses what json accepts beyond strict JSON (NaN, Infinity, 1e400, lone surrogates): any line it refuses is
    read again by json, which gives json's value or json's error, so the records are exactly json's."""
    if _msgspec_decode is not None:
        try:
            return _msgspec_decode(line)
        except Exception:  # noqa: BLE001 - json decides: its value, or its error naming the column
            pass
    return json.loads(line)


def _jsonl(path: Path) -> Iterator[tuple[int, dict]]:
    # utf-8-sig: a byte order mark (Excel and Notepad write one) is dropped, not read as part of the first key
    with open(path, encoding="utf-8-sig") as f:
        head = f.read(1)
        f.seek(0)
        if head == "[":  # a JSON array of objects, as some tools write
            try:
                records = json.load(f)
            except json.JSONDecodeError as exc:
                raise UsageError(f"{path}:{exc.lineno}: malformed JSON ({exc.msg})") from None
            for i, rec in enumerate(records, 1):
                if not isinstance(rec, dict):
                    raise UsageError(f"{path}: element {i}: expected a JSON object, got {type(rec).__name__}")
                yield i, rec
            return
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rec = _decode_line(line)
            except json.JSONDecodeError as exc:
                raise UsageError(f"{path}:{lineno}: malformed JSON ({exc.msg} at column {exc.colno}); "
                                 f"expected one JSON object per line") from None
            if not isinstance(rec, dict):
                raise UsageError(f"{path}:{lineno}: expected a JSON object, got {type(rec).__name__}")
            yield lineno, rec


def _csv(path: Path, delimiter: str) -> Iterator[tuple[int, dict]]:
    with open(path, encoding="utf-8-sig", newline="") as f:
        reader = csv.DictReader(f, delimiter=delimiter)
        if not reader.fieldnames:
            return
        for rec in reader:
            if None in rec:
                raise UsageError(f"{path}:{reader.line_num}: more fields than the header's {len(reader.fieldnames)}")
            yield reader.line_num, {k: _csv_cell(v) for k, v in rec.items()}


#: CSV cells that spreadsheets and pandas write for a missing number: read as NaN, so they are missing values
#: (an error for ids and captions, docs/inputs.md), never the text "nan"
_NAN_CELLS = frozenset({"nan", "-nan"})


def _csv_cell(value: str) -> str | float | None:
    if value == "":  # an empty CSV cell is a missing value, as in every spreadsheet
        return None
    if value.strip().lower() in _NAN_CELLS:
        return math.nan
    return value


def _parquet(path: Path) -> Iterator[tuple[int, dict]]:
    import pyarrow.parquet as pq

    try:
        pf = pq.ParquetFile(path)
    except Exception as exc:  # noqa: BLE001 - pyarrow raises several types for a non-Parquet file
        raise UsageError(f"{path}: not a readable Parquet file ({exc})") from None
    n = 0
    for batch in pf.iter_batches(batch_size=65536):
        for rec in batch.to_pylist():
            n += 1
            yield n, rec


def where(path: Path, row: int, column: str) -> str:
    return f"{path}: row {row}, column {column!r}"


def is_missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def text_value(value: Any, path: Path, row: int, column: str, *, required: bool, id_like: bool = False) -> str | None:
    """A text cell: NaN/None/empty is missing (an error when required); an integer id becomes its decimal text
    (so 17, 17.0 and "17" name one video); any other type is an error naming file, row and column."""
    if type(value) is str and value.strip():  # the common case first: a table is read a row at a time
        return value
    if is_missing(value) or (isinstance(value, str) and not value.strip()):
        if required:
            what = "NaN" if isinstance(value, float) else "empty" if isinstance(value, str) else "missing"
            raise UsageError(f"{where(path, row, column)}: {what} value; every row needs one")
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        raise UsageError(f"{where(path, row, column)}: expected text, got a boolean ({value})")
    if id_like and isinstance(value, int):
        return str(value)
    if id_like and isinstance(value, float):
        if value.is_integer():
            return str(int(value))
        raise UsageError(f"{where(path, row, column)}: expected an id (text or integer), got the number {value}")
    if not id_like and isinstance(value, (int, float)):
        return str(value)
    raise UsageError(f"{where(path, row, column)}: expected text, got {type(value).__name__} "
                     f"({json.dumps(value, ensure_ascii=False, default=str)[:60]})")


def int_value(value: Any, path: Path, row: int, column: str) -> int | None:
    if is_missing(value):
        return None
    if isinstance(value, bool):
        raise UsageError(f"{where(path, row, column)}: expected an integer, got a boolean")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            pass
    raise UsageError(f"{where(path, row, column)}: expected an integer, got {value!r}")


def pick(rec: dict, names: tuple[str, ...]) -> tuple[str | None, Any]:
    """(column used, value) for the first of `names` present in the record."""
    for name in names:
        if name in rec and not is_missing(rec[name]):
            return name, rec[name]
    return None, None
