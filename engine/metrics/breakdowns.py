"""Breakdowns by item attribute (`--by COLUMN[,COLUMN]`, a sweep's `[options] breakdowns`): a protocol's metrics
on each level of an item attribute, beside the unsplit metrics.

An attribute is
* an ITEMS column (task, category, media_type, video_id, ...: any scalar column some item fills);
* a key of the items' `extra` JSON, as `extra.<key>` or as the plain key when no ITEMS column has that name
  (items tables put unknown columns there: `sub_category` in an items file is `extra.sub_category`);
* derived, per video: `duration_bucket` (extra.duration in seconds, else the media's duration when the caller can
  probe it; edges in minutes, default 2, 5, 10, 15, 20 -> "<2min", "2-5min", "6-10min", "11-15min", "16-20min",
  ">20min", "unknown": engine/metrics/buckets.py, which a protocol's metrics share) and `n_scenes`
  (extra.n_scenes, else len(extra.scenes), else the number of distinct extra.scene values among the video's items).

Item attributes join the verdict rows by (task, item_id), per-video ones by video_id (rows of a per-video request
carry one item's id). For each level the protocol's own metrics are computed on that level's verdict rows and items
(the caller's `compute`: protocol.compute_metrics with the run's params, so the intervals come from the same
bootstrap on the subset), labelled with the column `by` (the attribute's name) and the attribute's column (the
level); the unsplit rows are kept as they were with `by` and every attribute column = "all". `level_videos` says
how many videos each row rests on (the report warns below capeval.engine.report.leaderboard.MIN_VIDEOS). A column the
protocol's metrics already have (e.g. task or category, when its metrics are per task) is left to the protocol: its
own rows are that breakdown.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

from capeval.engine.metrics.buckets import UNKNOWN, duration_bucket, duration_edges
from capeval.engine.schemas import ITEMS

ALL = "all"
BY_COLUMN = "by"
VIDEOS_COLUMN = "level_videos"
#: derived attributes, one value per video
DERIVED = ("duration_bucket", "n_scenes")
#: ITEMS columns that are no attribute to split by (the JSON itself, option lists)
NOT_ATTRIBUTES = ("extra", "options")
#: more levels than this is a typo or an id column: each level is a whole bootstrap
MAX_LEVELS = 200

Compute = Callable[..., pl.DataFrame]  # compute(verdicts, items=..., captions=...) -> long metrics frame


class UnknownColumnError(ValueError):
    """A `--by` column the items do not carry; the message lists the ones they do."""


@dataclass
class Breakdowns:
    frame: pl.DataFrame  # the unsplit rows (by = "all") then each column's levels
    notes: list[str] = field(default_factory=list)  # columns left to the protocol or skipped, and why


def parse_by(spec: str | Iterable[str] | None) -> tuple[str, ...]:
    """"a,b" or ["a", "b"] -> ("a", "b"), in order, without repeats; empty names are an error."""
    if spec is None:
        return ()
    parts = spec.split(",") if isinstance(spec, str) else list(spec)
    names = [str(p).strip() for p in parts]
    if any(not n for n in names):
        raise ValueError(f"breakdown columns: an empty name in {spec!r} (expected COLUMN[,COLUMN])")
    return tuple(dict.fromkeys(names))


def _extra(text) -> dict:
    if not text:
        return {}
    try:
        value = json.loads(text)
    except (TypeError, json.JSONDecodeError):
        return {}
    return value if isinstance(value, dict) else {}


def _scalar(v) -> bool:
    return isinstance(v, (str, int, float, bool)) and not (isinstance(v, float) and math.isnan(v))


def _extra_keys(items: pl.DataFrame | None) -> list[str]:
    if items is None or "extra" not in items.columns:
        return []
    keys: dict[str, None] = {}
    for text in items["extra"].drop_nulls().unique().to_list():
        keys.update({k: None for k, v in _extra(text).items() if _scalar(v)})
    return sorted(keys)


def available_columns(items: pl.DataFrame | None, verdicts: pl.DataFrame | None = None, *,
                      media_duration=None) -> list[str]:
    """The attributes these items (or, without items, the verdict rows) carry: filled scalar ITEMS columns,
    `extra.<key>` for scalar extra keys, and the derived ones their data supports."""
    source = items if items is not None else verdicts
    if source is None:
        return []
    names = [c for c in ITEMS.names if c in source.columns and c not in NOT_ATTRIBUTES
             and not isinstance(source.schema[c], (pl.List, pl.Array, pl.Struct)) and source[c].is_not_null().any()]
    if items is None:
        return names
    keys = _extra_keys(items)
    names += [f"extra.{k}" for k in keys]
    if "duration" in keys or (media_duration is not None and _has_videos(items)):
        names.append("duration_bucket")
    if {"n_scenes", "scene"} & set(keys) or any("scenes" in _extra(t) for t in _extras(items)):
        names.append("n_scenes")
    return names


def _has_videos(items: pl.DataFrame) -> bool:
    """Whether some item's media is a video file that exists (its duration can be probed)."""
    if "media_path" not in items.columns:
        return False
    rows = items.select(pl.col("media_path"), pl.col("media_type") if "media_type" in items.columns
                        else pl.lit(None, dtype=pl.String).alias("media_type")).unique()
    return any(path and kind != "image" and Path(path).is_file() for path, kind in rows.iter_rows())


