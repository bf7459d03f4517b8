"""VidCapBench metrics: Accuracy, Precision, Coverage and Conciseness per dimension and overall, over judge seeds.

Protocol (Chen et al., "VidCapBench", Findings of ACL 2025, arXiv 2502.12782; official `eval.py`): a judge answers
each question from the caption, then grades the answer 2 (A, fully right), 1 (B, partly), 0 (C, not mentioned) or
-1 (D, contradicts) (codes = score + 1, see codes.py). In percent, per dimension and overall:

    Acc = A / (A + B + C + D)      Pre = (A + B) / (A + B + D)      Cov = (A + B + D) / (A + B + C + D)
    Con = 100 * Acc / avg_tokens   (avg_tokens: mean token count over ALL caption lines of the group)

Modes (`mode` param, a `mode` column in the table):
* official -- as the official script: pairs without a score are left out of every count; a zero denominator
  (e.g. a dimension with no counted pair) is a null metric whose `reason` says the script divides by zero there;
  sub_categories are matched exactly (official.py); a judge reply with no content, or a SCORED pair whose
  sub_category is not an official name, stops the official script (the first such pair in its order names the
  error): every metric of that (captioner, prompt, frames) group is null with the reason. Never a traceback.
* strict -- capeval's own: a question without a verdict stays in the denominators of Acc and Cov (it is neither a
  correct nor a covered answer; Pre only counts graded answers). `paper_compatible=True` leaves them out instead.
`n_no_verdict` is reported next to every metric either way.

Conciseness tokens: a token count given with the captions (column `t5_tokens`, e.g. the flan-t5-base counts the
paper uses; another column with param `con_tokens`, e.g. `con_tokens=n_tokens` when a caption file's `n_tokens`
are such counts) when every caption of the group has one, else `n_tokens`, labelled as the captioner's count when
the captions carry the caption stage's latencies and as "stored with the captions" otherwise; `tokens_source`
says which, `avg_tokens` the mean used. The same mean serves every dimension, as in
the official script.

Judge seeds (`trial`, else `seed`): the headline `value` is the mean over seeds of the per-seed metric (as the
paper's "mean ± std over three judge runs"), with a CI from one video bootstrap shared by all seeds; `pooled` is
the metric of all seeds' verdicts pooled, `seed_std` the standard deviation over seeds (ddof=0), `n_seeds` their
number. Several seeds at temperature 0 (strict mode's default; param `temperature`) are one deterministic judgment
repeated: `seed_std` is then null and `seeds_note` says so (a warning too) -- never reported as a spread.

Consistency split (capeval's own, NOT the paper's VidCapBench-AE, which is a fixed question set chosen by the
authors with three GPT-4o runs plus human review): with several seeds, rows with consistency "consistent" count the
questions that got the same verdict from every seed, "inconsistent" the others; "all" counts every question.

Dimensions: the official sub_category -> dimension map (`DIMENSION_OF`). Strict mode reads an item's `category`
leniently (case, underscores and spaces ignored; the dimension name itself allowed); official mode exactly as the
official script (official.py); anything else is "other".
"""

from __future__ import annotations

import warnings

import numpy as np
import polars as pl

from capeval.engine.metrics.core import count_table, metrics_frame, safe_ratio

from .codes import N_CODES, VidCapBenchVerdict
from .official import crashes as official_crashes, official_dimension_of
from .prompts import UNSET as _UNSET, check_mode, temperature_for

D, C, B, A = (int(v) for v in (VidCapBenchVerdict.INCORRECT, VidCapBenchVerdict.NOT_MENTIONED,
                               VidCapBenchVerdict.PARTIAL, VidCapBenchVerdict.CORRECT))
NV = N_CODES
GROUP_COLUMNS = ["captioner", "prompt_id", "frame_spec"]
ALL = "all"
METRICS = ("Acc", "Pre", "Cov", "Con")
GIVEN_TOKENS = "t5_tokens"

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


def metric_functions(exclude_no_verdict: bool = False, *, paper_compatible: bool | None = None) -> dict:
    """Acc / Pre / Cov of count arrays; rows without a verdict leave the denominators when `exclude_no_verdict`
    (official mode, or `paper_compatible`, its older name)."""
    inc = not (exclude_no_verdict or bool(paper_compatible))
    return {"Acc": lambda c: accuracy(c, include_no_verdict=inc), "Pre": precision,
            "Cov": lambda c: coverage(c, include_no_verdict=inc)}


