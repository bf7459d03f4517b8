"""The problem collector shared by sweep-file parsing (engine/sweep/config.py) and its semantic checks
(engine/sweep/validation.py): every problem is kept (never only the first), each naming the file, the line (found
by engine/sweep/lines.py) and the field. It sits below both so neither imports the other back."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from capeval.engine.errors import UsageError
from capeval.engine.sweep.lines import LineFinder


class SweepFileError(UsageError):
    """A sweep file that cannot be run; the message lists every problem with file, line and field."""

    def __init__(self, message: str, problems: list[str] | None = None):
        super().__init__(message)
        self.problems = problems or [message]


class SweepChecker:
    """Collects problems (never stops at the first) with file and line."""

    def __init__(self, path: Path, text: str):
        self.path, self.lines, self.problems = path, LineFinder(text), []
        # key -> the file's index of each parsed entry: an entry with a wrong type is dropped from the config, so
        # the config's j-th entry may be the file's (j+1)-th; problems found later must name the file's entry
        self.positions: dict[str, list[int]] = {}

    def where(self, key: str, j: int) -> str:
        """"key[i]" for the config's j-th entry of `key`, i being its index in the file."""
        kept = self.positions.get(key)
        return f"{key}[{kept[j] if kept is not None and j < len(kept) else j}]"

    def fail(self, where: str, message: str, key: str | None = None) -> None:
        line = self.lines.line_of(where, key)
        at = f", line {line}" if line else ""
        self.problems.append(f"{self.path}{at}: {where}: {message}")

    def table(self, value: Any, spec: dict, where: str) -> bool:
        """Check keys and types; False when `value` is unusable (not a table or a required key missing/wrong)."""
        if not isinstance(value, dict):
            self.fail(where or "top level", f"expected a table, got {type(value).__name__}")
            return False
        ok = True
        for key in value:
            if key not in spec:
                self.fail(f"{where}.{key}" if where else key,
                          f"unknown key {key!r} (allowed: {', '.join(sorted(spec))})", key)
        for key, (types, required) in spec.items():
            name = f"{where}.{key}" if where else key
            if key not in value:
                if required:
                    self.fail(where or "top level", f"missing required key {key!r}", where.split("[")[0] or None)
                    ok = False
                continue
            v = value[key]
            if not type_ok(v, types):
                wanted = "/".join(t.__name__ for t in as_tuple(types))
                self.fail(name, f"expected {wanted}, got {type(v).__name__} ({v!r})", key)
                ok = ok and not required  # a bad optional key is skipped by the caller (good())
        return ok

    def good(self, value: dict, key: str, spec: dict) -> bool:
        return key in value and type_ok(value[key], spec[key][0])

    def raise_problems(self) -> None:
        """SweepFileError listing every problem collected, if any."""
        if self.problems:
            p = self.problems
            head = p[0] if len(p) == 1 else f"{len(p)} problems:\n  " + "\n  ".join(p)
            raise SweepFileError(head, p)


def type_ok(v: Any, types) -> bool:
    return isinstance(v, types) and not (isinstance(v, bool) and bool not in as_tuple(types))


def as_tuple(types) -> tuple:
    return types if isinstance(types, tuple) else (types,)
