"""Official-mode S_e under `event_scoring = "paper"` (paper_events.py): from the verdict rows of step "event_match"
(one per clip and judge trial).

* per clip: R and P as the judge's Prompt5 reply gives them, F1 = 2PR/(P+R) (Eq. 1), S_e = 100 x F1;
* `S_e`, `event_recall`, `event_precision` = the mean over clips of the per-clip values (capeval's reading: the paper
  states no averaging; see paper_events.READING, written into every row's `reading` column);
* rows: bucket "all", `category:<items.category>` and `duration:<bucket>`, each the mean over its clips;
* a clip without an accepted reply (extraction or match rejected, caption missing) is left out of the means and
  counted in `n_no_verdict`;
* CIs: percentile bootstrap over videos (capeval.engine.metrics.core, resample="per_group"): repeated trials of a video stay
  in one cluster.
"""

from __future__ import annotations

import json

import polars as pl

from capeval.engine.metrics.core import metrics_frame, safe_ratio, sum_table

from .paper_events import READING

STEP = "event_match"
#: per clip: [F1, R, P, 1 for an accepted clip]; metrics are sums of the first three over the accepted count
METRICS = {
    "S_e": lambda s: safe_ratio(s[..., 0], s[..., 3]),
    "event_recall": lambda s: safe_ratio(s[..., 1], s[..., 3]),
    "event_precision": lambda s: safe_ratio(s[..., 2], s[..., 3]),
}


def _categories(items: pl.DataFrame | None) -> dict[str, str]:
    if items is None or "category" not in items.columns or "item_id" not in items.columns:
        return {}
    return {r["item_id"]: r["category"] for r in items.select("item_id", "category").iter_rows(named=True)
            if r["category"]}


def clip_rows(v: pl.DataFrame, group_columns: list[str]) -> list[dict]:
    """One unit per event_match row: group columns, item_id, video_id, and the per-clip statistics."""
    out = []
    for rec in v.filter(pl.col("step") == STEP).iter_rows(named=True):
        ok = rec["verdict"] is not None and rec["verdict"] >= 0 and bool(rec["detail"])
        d = json.loads(rec["detail"]) if ok else {}
        out.append({**{c: rec[c] for c in group_columns}, "item_id": rec["item_id"], "video_id": rec["video_id"],
                    "_s0": d.get("f1", 0.0), "_s1": d.get("recall", 0.0), "_s2": d.get("precision", 0.0),
                    "_s3": 1.0 if ok else 0.0, "_n": 1, "_nv": 0 if ok else 1})
    return out


def frame(v: pl.DataFrame, items: pl.DataFrame | None, bucket_of: dict, group_columns: list[str], *,
          n_resamples: int, seed: int, confidence: float) -> pl.DataFrame | None:
    """Long metric rows (percent) for every group x bucket, or None when there are no event_match rows."""
    units = clip_rows(v, group_columns)
    if not units:
        return None
    category = _categories(items)
    labelled = []
    for u in units:
        labelled.append({**u, "bucket": "all"})
        labelled.append({**u, "bucket": f"duration:{bucket_of.get(u['video_id'], 'unknown')}"})
        if u["item_id"] in category:
            labelled.append({**u, "bucket": f"category:{category[u['item_id']]}"})
    table = sum_table(pl.DataFrame(labelled), group_columns + ["bucket"], ["_s0", "_s1", "_s2", "_s3"])
    out = metrics_frame(table, METRICS, n_resamples=n_resamples, seed=seed, confidence=confidence, scale=100.0,
                        resample="per_group", nan_as_null=True)
    return out.with_columns(pl.lit("paper").alias("event_scoring"), pl.lit(READING).alias("reading"))