def dimension_of(category: str | None) -> str:
    if category is None:
        return "other"
    key = " ".join(category.strip().lower().replace("_", " ").split())
    if key in DIMENSIONS:
        return key
    return DIMENSION_OF.get(key, "other")


# -- verdict table -> prepared rows ------------------------------------------------------------------------------


def _prepare(verdicts: pl.DataFrame, items: pl.DataFrame | None, official: bool = False) -> pl.DataFrame:
    missing = [c for c in ("item_id", "video_id", "verdict") if c not in verdicts.columns]
    if missing:
        raise KeyError(f"verdict table lacks columns {missing} (have {verdicts.columns})")
    v = verdicts.with_columns(
        [pl.col(c).cast(pl.String).fill_null("-") if c in verdicts.columns else pl.lit("-").alias(c)
         for c in GROUP_COLUMNS])
    trial = pl.col("trial") if "trial" in v.columns else (pl.col("seed") if "seed" in v.columns else None)
    v = v.with_columns((trial.cast(pl.String).fill_null("0") if trial is not None else pl.lit("0")).alias("_trial"))
    if "step" in v.columns:  # only the scoring step carries the 2/1/0/-1 verdict; the answer step carries none
        v = v.filter(pl.col("step").is_null() | (pl.col("step") != "answer"))
    if "parse_status" not in v.columns:
        v = v.with_columns(pl.lit(None, dtype=pl.Int8).alias("parse_status"))
    if "error" not in v.columns:
        v = v.with_columns(pl.lit(None, dtype=pl.String).alias("error"))
    if items is not None and "category" in items.columns:
        keys = [k for k in ("task", "item_id") if k in items.columns and k in v.columns]
        cats = items.select(*keys, pl.col("category").alias("_category")).unique(subset=keys, keep="first")
        v = v.join(cats, on=keys, how="left")
    else:
        v = v.with_columns(pl.lit(None, dtype=pl.String).alias("_category"))
    # one lookup per distinct category, not per row
    lookup = official_dimension_of if official else dimension_of
    dims = {c: lookup(c) for c in v.get_column("_category").unique().to_list() if c is not None}
    v = v.with_columns(pl.col("_category").replace_strict(dims, default="other", return_dtype=pl.String)
                       .alias("dimension"))
    qkey = GROUP_COLUMNS + [k for k in ("task", "item_id", "sub_index") if k in v.columns]
    cons = v.group_by(qkey).agg(
        ((pl.col("verdict").n_unique() == 1) & (pl.col("verdict").min() >= 0)).alias("_consistent"))
    v = v.join(cons, on=qkey, how="left", nulls_equal=True)
    return v.with_columns(pl.when(pl.col("_consistent")).then(pl.lit("consistent"))
                          .otherwise(pl.lit("inconsistent")).alias("consistency"))


def _tokens(captions: pl.DataFrame | None, con_tokens: str | None) -> pl.DataFrame | None:
    """Per group: avg_tokens over ALL its caption lines and which count it is (see the module docstring)."""
    if captions is None:
        return None
    given = con_tokens or GIVEN_TOKENS
    caps = captions.with_columns(
        [pl.col(c).cast(pl.String).fill_null("-") if c in captions.columns else pl.lit("-").alias(c)
         for c in GROUP_COLUMNS])
    has_given, has_own = given in caps.columns, "n_tokens" in caps.columns
    if not (has_given or has_own):
        return None
    # captions a captioner wrote in this run carry latencies: their n_tokens are that captioner's count
    timed = pl.col("latency_s").is_not_null().all() if "latency_s" in caps.columns else pl.lit(False)
    aggs = [timed.alias("_timed")]
    if has_given:
        aggs += [pl.col(given).cast(pl.Float64).mean().alias("_given"), pl.col(given).null_count().alias("_gnull")]
    if has_own:
        aggs += [pl.col("n_tokens").cast(pl.Float64).mean().alias("_own"),
                 pl.col("n_tokens").null_count().alias("_onull")]
    t = caps.group_by(GROUP_COLUMNS).agg(aggs)
    use_given = (pl.col("_gnull") == 0) if has_given else pl.lit(False)
    own_ok = (pl.col("_onull") == 0) if has_own else pl.lit(False)
    return t.select(
        *GROUP_COLUMNS,
        pl.when(use_given).then(pl.col("_given") if has_given else None)
        .when(own_ok).then(pl.col("_own") if has_own else None).otherwise(None).alias("avg_tokens"),
        pl.when(use_given).then(pl.lit(f"{given} (given with the captions)"))
        .when(own_ok & pl.col("_timed")).then(pl.lit("n_tokens (the captioner's count)"))
        .when(own_ok).then(pl.lit("n_tokens (stored with the captions; con_tokens=n_tokens says they are given)"))
        .otherwise(None).alias("tokens_source"),
    )


