"""A JSON-lines reader whose errors name the file, the line and the field, so a bad release file is fixed in one go."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterator

from capeval.engine.errors import UsageError
from capeval.engine.inputs.rows import not_utf8


class DatasetFormatError(UsageError):
    """A dataset file does not have the expected shape; the message names file, line and field. A user's input
    error: the CLI ends with exit code 2 (a UsageError, and a ValueError as before)."""

    def __init__(self, path: str | Path, line: int | None, message: str, field: str | None = None):
        where = f"{path}" + (f":{line}" if line is not None else "")
        what = f"field {field!r}: " if field else ""
        super().__init__(f"{where}: {what}{message}")
        self.path, self.line, self.field = str(path), line, field


def read_jsonl(path: str | Path) -> Iterator[tuple[int, dict]]:
    """Yield (1-based line number, object) for every non-blank line; each line must be a JSON object."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    try:
        with open(path, "r", encoding="utf-8") as f:
            for lineno, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise DatasetFormatError(path, lineno, f"malformed JSON ({exc.msg} at column {exc.colno})") \
                        from None
                if not isinstance(record, dict):
                    raise DatasetFormatError(path, lineno, f"expected a JSON object, got {type(record).__name__}")
                yield lineno, record
    except UnicodeDecodeError:  # a user's file, not capeval's fault: the first bad line and byte, exit 2
        raise not_utf8(path) or UsageError(f"{path}: not UTF-8 text; save the file as UTF-8") from None


_TYPE_NAMES = {str: "string", int: "integer", float: "number", dict: "object", list: "array", bool: "boolean"}


def field(record: dict, name: str, types: type | tuple[type, ...], path: str | Path, line: int,
          optional: bool = False) -> Any:
    """record[name], checked against `types` (bool is never accepted as int); DatasetFormatError names the field."""
    if name not in record or record[name] is None:
        if optional:
            return None
        raise DatasetFormatError(path, line, "missing", field=name)
    value = record[name]
    wanted = types if isinstance(types, tuple) else (types,)
    if isinstance(value, bool) and bool not in wanted:
        ok = False
    else:
        ok = isinstance(value, wanted)
    if not ok:
        names = " or ".join(_TYPE_NAMES.get(t, t.__name__) for t in wanted)
        raise DatasetFormatError(path, line, f"expected {names}, got {_TYPE_NAMES.get(type(value), type(value).__name__)}"
                                 f" ({json.dumps(value, ensure_ascii=False)[:60]})", field=name)
    return value


def to_json_text(value: Any) -> str:
    """Structured values travel as JSON text (schemas.ITEMS.annotation/extra); strings stay as they are."""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
