"""Best-effort line numbers for a field path such as "judges[1].seeds" in a sweep file's text (tomllib and
yaml.safe_load give no positions): walk the text to the (i+1)-th `[[judges]]` header (TOML) or the i-th `- ` item
under `judges:` (YAML), then to the key's line."""

from __future__ import annotations

import re


class LineFinder:
    def __init__(self, text: str):
        self.lines = text.splitlines()

    def line_of(self, where: str, key: str | None) -> int | None:
        pos = 0
        parts = [p for p in where.split(".") if p and p != "top level"]
        for part in parts:
            m = re.match(r"^(\w+)(?:\[(\d+)\])?$", part)
            if not m:
                return None
            name, idx = m.group(1), m.group(2)
            found = self._find(rf"^\s*\[\[\s*{name}\s*\]\]", pos, int(idx) + 1) if idx is not None else None
            if found is None:
                found = self._find(rf"^\s*(-\s*)?{{?\s*{name}\s*[=:]", pos, 1) or self._find(
                    rf"^\s*\[\s*{name}\s*\]", pos, 1)
                if found is not None and idx is not None and not self.lines[found - 1].rstrip().endswith("]"):
                    found = self._find(r"^\s*-", found, int(idx) + 1) or found
            if found is None:
                break
            pos = found
        if key and (not parts or parts[-1].split("[")[0] != key):
            hit = self._find(rf"^\s*(-\s*)?{re.escape(key)}\s*[=:]", pos, 1)
            pos = hit or pos
        return pos or None

    def _find(self, pattern: str, start: int, nth: int) -> int | None:
        rx = re.compile(pattern)
        for i in range(start, len(self.lines)):
            if rx.search(self.lines[i]):
                nth -= 1
                if nth == 0:
                    return i + 1
        return None
