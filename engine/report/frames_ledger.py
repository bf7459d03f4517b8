"""The frames-seen ledger of a run, shown and compared (`capeval show --frames`, `capeval compare --frames`).

Each caption row of a run folder's `captions/` records what its model was given (engine/frames/ledger.py). Here the
rows are read, selected like the other commands' systems (`captioner=X,frame_spec=Y` or a bare value), printed,
and two sides (two run folders, or two selections of systems) are compared video by video: identical frames, or
the frame indices (else timestamps) and sizes where they differ. Every value that came from a file or a label is
escaped for the terminal.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import polars as pl

from capeval.engine.frames.ledger import compare_ledgers, read_ledger
from capeval.engine.report.compare import matches_selector
from capeval.engine.safetext import clip, for_terminal
from capeval.engine.store.segments import SegmentStore

SYSTEM_COLUMNS = ("captioner", "prompt_id", "frame_spec")


def caption_rows(source: str | Path) -> pl.DataFrame:
    """Successful caption rows (system columns, video_id, frames_seen) of a run folder's `captions/`, or of a
    captions table (.parquet) that has those columns; one row per caption key."""
    path = Path(source)
    if path.is_file() and path.suffix == ".parquet":
        table = pl.read_parquet(path)
    elif path.is_dir():
        store = path / "captions"
        if not store.is_dir():
            raise FileNotFoundError(f"{path} holds no captions/: not a capeval run folder with captions")
        table = pl.from_arrow(SegmentStore(store).read())
    else:
        raise FileNotFoundError(f"no such run folder or captions table: {path}")
    missing = [c for c in (*SYSTEM_COLUMNS, "video_id") if c not in table.columns]
    if missing:
        raise ValueError(f"{path}: not a captions table (lacks {', '.join(missing)})")
    if "frames_seen" not in table.columns:
        table = table.with_columns(pl.lit(None, pl.String).alias("frames_seen"))
    if "error" in table.columns:
        table = table.filter(pl.col("error").is_null())
    if "caption_key" in table.columns:
        table = table.unique(subset=["caption_key"], keep="first", maintain_order=True)
    return table.select([*SYSTEM_COLUMNS, "video_id", "frames_seen"])


def select_rows(rows: pl.DataFrame, selector: str | None = None, video: str | None = None) -> pl.DataFrame:
    """The rows of the systems `selector` names (all without one) and of `video` (all without one)."""
    keep = [matches_selector(r, selector) and (video is None or r["video_id"] == video)
            for r in rows.select([*SYSTEM_COLUMNS, "video_id"]).iter_rows(named=True)]
    return rows.filter(pl.Series(keep, dtype=pl.Boolean)) if rows.height else rows


def ledger_records(rows: pl.DataFrame) -> list[dict]:
    """One record per row: its system, video and ledger (None when the row has none)."""
    return [{**{c: r[c] for c in SYSTEM_COLUMNS}, "video_id": r["video_id"], "frames_seen": read_ledger(r["frames_seen"])}
            for r in rows.sort([*SYSTEM_COLUMNS, "video_id"]).iter_rows(named=True)]


def _numbers(values, digits: int | None = None, shown: int = 16) -> str:
    if values is None:
        return "-"
    text = [("-" if v is None else (f"{v:.{digits}f}" if digits is not None else str(v))) for v in values]
    more = f" … ({len(text)} in all)" if len(text) > shown else ""
    return " ".join(text[:shown]) + more


def format_ledger(record: dict) -> str:
    """The text of one row's ledger, every value escaped for the terminal."""
    head = " ".join(f"{c}={for_terminal(record[c])}" for c in (*SYSTEM_COLUMNS, "video_id"))
    ledger = record.get("frames_seen")
    if ledger is None:
        return f"{head}\n  no ledger (a caption read from a file, or made before capeval recorded frames seen)"
    rate = ledger.get("rate")
    lines = [head,
             f"  decoder    {for_terminal(ledger.get('decoder') or '-')} "
             f"({for_terminal(ledger.get('decoder_version') or 'version not recorded')})"
             + (f", {rate:g} frames/s" if rate else ""),
             f"  frames     {ledger.get('n_frames')} at {for_terminal(ledger.get('frame_size') or '-')} by "
             f"{for_terminal(ledger.get('frame_spec') or '-')}",
             f"  indices    {_numbers(ledger.get('indices'))}",
             f"  timestamps {_numbers(ledger.get('timestamps'), 3)}",
             f"  digest     {for_terminal(ledger.get('digest') or '-')}"]
    if ledger.get("frames_sent") is not None:
        lines.append(f"  sent       positions {_numbers(ledger['frames_sent'])} of the frames given")
    processor = ledger.get("processor")
    if processor:
        for key in sorted(processor):
            lines.append(f"  processor  {for_terminal(key)}: {clip(_compact(processor[key]), 200)}")
    else:
        lines.append("  processor  (the backend reports nothing more)")
    return "\n".join(lines)