def _extras(items: pl.DataFrame) -> list:
    return items["extra"].drop_nulls().unique().to_list() if "extra" in items.columns else []


def resolve(name: str, items: pl.DataFrame | None, verdicts: pl.DataFrame | None = None, *,
            media_duration=None) -> tuple[str, str]:
    """(kind, key) of an attribute name: ("column", c), ("extra", key) or ("derived", name); UnknownColumnError
    listing the available ones when the data carries no such attribute."""
    available = available_columns(items, verdicts, media_duration=media_duration)
    if name in DERIVED and name in available:
        return "derived", name
    if name in available and not name.startswith("extra."):
        return "column", name
    key = name[len("extra."):] if name.startswith("extra.") else name
    if f"extra.{key}" in available:
        return "extra", key
    source = items if items is not None else verdicts
    if source is not None and name in source.columns and name in ITEMS.names and source[name].is_null().all():
        why = " (null in every item)"
    else:
        why = " (no items given: only the verdicts' columns)" if items is None else ""
    raise UnknownColumnError(f"no item attribute {name!r}{why}; available: {', '.join(available) or 'none'}"
                             + ("" if name not in DERIVED else f"; {name} needs {_NEEDS[name]}"))


_NEEDS = {"duration_bucket": "extra.duration (seconds) or media paths to probe",
          "n_scenes": "extra.n_scenes, extra.scenes or extra.scene in the items"}


def _video_levels(name: str, items: pl.DataFrame, edges, media_duration) -> dict[str, str]:
    """video_id -> level of a derived (per-video) attribute."""
    rows = items.select([c for c in ("video_id", "media_path", "extra") if c in items.columns]).to_dicts()
    out: dict[str, str] = {}
    if name == "duration_bucket":
        for r in rows:
            if out.get(r["video_id"], UNKNOWN) != UNKNOWN:
                continue
            seconds = _extra(r.get("extra")).get("duration")
            if seconds is None and media_duration is not None and r.get("media_path"):
                try:  # a video that cannot be read has no duration: its bucket says so
                    seconds = media_duration(r["media_path"])
                except Exception:  # noqa: BLE001
                    seconds = None
            try:
                out[r["video_id"]] = duration_bucket(None if seconds is None else float(seconds), edges)
            except (TypeError, ValueError):
                raise ValueError(f"items: video {r['video_id']!r}: extra.duration {seconds!r} is not a number "
                                 f"of seconds") from None
        return out
    stated: dict[str, int] = {}
    scenes: dict[str, set] = {}
    for r in rows:
        extra = _extra(r.get("extra"))
        if isinstance(extra.get("n_scenes"), int):
            stated[r["video_id"]] = extra["n_scenes"]
        elif isinstance(extra.get("scenes"), list):
            stated[r["video_id"]] = len(extra["scenes"])
        elif "scene" in extra:
            scenes.setdefault(r["video_id"], set()).add(json.dumps(extra["scene"]))
    for r in rows:
        v = r["video_id"]
        out[v] = str(stated[v]) if v in stated else str(len(scenes[v])) if v in scenes else UNKNOWN
    return out


def attach(verdicts: pl.DataFrame, items: pl.DataFrame | None, name: str, *, duration_buckets=None,
           media_duration=None) -> tuple[pl.DataFrame, pl.DataFrame | None]:
    """(verdicts, items), each with `_level`: the row's value of attribute `name` as text ("unknown" when it has
    none). Raises UnknownColumnError for an attribute the data does not carry."""
    kind, key = resolve(name, items, verdicts, media_duration=media_duration)
    level = pl.col("_level").cast(pl.String).fill_null(UNKNOWN)
    if kind == "derived":
        by_video = _video_levels(key, items, duration_edges(duration_buckets, what="duration buckets"),
                                 media_duration)
        mapped = pl.col("video_id").replace_strict(by_video, default=UNKNOWN, return_dtype=pl.String)
        return verdicts.with_columns(mapped.alias("_level")), items.with_columns(mapped.alias("_level"))
    if items is None:  # an attribute of the verdict rows themselves
        return verdicts.with_columns(pl.col(key).alias("_level")).with_columns(level), None
    if kind == "column":
        values = items[key].cast(pl.String).to_list()
    else:
        values = [_text(_extra(t).get(key)) for t in items["extra"].to_list()]
    tagged = items.with_columns(pl.Series("_level", values, dtype=pl.String).fill_null(UNKNOWN))
    keys = [k for k in ("task", "item_id") if k in items.columns and k in verdicts.columns]
    lookup = tagged.select(*keys, "_level").unique(subset=keys, keep="first")
    joined = verdicts.join(lookup, on=keys, how="left", maintain_order="left").with_columns(level)
    return joined, tagged


