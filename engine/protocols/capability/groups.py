"""CAPability's sweep groups: which columns split a verdict table into caption sets, and how rows get them.

Below metrics.py and official.py alike: both group rows this way (metrics per caption set, official.uncaptioned to
find the items one caption set lacks).
"""

from __future__ import annotations

import polars as pl

from capeval.engine.schemas import NO_VERDICT, ParseStatus

#: Sweep groups. prompt_set is prompt_id without its media-type suffix: CAPability prompts images and videos
#: differently ("capability/image", "capability/video"), and one average spans both.
GROUP_COLUMNS = ("captioner", "prompt_set", "frame_spec")


def with_groups(df: pl.DataFrame) -> pl.DataFrame:
    """`df` with the group columns (null captioner/frame_spec read as ""), a null sub_index where it has none, and a
    parse_status derived from the verdict where it has none (a released table without one)."""
    exprs = []
    for c in ("captioner", "frame_spec"):
        exprs.append((pl.col(c).cast(pl.String) if c in df.columns else pl.lit(None, pl.String)).fill_null("").alias(c))
    prompt = pl.col("prompt_id").cast(pl.String) if "prompt_id" in df.columns else pl.lit(None, pl.String)
    exprs.append(prompt.fill_null("").str.replace(r"/(image|video)$", "").alias("prompt_set"))
    if "sub_index" not in df.columns:
        exprs.append(pl.lit(None, pl.Int32).alias("sub_index"))
    if "parse_status" not in df.columns and "verdict" in df.columns:
        exprs.append(pl.when(pl.col("verdict") == NO_VERDICT).then(int(ParseStatus.FAILED)).otherwise(0)
                     .cast(pl.Int8).alias("parse_status"))
    return df.with_columns(exprs)
