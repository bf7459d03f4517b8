"""Items tables in a staged job (engine/staging.py): which row names which media file, and the rewritten copy a
table needs when its media paths would no longer lead to the staged media (absolute paths, media in another root)."""

from __future__ import annotations

import json
import posixpath
from pathlib import Path

from capeval.engine.inputs.rows import read_rows


def _resolved(written: str, table: Path) -> Path:
    p = Path(written).expanduser()
    return (p if p.is_absolute() else table.parent / p).resolve()


def media_rows(table: Path) -> dict[Path, tuple[int, str]]:
    """resolved media path -> (row, media_path as written), so a refused file can be named by its row."""
    out = {}
    for n, rec in read_rows(table):
        written = rec.get("media_path")
        if isinstance(written, str) and written:
            out.setdefault(_resolved(written, table), (n, written))
    return out


def rewritten_table(table: Path, staged_table: str, staged_media: dict[Path, str]) -> tuple[str, bytes] | None:
    """None when every row's media_path, read from the staged table's folder, leads to its staged media (the table
    ships as it is); else (staged path, JSONL bytes) of a copy whose media_path name the staged media. video_id is
    kept: it defaults to media_path as written, and ids key every result."""
    folder = posixpath.dirname(staged_table)
    rows = [rec for _, rec in read_rows(table)]
    moved = False
    for rec in rows:
        written = rec.get("media_path")
        if isinstance(written, str) and written and _resolved(written, table) in staged_media:
            staged = staged_media[_resolved(written, table)]
            if Path(written).is_absolute() or posixpath.normpath(posixpath.join(folder, written)) != staged:
                moved = True
    if not moved:
        return None
    for rec in rows:
        written = rec.get("media_path")
        if isinstance(written, str) and written and _resolved(written, table) in staged_media:
            if not isinstance(rec.get("video_id"), str) or not rec.get("video_id"):
                rec["video_id"] = written
            rec["media_path"] = posixpath.relpath(staged_media[_resolved(written, table)], folder)
    data = "".join(json.dumps(r, ensure_ascii=False, default=str) + "\n" for r in rows).encode()
    return posixpath.join(folder, f"{table.stem}.staged.jsonl"), data
