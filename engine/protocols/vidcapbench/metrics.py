"""VidCapBench metrics: Accuracy, Precision, Coverage and Conciseness, mean ± std over judge seeds, split by
judge consistency.

Protocol (Chen et al., "VidCapBench: A Comprehensive Benchmark of Video Captioning for Controllable Text-to-Video
Generation", ACL 2025, arXiv 2502.12782; official `eval.py` in github.com/VidCapBench/VidCapBench): a judge answers
each question from the caption, then scores the answer against the reference:

    2  (A, CORRECT)        comprehensively and accurately reflects the correct answer
    1  (B, PARTIAL)        mentions it, imprecise or incomplete, no contradiction
    0  (C, NOT_MENTIONED)  does not mention it at all
    −1 (D, INCORRECT)      contradicts it or partly misrepresents it

(codes = score + 1, see codes.py). The official script's definitions, in percent:

    Acc = A / (A + B + C + D)
    Pre = (A + B) / (A + B + D)
    Cov = (A + B + D) / (A + B + C + D)
    Con = 100 * Acc / mean caption tokens         (Acc points per 100 tokens of the average caption)

The official script counts tokens with the flan-t5-base tokenizer; here the mean of `captions.n_tokens` over the
captions of a (captioner, prompt_id, frame_spec) group is used, i.e. the captioner's own tokenizer unless the
caption stage filled n_tokens otherwise, so Con is comparable across captioners only when n_tokens comes from one
tokenizer. The mean token count is taken as fixed when Con's CI is computed (Con's CI is Acc's CI scaled).

No verdict: the official script leaves unparsed judgments out of every denominator (`paper_compatible=True`,
mode "paper"). By default (mode "strict") a question without a verdict stays in the denominators of Acc and Cov
as an unanswered question (it is neither a correct nor a covered answer); Pre only ever counts answered
questions. `n_no_verdict` is reported next to every metric either way.

Judge seeds: the judge runs several times with different seeds (`trial`, else `seed`). Each metric's `value` and
CI come from all trials pooled (CIs resample videos with all their trials); `<metric>_std` rows give the standard
deviation of the per-trial values (numpy's default, ddof=0) and `<metric>_mean` their mean. The paper reports
VidCapBench-AE, the questions whose machine judgments agree across repeated evaluations; `consistency` splits the
questions of each group into "consistent" (the same verdict code in every trial, all trials with a verdict) and
"inconsistent" (anything else, including a missing verdict in some trial), next to "all". With one trial every
question with a verdict is consistent.

Dimensions: the official script maps the question's `sub_category` to four dimensions (`DIMENSION_OF`); an item's
`category` may be either the sub-category or the dimension itself. Unknown categories are reported as "other".
"""

from __future__ import annotations

import numpy as np
import polars as pl

from engine.metrics.core import count_table, metrics_frame, safe_ratio

from .codes import N_CODES, VidCapBenchVerdict

D, C, B, A = (int(v) for v in (VidCapBenchVerdict.INCORRECT, VidCapBenchVerdict.NOT_MENTIONED,
                               VidCapBenchVerdict.PARTIAL, VidCapBenchVerdict.CORRECT))
NV = N_CODES
GROUP_COLUMNS = ["captioner", "prompt_id", "frame_spec"]
ALL = "all"
METRICS = ("Acc", "Pre", "Cov", "Con")

#: sub_category -> dimension, as in the official eval.py
DIMENSION_OF: dict[str, str] = {
    **{k: "aesthetics" for k in ("cinematography", "composition", "lighting", "color", "style")},
    **{k: "content" for k in ("background", "subjects", "events")},
    **{k: "motion" for k in ("attribute changes", "object motion", "body movements", "environmental motion",
                              "spatiotemporal transformations")},
    **{k: "physics" for k in ("spatial relationships", "counter intuitive", "common sense")},
}
DIMENSIONS = ("aesthetics", "content", "motion", "physics")


def accuracy(counts, *, include_no_verdict: bool = True) -> np.ndarray:
    c = np.asarray(counts, dtype=np.float64)
    n = c[..., A] + c[..., B] + c[..., C] + c[..., D] + (c[..., NV] if include_no_verdict else 0.0)
    return safe_ratio(c[..., A], n)


