"""CapQuiz metrics: CapP, CapR and CapF1 per question type, per type family and overall.

Protocol (Wang et al., "Putting Captions to the Test: Evaluating Video Caption Quality through Multiple-Choice
Question Answering", ACL 2026, https://aclanthology.org/2026.acl-long.777/): a text-only judge answers each
human-verified multiple-choice question about the video from the caption alone, with an extra "Cannot be
determined" option. Each answer is one of

* CORRECT (TP): the caption lets the judge pick the right option;
* WRONG (FP): the judge picks a wrong option, i.e. the caption states something false;
* CANNOT_DETERMINE (FN): the caption does not carry the information.

    CapP  = TP / (TP + FP)        (factuality: of what the caption states, how much is right)
    CapR  = TP / N                (coverage: N = all questions, TP + FP + FN)
    CapF1 = 2 * CapP * CapR / (CapP + CapR)   (0 when CapP = CapR = 0: the paper leaves 0/0 open)

Rows without a verdict (code −1: parse failure, backend error, missing judgment) are never dropped: they are
counted in `n_no_verdict` next to every metric. By default (`paper_compatible=False`, `mode="strict"`) they stay
in N, so a question the judge could not answer counts against recall exactly like "cannot be determined" (it is
not evidence of a wrong statement, so it never enters CapP's denominator). With `paper_compatible=True`
(`mode="paper"`) they are left out of N, the way an official script that skips unparseable answers would do.

Averaging over videos (`average`, protocol param): the paper defines CapP/CapR/CapF1 over "the questions" and does
not say whether questions are pooled across videos or scored per video and averaged. `average="pooled"` (default,
as before) pools every question of a group: CapP = ΣTP/Σ(TP+FP), CapR = ΣTP/ΣN. `average="per_video"` scores each
video on its own questions and takes the plain mean over videos: CapP over the videos with TP+FP > 0, CapR over the
videos with N > 0, and CapF1 = 2·CapP·CapR/(CapP+CapR) of those two means -- F1 of the reported P and R, the
relation every row of the paper's Tables 3-4 satisfies (a mean of per-video F1s would not). Either way the CI is a
percentile bootstrap resampling videos (clusters), the statistic recomputed per replicate; the `average` column says
which reading a row is.

Question types: the paper's ten types in two groups (Descriptive, Inferential), from capeval's pack (types.py);
`type_families` (protocol param: a mapping, JSON text, or a TOML/JSON path) overrides the map. A type missing from
the map is reported under family "unmapped", never dropped; `inferred` says whether a type's group is read off its
name rather than stated in the paper (for a family row: whether any of its types is).

Grouping columns: captioner, prompt_id, frame_spec, judge, seed, trial (when the verdicts have them: each judge,
seed and trial is its own table), family, question_type, mode. Official mode (`mode="official"`) scores what the
paper's prompt produced with the paper's definitions (N = every question, those whose video has no caption
included: a row without a verdict); it differs from strict mode in the prompt, sampling and re-asks.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from capeval.engine.metrics.core import CountTable, count_table, f1, key_codes, metrics_frame, safe_ratio

from .codes import N_CODES, CapQuizVerdict
from .types import GROUPS, group_lookup, load_type_map, normalize_type  # noqa: F401 (normalize_type re-exported)
from capeval.engine.protocols.capquiz.prompts import check_mode

CD, TP, FP = int(CapQuizVerdict.CANNOT_DETERMINE), int(CapQuizVerdict.CORRECT), int(CapQuizVerdict.WRONG)
NV = N_CODES  # the count table's last column: rows without a verdict

#: question type -> family, from capeval's pack (the paper's ten types); override with `type_families`.
TYPE_FAMILY: dict[str, str] = {name: group for name, (group, _) in load_type_map().items()}
FAMILIES = GROUPS
ALL = "all"
GROUP_COLUMNS = ["captioner", "prompt_id", "frame_spec"]
RUN_COLUMNS = ["judge", "seed", "trial"]  # grouping columns too, when the verdict table has them
AVERAGES = ("pooled", "per_video")


# -- metric functions of count arrays: counts[..., N_CODES + 1] -> fractions ------------------------------------


def cap_precision(counts: np.ndarray) -> np.ndarray:
    c = np.asarray(counts, dtype=np.float64)
    return safe_ratio(c[..., TP], c[..., TP] + c[..., FP])


def cap_recall(counts: np.ndarray, *, include_no_verdict: bool = True) -> np.ndarray:
    c = np.asarray(counts, dtype=np.float64)
    n = c[..., TP] + c[..., FP] + c[..., CD] + (c[..., NV] if include_no_verdict else 0.0)
    return safe_ratio(c[..., TP], n)


def cap_f1(counts: np.ndarray, *, include_no_verdict: bool = True) -> np.ndarray:
    """2PR/(P+R); 0 when P = R = 0 (judged questions, none right: the paper leaves 0/0 open, capeval scores it 0,
    as its per-video F1 2TP/(N+TP+FP) does), nan when P or R is undefined."""
    p = cap_precision(counts)
    r = cap_recall(counts, include_no_verdict=include_no_verdict)
    return f1(p, r)


def metric_functions(paper_compatible: bool = False) -> dict:
    include = not paper_compatible
    return {
        "CapP": cap_precision,
        "CapR": lambda c: cap_recall(c, include_no_verdict=include),
        "CapF1": lambda c: cap_f1(c, include_no_verdict=include),
    }


#: per_video: the per-video statistics [P_v, has P, R_v, has N] summed over videos -> means (CapF1: of the means)
PER_VIDEO_METRICS = {
    "CapP": lambda s: safe_ratio(s[..., 0], s[..., 1]),
    "CapR": lambda s: safe_ratio(s[..., 2], s[..., 3]),
    "CapF1": lambda s: f1(safe_ratio(s[..., 0], s[..., 1]), safe_ratio(s[..., 2], s[..., 3])),
}


def per_video_table(table: CountTable, *, include_no_verdict: bool = True) -> CountTable:
    """The code counts per (video, group) -> per-video CapP / CapR with presence flags, so that sums over
    (resampled) videos give the mean over videos; a video absent from a group has all zeros and counts nowhere."""
    c = np.asarray(table.counts, dtype=np.float64)
    tp, fp = c[..., TP], c[..., FP]
    n = tp + fp + c[..., CD] + (c[..., NV] if include_no_verdict else 0.0)
    has_p, has_n = (tp + fp) > 0, n > 0
    with np.errstate(invalid="ignore", divide="ignore"):
        p = np.where(has_p, tp / np.where(has_p, tp + fp, 1.0), 0.0)
        r = np.where(has_n, tp / np.where(has_n, n, 1.0), 0.0)
    stats = np.stack([p, has_p, r, has_n], axis=-1).astype(np.float64)
    return CountTable(table.group_columns, table.groups, stats, None, table.clusters, table.strata, table.rows)


# -- the verdict table -> long-format metrics -------------------------------------------------------------------


def _with_types(verdicts: pl.DataFrame, items: pl.DataFrame | None, type_families) -> pl.DataFrame:
    """Adds `question_type` (items.category, joined on task + item_id), `family` and `inferred`; never drops a
    verdict row."""
    if items is None or "category" not in items.columns:
        return verdicts.with_columns(pl.lit(ALL).alias("question_type"), pl.lit(ALL).alias("family"),
                                     pl.lit(None, dtype=pl.Boolean).alias("inferred"))
    keys = [k for k in ("task", "item_id") if k in items.columns and k in verdicts.columns]
    if "item_id" not in keys:
        raise KeyError("items need an `item_id` column to attach question types to verdicts")
    out = verdicts.with_columns(_item_types(verdicts, items, keys).fill_null("unknown"))
    group, inferred = group_lookup(type_families)
    names = out.get_column("question_type").unique().to_list()  # one lookup per distinct type, not per row
    return out.with_columns(
        pl.col("question_type").replace_strict({n: group(n) for n in names}, return_dtype=pl.String).alias("family"),
        pl.col("question_type").replace_strict({n: inferred(n) for n in names}, return_dtype=pl.Boolean)
        .alias("inferred"))


def _item_types(verdicts: pl.DataFrame, items: pl.DataFrame, keys: list[str]) -> pl.Series:
    """`question_type` per verdict row: the category of the first item with its keys; null where no item has them
    or a key is null (a left join's rule). Looked up through key_codes where it can code the keys: a join on the
    two string keys held every row's keys encoded as bytes (+16 MB at 100,000 verdict rows, +13 MB more to make
    the items' distinct keys)."""
    codes = key_codes(keys, verdicts, items)
    if codes is None:
        cats = items.select(*keys, pl.col("category").alias("question_type")).unique(subset=keys, keep="first")
        # joined on the key columns alone (rows keep their order; `cats` has one row per key): a join of the whole
        # verdict frame copied every row of it
        return (verdicts.lazy().select(keys).join(cats.lazy(), on=keys, how="left", maintain_order="left")
                .collect().get_column("question_type"))
    wanted, offered = codes
    usable = np.flatnonzero(~items.select(pl.any_horizontal(pl.col(k).is_null() for k in keys)).to_series()
                            .to_numpy())  # a null key matches no verdict
    found, first = np.unique(offered[usable], return_index=True)  # each key's first item row
    hit, rows = np.zeros(len(wanted), dtype=bool), np.zeros(len(wanted), dtype=np.int64)
    if len(found):
        at = np.minimum(np.searchsorted(found, wanted), len(found) - 1)
        hit, rows = found[at] == wanted, usable[first[at]]
    return items.get_column("category").gather(pl.Series(rows).set(pl.Series(~hit), None)).alias("question_type")


def compute_metrics(
    verdicts: pl.DataFrame,
    *,
    items: pl.DataFrame | None = None,
    captions: pl.DataFrame | None = None,
    n_resamples: int = 1000,
    seed: int = 0,
    paper_compatible: bool = False,
    type_families=None,
    confidence: float = 0.95,
    mode: str | None = None,
    average: str = "pooled",
    **options,
) -> pl.DataFrame:
    """CapP / CapR / CapF1 (percent) per (captioner, prompt_id, frame_spec, judge, seed, trial) x {type, family,
    overall}; `average` = "pooled" (default) or "per_video" (module doc).

    Group columns: those, then family, question_type, mode; `family == question_type == "all"` is the overall row,
    `question_type == "all"` a family row; `inferred` flags groups read off type names. CIs: percentile bootstrap
    over videos."""
    del captions, options
    _check_verdicts(verdicts)
    mode = check_mode(mode)
    if average not in AVERAGES:
        raise ValueError(f"capquiz: param average must be one of {list(AVERAGES)}, got {average!r}")
    label = "paper" if (paper_compatible and mode == "strict") else mode
    filled, run_cols = _fill_groups(verdicts)
    table = _with_types(filled, items, type_families)
    fns = metric_functions(paper_compatible) if average == "pooled" else PER_VIDEO_METRICS
    base = GROUP_COLUMNS + run_cols
    frames = []
    for extra in (["family", "question_type"], ["family"], []):
        counts = count_table(table, base + extra, N_CODES)
        if average == "per_video":
            counts = per_video_table(counts, include_no_verdict=not paper_compatible)
        frame = metrics_frame(counts, fns, n_resamples=n_resamples,
                              seed=seed, confidence=confidence, scale=100.0, resample="per_group", nan_as_null=True)
        for col in ("family", "question_type"):
            if col not in frame.columns:
                frame = frame.with_columns(pl.lit(ALL).alias(col))
        frames.append(frame)
    out = pl.concat([f.select(frames[0].columns) for f in frames], how="vertical")
    out = out.unique(subset=base + ["family", "question_type", "metric"], maintain_order=True)  # no items: 1 level
    flags = table.group_by("family", "question_type").agg(pl.col("inferred").first())
    fam = table.group_by("family").agg(pl.col("inferred").any()).with_columns(pl.lit(ALL).alias("question_type"))
    flags = pl.concat([flags, fam.select(flags.columns)], how="vertical").unique(["family", "question_type"])
    out = out.join(flags, on=["family", "question_type"], how="left")
    out = out.with_columns(pl.lit(label).alias("mode"), pl.lit(average).alias("average"))
    group_cols = base + ["family", "question_type", "mode", "average"]
    rest = [c for c in out.columns if c not in group_cols]
    return out.select(group_cols + rest)


def _check_verdicts(verdicts: pl.DataFrame) -> None:
    missing = [c for c in ("item_id", "video_id", "verdict") if c not in verdicts.columns]
    if missing:
        raise KeyError(f"verdict table lacks columns {missing} (have {verdicts.columns})")


def _fill_groups(verdicts: pl.DataFrame) -> tuple[pl.DataFrame, list[str]]:
    """Group columns may be null (e.g. released judgments without a prompt id): label them instead of losing rows.
    Returns the table and the run columns (judge, seed, trial) it has."""
    cols = []
    for c in GROUP_COLUMNS:
        cols.append(pl.col(c).cast(pl.String).fill_null("-").alias(c) if c in verdicts.columns else pl.lit("-").alias(c))
    run_cols = [c for c in RUN_COLUMNS if c in verdicts.columns]
    cols += [pl.col(c).cast(pl.String).fill_null("-").alias(c) for c in run_cols]
    return verdicts.with_columns(cols), run_cols
