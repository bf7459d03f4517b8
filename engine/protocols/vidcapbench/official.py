"""Where the official VidCapBench eval.py (VidCapBench/VidCapBench @ 30fb5f1) stops before printing any figure, and
its exact sub_category map. Written from the rules in shared/protocols/README.md (line numbers of eval.py), not
copied from the script.

`cal_cate_correctness` walks the judged file in order -- caption lines, for each the QA lines of its video_dir,
for each their pairs -- and for every pair:
* a judge reply with no content left the pair without a `correctness` key (eval.py:122-123): KeyError there;
* correctness None (no score digit in the reply) skips the pair (eval.py:168) BEFORE its sub_category is read, so an
  unknown sub_category of an unscored pair changes nothing;
* otherwise the sub_category must be one of the official names, compared exactly (`in` a list: case, underscores
  and spaces count; a dimension name is not a sub_category): else ValueError('Category Wrong') (eval.py:170-179).
The first such pair stops the script: every figure of that run is missing. A request that failed at the backend
(timeout, HTTP error) has no official counterpart (the script retries until it gets a reply): its group's figures
are unknown until a rerun answers it.
"""

from __future__ import annotations

import polars as pl

from capeval.engine.schemas import ParseStatus

from .parsing import is_no_content

#: The official lists, exactly as compared (eval.py:170-179).
OFFICIAL_SUB_CATEGORIES: dict[str, tuple[str, ...]] = {
    "aesthetics": ("cinematography", "composition", "lighting", "color", "style"),
    "content": ("background", "subjects", "events"),
    "motion": ("attribute changes", "object motion", "body movements", "environmental motion",
               "spatiotemporal transformations"),
    "physics": ("spatial relationships", "counter intuitive", "common sense"),
}
OFFICIAL_DIMENSION_OF = {sub: dim for dim, subs in OFFICIAL_SUB_CATEGORIES.items() for sub in subs}
_LAST = 1 << 62  # order of a pair whose caption line or QA line is unknown: after every known one


def official_dimension_of(category: str | None) -> str:
    """The dimension the official script files a pair under, or "other" (where it raises ValueError)."""
    return OFFICIAL_DIMENSION_OF.get(category, "other") if isinstance(category, str) else "other"


def _positions(v: pl.DataFrame, groups: list[str], items: pl.DataFrame | None,
               captions: pl.DataFrame | None) -> pl.DataFrame:
    """v with `_cap_pos` (the caption line of the pair's video in its group) and `_item_pos` (the pair's QA line and
    position): the official script's walking order."""
    if items is not None and "item_id" in items.columns:
        pos = items.select(pl.col("item_id").cast(pl.String)).with_row_index("_item_pos").unique(
            subset="item_id", keep="first")
        v = v.join(pos.with_columns(pl.col("_item_pos").cast(pl.Int64)), on="item_id", how="left")
    else:
        v = v.with_row_index("_item_pos").with_columns(pl.col("_item_pos").cast(pl.Int64))
    if captions is not None and "video_id" in captions.columns:
        caps = captions.with_columns(
            [pl.col(c).cast(pl.String).fill_null("-") if c in captions.columns else pl.lit("-").alias(c)
             for c in groups]).with_row_index("_cap_pos")
        caps = caps.group_by([*groups, pl.col("video_id").cast(pl.String)]).agg(
            pl.col("_cap_pos").min().cast(pl.Int64))
        v = v.join(caps, on=[*groups, "video_id"], how="left")
    else:
        v = v.with_columns(pl.lit(0, pl.Int64).alias("_cap_pos"))
    return v.with_columns(pl.col("_cap_pos").fill_null(_LAST), pl.col("_item_pos").fill_null(_LAST))


def crashes(v: pl.DataFrame, groups: list[str], items: pl.DataFrame | None = None,
            captions: pl.DataFrame | None = None) -> pl.DataFrame:
    """Per group (`groups` columns), `_crash`: why the official script prints no figure for it, or no row when it
    prints them. `v`: score rows with verdict, parse_status, error, dimension (official map) and _category."""
    error = pl.col("error") if "error" in v.columns else pl.lit(None, pl.String)
    v = v.with_columns(error.alias("_error"))
    # A backend failure without an error text (a verdict table from elsewhere) is read as a reply with no content.
    no_content_flags = [e is None or (is_no_content(e) and not e.startswith("answer step"))
                        for e in v.get_column("_error").to_list()]
    failed_at_backend = pl.col("parse_status") == int(ParseStatus.ERROR)
    v = v.with_columns(pl.Series("_no_content", no_content_flags, pl.Boolean))
    kind = (pl.when(failed_at_backend & pl.col("_no_content")).then(pl.lit("key"))
            .when((pl.col("verdict") >= 0) & (pl.col("dimension") == "other") & pl.col("_category").is_not_null())
            .then(pl.lit("category"))
            .when(failed_at_backend).then(pl.lit("backend")).otherwise(None))
    bad = v.with_columns(kind.alias("_kind")).filter(pl.col("_kind").is_not_null())
    if bad.height == 0:
        return pl.DataFrame(schema={**{c: pl.String for c in groups}, "_crash": pl.String})
    bad = _positions(bad, groups, items, captions)
    stops = bad.filter(pl.col("_kind") != "backend").sort([*groups, "_cap_pos", "_item_pos"])
    first = stops.group_by(groups, maintain_order=True).agg(
        pl.col("_kind").first(), pl.col("item_id").first().alias("_item"), pl.col("_category").first().alias("_cat"),
        (pl.col("_kind") == "key").sum().alias("_n_key"), (pl.col("_kind") == "category").sum().alias("_n_cat"))
    rows = [{**{c: r[c] for c in groups}, "_crash": _stop_reason(r)} for r in first.iter_rows(named=True)]
    stopped = {tuple(r[c] for c in groups) for r in rows}
    backend = bad.filter(pl.col("_kind") == "backend").group_by(groups, maintain_order=True).len()
    for r in backend.iter_rows(named=True):
        if tuple(r[c] for c in groups) not in stopped:
            rows.append({**{c: r[c] for c in groups},
                         "_crash": f"{r['len']} requests failed at the judge backend; the official eval.py retries "
                                   f"them until they are answered, so no official figure exists until a rerun "
                                   f"answers them"})
    return pl.DataFrame(rows, schema={**{c: pl.String for c in groups}, "_crash": pl.String})


def _stop_reason(r: dict) -> str:
    if r["_kind"] == "key":
        return (f"the judge reply for QA pair {r['_item']!r} has no content ({r['_n_key']} such in all): the official "
                f"eval.py stops there (KeyError 'correctness', eval.py:122-123, 168); no official figure exists")
    return (f"QA pair {r['_item']!r} has sub_category {r['_cat']!r}, not one of the official names (compared "
            f"exactly, eval.py:170-179; {r['_n_cat']} such scored pairs in all): the official eval.py stops there "
            f"(ValueError 'Category Wrong'); no official figure exists")