def _text(v) -> str | None:
    if v is None or not _scalar(v):
        return None
    if isinstance(v, bool):
        return str(v).lower()
    return f"{v:g}" if isinstance(v, float) else str(v)


def level_order(levels: list[str]) -> list[str]:
    """Numbers by value, duration buckets by their edges, other text alphabetically; "unknown" last."""
    def key(level: str):
        if level == UNKNOWN:
            return (3, 0.0, level)
        text = level.removesuffix("min").lstrip("<>")
        first = text.split("-")[0]
        try:
            number = float(first)
        except ValueError:
            return (2, 0.0, level)
        return (1, number - (0.5 if level.startswith("<") else 0.0) + (0.5 if level.startswith(">") else 0.0), level)

    return sorted(levels, key=key)


def check_columns(by: Iterable[str], items: pl.DataFrame | None, verdicts: pl.DataFrame | None = None, *,
                  media_duration=None) -> None:
    """UnknownColumnError for the first column the data does not carry (before anything expensive runs)."""
    for name in by:
        resolve(name, items, verdicts, media_duration=media_duration)


def with_breakdowns(unsplit: pl.DataFrame, compute: Compute, verdicts: pl.DataFrame, by: Iterable[str], *,
                    items: pl.DataFrame | None = None, captions: pl.DataFrame | None = None, duration_buckets=None,
                    media_duration=None, on_unknown: str = "error") -> Breakdowns:
    """`unsplit` (the run's metrics, unchanged) labelled `by` = "all", then `compute` on each level of each column.

    compute(verdicts, items=..., captions=...) must be the computation that made `unsplit` (same protocol, params,
    resamples and seed). on_unknown: "error" raises UnknownColumnError; "skip" leaves the column out with a note
    (a sweep whose datasets differ in what their items carry)."""
    by = parse_by(list(by))
    if on_unknown not in ("error", "skip"):
        raise ValueError(f"on_unknown must be 'error' or 'skip', got {on_unknown!r}")
    notes: list[str] = []
    columns, attached = [], {}
    for name in by:
        if name in unsplit.columns:
            notes.append(f"{name}: the protocol's metrics already break down by it (its own rows)")
            continue
        try:
            attached[name] = attach(verdicts, items, name, duration_buckets=duration_buckets,
                                    media_duration=media_duration)
            n_levels = attached[name][0]["_level"].n_unique()
            if n_levels > MAX_LEVELS:
                raise UnknownColumnError(f"{name}: {n_levels} levels (more than {MAX_LEVELS}): an id column? Split "
                                         f"by a coarser attribute (a derived bucket, a category)")
        except UnknownColumnError as exc:
            if on_unknown == "error":
                raise
            notes.append(f"{name}: skipped: {exc}")
            continue
        columns.append(name)
    frames = [_labelled(unsplit, columns, None, None, verdicts)]
    for name in columns:
        v, its = attached[name]
        levels = level_order(v["_level"].unique().to_list())
        for level in levels:
            sub_v = v.filter(pl.col("_level") == level).drop("_level")
            sub_items = None if its is None else its.filter(pl.col("_level") == level).drop("_level")
            frame = compute(sub_v, items=sub_items, captions=_captions_of(captions, sub_v, sub_items))
            frames.append(_labelled(frame, columns, name, level, sub_v))
    if len(frames) == 1:
        return Breakdowns(frames[0], notes)
    out = pl.concat(frames, how="diagonal_relaxed")
    return Breakdowns(out.select(frames[0].columns + [c for c in out.columns if c not in frames[0].columns]), notes)


def _captions_of(captions, verdicts: pl.DataFrame, items: pl.DataFrame | None):
    """The captions of a level's videos (per-item captions, as a protocol that captions each item has them,
    carry the item id as video_id)."""
    if captions is None or "video_id" not in captions.columns:
        return captions
    ids = set(verdicts["video_id"].to_list()) | set(verdicts["item_id"].to_list() if "item_id" in verdicts.columns
                                                    else [])
    if items is not None:
        ids |= set(items["video_id"].to_list()) | set(items["item_id"].to_list())
    return captions.filter(pl.col("video_id").is_in(list(ids)))


def _labelled(frame: pl.DataFrame, columns: list[str], name: str | None, level: str | None,
              verdicts: pl.DataFrame) -> pl.DataFrame:
    """`frame` with `by` and every breakdown column first ("all" but `name` = `level`), `level_videos` last."""
    if not columns:
        return frame
    labels = [pl.lit(name or ALL, dtype=pl.String).alias(BY_COLUMN)]
    labels += [pl.lit(level if c == name else ALL, dtype=pl.String).alias(c) for c in columns]
    n_videos = verdicts["video_id"].n_unique() if "video_id" in verdicts.columns else None
    out = frame.with_columns(*labels, pl.lit(n_videos, dtype=pl.Int64).alias(VIDEOS_COLUMN))
    first = [BY_COLUMN, *columns]
    return out.select(first + [c for c in frame.columns if c not in first] + [VIDEOS_COLUMN])