def precision(counts) -> np.ndarray:
    c = np.asarray(counts, dtype=np.float64)
    return safe_ratio(c[..., A] + c[..., B], c[..., A] + c[..., B] + c[..., D])


def coverage(counts, *, include_no_verdict: bool = True) -> np.ndarray:
    c = np.asarray(counts, dtype=np.float64)
    n = c[..., A] + c[..., B] + c[..., C] + c[..., D] + (c[..., NV] if include_no_verdict else 0.0)
    return safe_ratio(c[..., A] + c[..., B] + c[..., D], n)


def conciseness(acc_percent, mean_tokens) -> np.ndarray:
    """Con = 100 * Acc(%) / mean caption tokens, as in the official eval.py."""
    return safe_ratio(100.0 * np.asarray(acc_percent, dtype=np.float64), mean_tokens)


def metric_functions(paper_compatible: bool = False) -> dict:
    inc = not paper_compatible
    return {
        "Acc": lambda c: accuracy(c, include_no_verdict=inc),
        "Pre": precision,
        "Cov": lambda c: coverage(c, include_no_verdict=inc),
    }


def dimension_of(category: str | None) -> str:
    if category is None:
        return "other"
    key = " ".join(category.strip().lower().replace("_", " ").split())
    if key in DIMENSIONS:
        return key
    return DIMENSION_OF.get(key, "other")


# -- verdict table -> long-format metrics ----------------------------------------------------------------------


def _prepare(verdicts: pl.DataFrame, items: pl.DataFrame | None) -> pl.DataFrame:
    missing = [c for c in ("item_id", "video_id", "verdict") if c not in verdicts.columns]
    if missing:
        raise KeyError(f"verdict table lacks columns {missing} (have {verdicts.columns})")
    v = verdicts.with_columns(
        [pl.col(c).cast(pl.String).fill_null("-") if c in verdicts.columns else pl.lit("-").alias(c) for c in GROUP_COLUMNS]
    )
    trial = pl.col("trial") if "trial" in v.columns else None
    if trial is None and "seed" in v.columns:
        trial = pl.col("seed")
    v = v.with_columns((trial.cast(pl.String).fill_null("0") if trial is not None else pl.lit("0")).alias("_trial"))
    if "step" in v.columns:  # only the scoring step carries the 2/1/0/−1 verdict; the answer step carries none
        v = v.filter(pl.col("step").is_null() | (pl.col("step") != "answer"))
    if items is not None and "category" in items.columns:
        keys = [k for k in ("task", "item_id") if k in items.columns and k in v.columns]
        cats = items.select(*keys, pl.col("category").alias("_category")).unique(subset=keys, keep="first")
        v = v.join(cats, on=keys, how="left")
    else:
        v = v.with_columns(pl.lit(None, dtype=pl.String).alias("_category"))
    v = v.with_columns(pl.col("_category").map_elements(dimension_of, return_dtype=pl.String, skip_nulls=False)
                       .alias("dimension"))
    # Consistency of each question across judge trials, within its (captioner, prompt, frames) group.
    qkey = GROUP_COLUMNS + [k for k in ("task", "item_id", "sub_index") if k in v.columns]
    cons = v.group_by(qkey).agg(
        ((pl.col("verdict").n_unique() == 1) & (pl.col("verdict").min() >= 0)).alias("_consistent")
    )
    v = v.join(cons, on=qkey, how="left", nulls_equal=True)
    return v.with_columns(
        pl.when(pl.col("_consistent")).then(pl.lit("consistent")).otherwise(pl.lit("inconsistent")).alias("consistency")
    )


def _mean_tokens(captions: pl.DataFrame | None, verdicts: pl.DataFrame) -> pl.DataFrame | None:
    if captions is None or "n_tokens" not in captions.columns:
        return None
    caps = captions.with_columns(
        [pl.col(c).cast(pl.String).fill_null("-") for c in GROUP_COLUMNS if c in captions.columns]
    )
    videos = verdicts.select(GROUP_COLUMNS + ["video_id"]).unique()
    caps = caps.join(videos, on=GROUP_COLUMNS + ["video_id"], how="semi")  # the captions that were judged
    return caps.group_by(GROUP_COLUMNS).agg(pl.col("n_tokens").cast(pl.Float64).mean().alias("_mean_tokens"))