# -- metrics ----------------------------------------------------------------------------------------------------


def _level(sub: pl.DataFrame, cols: list[str], fns: dict, n_resamples: int, seed: int, confidence: float):
    """Mean-over-seeds rows (with CI), plus pooled value, std over seeds and n_seeds, for grouping `cols`."""
    per_trial = metrics_frame(count_table(sub, cols + ["_trial"], N_CODES), fns, n_resamples=n_resamples, seed=seed,
                              confidence=confidence, scale=100.0, resample="joint", average_over="_trial",
                              average_label="__mean__")
    mean = per_trial.filter(pl.col("_trial") == "__mean__").drop("_trial")
    trials = per_trial.filter(pl.col("_trial") != "__mean__").with_columns(pl.col("value").fill_nan(None))
    spread = trials.group_by(cols + ["metric"]).agg(pl.col("value").std(ddof=0).alias("seed_std"),
                                                    pl.col("_trial").n_unique().alias("n_seeds"))
    pooled = metrics_frame(count_table(sub, cols, N_CODES), fns, n_resamples=0, scale=100.0, resample="per_group")
    out = mean.join(pooled.select(*cols, "metric", pl.col("value").alias("pooled")), on=cols + ["metric"], how="left")
    out = out.join(spread, on=cols + ["metric"], how="left")
    if "dimension" not in out.columns:
        out = out.with_columns(pl.lit(ALL).alias("dimension"))
    return out.with_columns(pl.col(c).fill_nan(None) for c in ("value", "ci_low", "ci_high", "pooled"))


def _missing_dimensions(frame: pl.DataFrame, groups: pl.DataFrame, split: str) -> pl.DataFrame | None:
    """Null rows for the official dimensions a group has no pair in (the official script divides by zero there)."""
    want = groups.join(pl.DataFrame({"dimension": list(DIMENSIONS)}), how="cross")
    have = frame.select(GROUP_COLUMNS + ["dimension"]).unique()
    absent = want.join(have, on=GROUP_COLUMNS + ["dimension"], how="anti")
    if absent.height == 0:
        return None
    rows = absent.join(pl.DataFrame({"metric": ["Acc", "Pre", "Cov"]}), how="cross")
    return rows.with_columns(
        *[pl.lit(None, dtype=pl.Float64).alias(c) for c in ("value", "ci_low", "ci_high", "pooled", "seed_std")],
        pl.lit(0, dtype=pl.Int64).alias("n"), pl.lit(0, dtype=pl.Int64).alias("n_no_verdict"),
        pl.lit(0, dtype=pl.UInt32).alias("n_seeds"), pl.lit(split).alias("consistency"))


