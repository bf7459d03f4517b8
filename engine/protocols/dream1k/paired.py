"""DREAM-1K's paired statistic for `capeval compare` (and its rank agreement across judges): per clip recall and
precision, resampled by video.

* official mode (steps recall / precision): per video, the sum of its successful clips' recall and precision
  scores (from the verdict details: hits / events, 1.0 for an empty list) and their count; recall and precision
  are the means over successful clips, F1 of the means. A Failed clip (either step without a verdict) is left out,
  as the official code leaves it out. The official overall averages per source first; a comparison pairs the same
  videos, whose sources are the same on both sides, and reads the clip means (pooled over sources).
* strict mode (steps entail_r / entail_p, lvcap's strict flow): per video, entailed / judged events each way, as a
  ratio averaged over videos (`.../pooled`: pooled over videos; `paper...`: a video with an unjudged event left
  out), F1 of the averages, as metrics.py's strict numbers.

The statistics are written on the verdict rows themselves (every other column kept: the comparison groups them by
system), a row carrying its share of its clip's or video's value.
"""

from __future__ import annotations

import polars as pl

from capeval.engine.metrics.core import safe_ratio
from capeval.engine.metrics.paired import PairedSpec

from .implementation import implementation

OFFICIAL_STEPS = ("recall", "precision")
STRICT_STEPS = ("entail_p", "entail_r")
#: columns that tell two systems', cells' or clips' rows apart, where present (a window never mixes them)
IDENTITY = ("cell_key", "dataset", "protocol", "judge", "captioner", "prompt_id", "frame_spec", "caption_key",
            "_task", "video_id")
STATS = ("_s0", "_s1", "_s2", "_s3")  # precision: sum, count; recall: sum, count


def f1(p, r):
    """2PR/(P+R), undefined (nan) when P + R = 0, as the official count_f1 and the results table have it (the
    engine's generic F1 reads 0 there)."""
    return safe_ratio(2.0 * p * r, p + r)


def _ratio(a: int, b: int):
    return lambda s: safe_ratio(s[..., a], s[..., b])


METRICS = {"F1": lambda s: f1(_ratio(0, 1)(s), _ratio(2, 3)(s)), "precision": _ratio(0, 1), "recall": _ratio(2, 3)}


def _entailment_code() -> int:
    return next(int(c.ENTAILMENT) for c in implementation().codes if "ENTAILMENT" in c.__members__)


def _detail(v: pl.DataFrame) -> pl.Expr:
    """The rows' `detail`; absent where the rows come without it (`capeval judge validate` hands over only the
    verdict codes)."""
    return pl.col("detail") if "detail" in v.columns else pl.lit(None, dtype=pl.String)


def _judged(v: pl.DataFrame) -> pl.Expr:
    with_detail = pl.col("detail").is_not_null() if "detail" in v.columns else pl.lit(True)
    return ((pl.col("verdict") >= 0) & with_detail).fill_null(False)


def _official_stats(v: pl.DataFrame) -> pl.DataFrame:
    """The precision row of a successful clip carries [score, 1, 0, 0], its recall row [0, 0, score, 1]."""
    clip = [c for c in IDENTITY if c in v.columns] + [c for c in ("item_id", "trial", "seed") if c in v.columns]
    step = pl.col("step")
    scored = step.is_in(list(OFFICIAL_STEPS)).fill_null(False)
    success = (scored & _judged(v)).cast(pl.Int32).sum().over(clip) == len(OFFICIAL_STEPS)
    # An official row's code says only that the list was judged; its score is in `detail`. Without it the clip
    # counts for nothing (its mean is undefined), never as a score of 0.
    score = _detail(v).str.json_path_match("$.score").cast(pl.Float64)
    out = []
    for i, s in enumerate(("precision", "recall")):
        here = scored & (step == s) & success & score.is_not_null()
        out += [pl.when(here).then(score).otherwise(0.0).alias(STATS[2 * i]),
                here.cast(pl.Float64).alias(STATS[2 * i + 1])]
    return v.with_columns(out)


def _strict_stats(v: pl.DataFrame, *, paper: bool, pooled: bool) -> pl.DataFrame:
    """Per video and direction, [entailed, events] (pooled) or [entailed / events, 1 when it has events], spread over
    the direction's rows so that their sum is the video's value."""
    video = [c for c in IDENTITY if c in v.columns]
    step = pl.col("step")
    if "detail" in v.columns:
        entailed = (_judged(v) & (pl.col("detail").str.json_path_match("$.label") == "entailment")).fill_null(False)
    else:  # the entailment code itself, as the implementation's codes number it
        entailed = (pl.col("verdict") == _entailment_code()).fill_null(False)
    v = v.with_columns(
        (step.is_in(list(STRICT_STEPS)) & ~_judged(v)).fill_null(False).cast(pl.Int32).sum().over(video)
        .alias("_unjudged"))
    out = []
    for i, s in enumerate(STRICT_STEPS):
        here = (step == s).fill_null(False)
        if paper:  # as lvcap's paper-compatible reading: a video with an unjudged event is left out
            here = here & (pl.col("_unjudged") == 0)
        n = here.cast(pl.Float64).sum().over(video)
        hit = (here & entailed).cast(pl.Float64)
        if pooled:
            out += [hit.alias(STATS[2 * i]), here.cast(pl.Float64).alias(STATS[2 * i + 1])]
        else:
            share = pl.when(here).then(1.0 / n).otherwise(0.0)
            out += [(hit * share).alias(STATS[2 * i]), share.alias(STATS[2 * i + 1])]
    return v.with_columns(out).drop("_unjudged")


def paired_spec(mode: str) -> PairedSpec:
    """The spec for a run's metrics mode: "official", or lvcap's strict modes ("strict", "paper", ".../pooled")."""
    if mode == "official":
        return PairedSpec(lambda v, opts: _official_stats(v), len(STATS), METRICS)
    paper, pooled = mode.startswith("paper"), mode.endswith("/pooled")
    return PairedSpec(lambda v, opts: _strict_stats(v, paper=paper, pooled=pooled), len(STATS), METRICS)