def compute_metrics(
    verdicts: pl.DataFrame,
    *,
    items: pl.DataFrame | None = None,
    captions: pl.DataFrame | None = None,
    n_resamples: int = 1000,
    seed: int = 0,
    paper_compatible: bool = False,
    confidence: float = 0.95,
    **options,
) -> pl.DataFrame:
    """Acc / Pre / Cov / Con (+ _mean, _std over trials) per group x dimension x consistency.

    Group columns: captioner, prompt_id, frame_spec, dimension, consistency, mode. Con needs `captions` with
    n_tokens; without them Con rows are left out (said in the report, not silently: no row, no number)."""
    del options
    mode = "paper" if paper_compatible else "strict"
    v = _prepare(verdicts, items)
    fns = metric_functions(paper_compatible)
    splits = [("all", v), ("consistent", v.filter(pl.col("consistency") == "consistent")),
              ("inconsistent", v.filter(pl.col("consistency") == "inconsistent"))]
    frames = []
    for split, sub in splits:
        for extra in (["dimension"], []) if items is not None else ([],):
            if sub.height == 0:
                continue
            cols = GROUP_COLUMNS + extra
            pooled = metrics_frame(count_table(sub, cols, N_CODES), fns, n_resamples=n_resamples, seed=seed,
                                   confidence=confidence, scale=100.0, resample="per_group", nan_as_null=True)
            trial_stats = _per_trial_stats(sub, cols, fns)
            frame = pl.concat([pooled, trial_stats.select(pooled.columns)], how="vertical") if trial_stats.height else pooled
            if "dimension" not in frame.columns:
                frame = frame.with_columns(pl.lit(ALL).alias("dimension"))
            frames.append(frame.with_columns(pl.lit(split).alias("consistency")))
    if not frames:
        raise ValueError("the verdict table has no rows to score")
    cols = frames[0].columns
    out = pl.concat([f.select(cols) for f in frames], how="vertical")
    out = _add_conciseness(out, _mean_tokens(captions, v))
    out = out.with_columns(pl.lit(mode).alias("mode"))
    group_cols = GROUP_COLUMNS + ["dimension", "consistency", "mode"]
    return out.select(group_cols + [c for c in out.columns if c not in group_cols])


def _per_trial_stats(verdicts, cols, fns) -> pl.DataFrame:
    """`<metric>_mean` and `<metric>_std` over judge trials (no CI: the spread across trials is the statistic)."""
    per_trial = metrics_frame(count_table(verdicts, cols + ["_trial"], N_CODES), fns, n_resamples=0, scale=100.0,
                              nan_as_null=True)
    agg = per_trial.group_by(cols + ["metric"], maintain_order=True).agg(
        pl.col("value").mean().alias("_mean"),
        pl.col("value").std(ddof=0).alias("_std"),
        pl.col("n").sum(), pl.col("n_no_verdict").sum(),
    )
    rows = []
    for stat in ("_mean", "_std"):
        rows.append(agg.select(
            *cols, (pl.col("metric") + stat).alias("metric"), pl.col(stat).alias("value"),
            pl.lit(None, dtype=pl.Float64).alias("ci_low"), pl.lit(None, dtype=pl.Float64).alias("ci_high"),
            pl.col("n"), pl.col("n_no_verdict"),
        ))
    out = pl.concat(rows, how="vertical")
    if "dimension" not in out.columns:
        out = out.with_columns(pl.lit(ALL).alias("dimension"))
    return out


def _add_conciseness(out: pl.DataFrame, mean_tokens: pl.DataFrame | None) -> pl.DataFrame:
    if mean_tokens is None:
        return out
    acc = out.filter(pl.col("metric").is_in(["Acc", "Acc_mean", "Acc_std"])).join(mean_tokens, on=GROUP_COLUMNS, how="inner")
    scale = pl.lit(100.0) / pl.col("_mean_tokens")
    con = acc.with_columns(
        pl.col("metric").str.replace("^Acc", "Con"),
        *[(pl.col(c) * scale).alias(c) for c in ("value", "ci_low", "ci_high")],
    ).drop("_mean_tokens")
    return pl.concat([out, con.select(out.columns)], how="vertical")