def _compact(value) -> str:
    import json

    return value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)


@dataclass
class Side:
    """One side of a comparison: its name as given and its rows."""

    name: str
    rows: pl.DataFrame


class AmbiguousSide(ValueError):
    """A side whose systems saw different frames of one video: which frames it means is not said."""


def _per_video(side: Side) -> dict[str, tuple[dict | None, list[str]]]:
    """video_id -> (its ledger, the systems of the side that have it); AmbiguousSide when a side's systems saw
    different frames of a video."""
    out: dict[str, tuple[dict | None, list[str]]] = {}
    seen: dict[str, dict[str, list[str]]] = {}
    for r in side.rows.iter_rows(named=True):
        ledger = read_ledger(r["frames_seen"])
        system = ",".join(f"{c}={r[c]}" for c in SYSTEM_COLUMNS)
        digest = ledger.get("digest") if ledger else None
        groups = seen.setdefault(r["video_id"], {})
        groups.setdefault(str(digest), []).append(system)
        if r["video_id"] not in out or (out[r["video_id"]][0] is None and ledger is not None):
            out[r["video_id"]] = (ledger, groups[str(digest)])
    for video, groups in seen.items():
        known = {d: s for d, s in groups.items() if d != "None"}
        if len(known) > 1:
            listed = "; ".join(f"{', '.join(sorted(set(s)))}" for s in known.values())
            raise AmbiguousSide(f"{side.name} holds systems that saw different frames of video {video!r} ({listed}): "
                                f"name one frame spec and captioner, e.g. 'captioner=X,frame_spec=Y'")
    return out


def compare_sides(a: Side, b: Side) -> dict:
    """Per video both sides captioned: identical frames or where they differ; and the videos only one side has."""
    va, vb = _per_video(a), _per_video(b)
    videos = []
    for video in sorted(set(va) & set(vb)):
        result = compare_ledgers(va[video][0], vb[video][0])
        videos.append({"video_id": video, **result})
    counts = {s: sum(v["status"] == s for v in videos) for s in ("identical", "differ", "unknown")}
    return {"a": a.name, "b": b.name, "videos": videos, "counts": counts,
            "only_a": sorted(set(va) - set(vb)), "only_b": sorted(set(vb) - set(va)),
            "identical": bool(videos) and counts["identical"] == len(videos) and not (set(va) ^ set(vb))}


def format_frame_comparison(result: dict) -> str:
    """The text of compare_sides: a line per video, then the counts; every value escaped."""
    a, b = for_terminal(result["a"]), for_terminal(result["b"])
    lines = [f"frames seen: a = {a}", f"             b = {b}"]
    for v in result["videos"]:
        video = for_terminal(v["video_id"])
        if v["status"] == "identical":
            lines.append(f"  {video}: identical ({v.get('n_frames')} frames, digest {str(v.get('digest'))[:16]})")
        elif v["status"] == "unknown":
            lines.append(f"  {video}: unknown ({for_terminal('; '.join(v['reasons']))})")
        else:
            by = v["by"]
            digits = 3 if by == "timestamps" else None
            lines.append(f"  {video}: differ in {for_terminal(', '.join(v['reasons']))}")
            for side in ("a", "b"):
                s = v[side]
                lines.append(f"    {side} {for_terminal(s.get('frame_spec') or '-')} {s.get('n_frames')} frames at "
                             f"{for_terminal(s.get('frame_size') or '-')}: {by} {_numbers(s.get(by), digits)}")
            if v["only_a"] or v["only_b"]:
                lines.append(f"    {by} only in a: {_numbers(v['only_a'], digits)}; only in b: "
                             f"{_numbers(v['only_b'], digits)}")
            if v.get("positions"):
                lines.append(f"    frame positions with different pixels: {_numbers(v['positions'])}")
    for side in ("a", "b"):
        if result[f"only_{side}"]:
            lines.append(f"  only {side} captioned: {for_terminal(', '.join(result[f'only_{side}']))}")
    c = result["counts"]
    n = len(result["videos"])
    lines.append(f"{n} video(s) both captioned: {c['identical']} identical, {c['differ']} differ"
                 + (f", {c['unknown']} without a ledger" if c["unknown"] else ""))
    return "\n".join(lines)