def compute_metrics(verdicts: pl.DataFrame, *, items: pl.DataFrame | None = None,
                    captions: pl.DataFrame | None = None, n_resamples: int = 1000, seed: int = 0,
                    paper_compatible: bool = False, confidence: float = 0.95, mode: str | None = None,
                    temperature=_UNSET, con_tokens: str | None = None, **options) -> pl.DataFrame:
    """Acc / Pre / Cov / Con per (captioner, prompt_id, frame_spec) x dimension x consistency (see the module
    docstring for the columns). Con rows need captions with a token count; without them there are none."""
    del options  # other protocol params (prompts, ...) do not change the metrics
    mode = check_mode(mode)
    official = mode == "official"
    temp = temperature_for(mode, temperature)
    v = _prepare(verdicts, items, official)
    if v.height == 0:
        raise ValueError("vidcapbench: the verdict table has no score rows to score")
    fns = metric_functions(exclude_no_verdict=official or paper_compatible)
    multi = v.get_column("_trial").n_unique() > 1
    splits = [(ALL, v)] + ([("consistent", v.filter(pl.col("consistency") == "consistent")),
                            ("inconsistent", v.filter(pl.col("consistency") == "inconsistent"))] if multi else [])
    groups = v.select(GROUP_COLUMNS).unique()
    frames = []
    for split, sub in splits:
        if sub.height == 0:
            continue
        for extra in ((["dimension"], []) if items is not None else ([],)):
            frame = _level(sub, GROUP_COLUMNS + extra, fns, n_resamples, seed, confidence)
            frames.append(frame.with_columns(pl.lit(split).alias("consistency")))
    cols = frames[0].columns
    out = pl.concat([f.select(cols) for f in frames], how="vertical")
    if official and "dimension" in out.columns:
        # the official script has no such section: its pairs are either skipped (no score) or stop it (official.py)
        out = out.filter(pl.col("dimension") != "other")
    if items is not None and official:
        absent = _missing_dimensions(out.filter(pl.col("dimension") != ALL), groups, ALL)
        if absent is not None:
            out = pl.concat([out, absent.select(cols)], how="vertical_relaxed")
    out = _add_conciseness(out, _tokens(captions, con_tokens))
    out = _flag_seeds(out, temp)
    out = _reasons(out, official_crashes(v, GROUP_COLUMNS, items, captions) if official else None, official)
    group_cols = GROUP_COLUMNS + ["dimension", "consistency", "mode"]
    out = out.with_columns(pl.lit(mode).alias("mode"),
                           pl.lit("excluded" if (official or paper_compatible) else "counted").alias("no_verdict"))
    order = {m: i for i, m in enumerate(METRICS)}
    dim_order = {d: i for i, d in enumerate((ALL, *DIMENSIONS, "other"))}
    out = out.sort(by=[*GROUP_COLUMNS, pl.col("consistency"),
                       pl.col("dimension").replace_strict(dim_order, default=99),
                       pl.col("metric").replace_strict(order, default=99)])
    rest = ["metric", "value", "ci_low", "ci_high", "n", "n_no_verdict", "pooled", "seed_std", "n_seeds",
            "avg_tokens", "tokens_source", "seeds_note", "no_verdict", "reason"]
    return out.select(group_cols + rest)


def _add_conciseness(out: pl.DataFrame, tokens: pl.DataFrame | None) -> pl.DataFrame:
    if tokens is None:
        return out.with_columns(pl.lit(None, dtype=pl.Float64).alias("avg_tokens"),
                                pl.lit(None, dtype=pl.String).alias("tokens_source"))
    out = out.join(tokens, on=GROUP_COLUMNS, how="left")
    scale = pl.lit(100.0) / pl.col("avg_tokens")
    con = out.filter((pl.col("metric") == "Acc") & pl.col("avg_tokens").is_not_null()).with_columns(
        pl.lit("Con").alias("metric"),
        *[(pl.col(c) * scale).alias(c) for c in ("value", "ci_low", "ci_high", "pooled", "seed_std")])
    return pl.concat([out, con.select(out.columns)], how="vertical")


def _flag_seeds(out: pl.DataFrame, temperature: float | None) -> pl.DataFrame:
    deterministic = temperature is not None and float(temperature) == 0.0
    many = pl.col("n_seeds") > 1
    if deterministic and out.filter(many).height:
        warnings.warn("vidcapbench: several judge seeds at temperature 0 repeat one deterministic judgment; no "
                      "spread over seeds is reported (set the `temperature` param to sample)", stacklevel=3)
    note = pl.format("{} seeds at temperature 0: one deterministic judgment repeated, no spread", pl.col("n_seeds"))
    return out.with_columns(
        pl.when(many & pl.lit(deterministic)).then(None).otherwise(pl.col("seed_std")).alias("seed_std"),
        pl.when(many & pl.lit(deterministic)).then(note).otherwise(None).alias("seeds_note"))


def _reasons(out: pl.DataFrame, crashes: pl.DataFrame | None, official: bool) -> pl.DataFrame:
    zero = ("zero denominator: the official eval.py raises ZeroDivisionError here" if official
            else "zero denominator")
    out = out.with_columns(pl.when(pl.col("value").is_null()).then(pl.lit(zero)).otherwise(None).alias("reason"))
    if crashes is None or crashes.height == 0:
        return out
    out = out.join(crashes, on=GROUP_COLUMNS, how="left")
    crashed = pl.col("_crash").is_not_null()
    return out.with_columns(
        *[pl.when(crashed).then(None).otherwise(pl.col(c)).alias(c)
          for c in ("value", "ci_low", "ci_high", "pooled", "seed_std")],
        pl.when(crashed).then(pl.col("_crash")).otherwise(pl.col("reason")).alias("reason")).drop("_crash")
