"""Official-mode S_e: AutoDQ's aggregation (evaluate_dream_gpt.py @ 63de87a, lines 350-430), from verdict rows of
steps "recall" and "precision" (one per clip each, see autodq.py).

* per clip: recall = hits / reference events, precision = hits / caption events (1.0 for an empty list, as the
  official code scores it). A clip is a success when both calls (and the extraction before "precision") were
  accepted; otherwise it is Failed: left out of every average, counted in `n_no_verdict`.
* per source (items.category, e.g. "DREAM/youtube"; sorted): recall and precision = mean over the source's
  successful clips, F1 = 2RP/(R+P) of those means (nan when R+P = 0).
* OVERALL: recall and precision = mean over the sources (those with at least one successful clip) of the
  per-source means, F1 of the two. This is the headline `S_e` (x100).
* buckets by n_subjects (<=1, ==2, ==3, >=4), n_shots (same) and n_events (<=3, 4-5, 6-7, >=8), read from the
  items' extra, pooling every source: means over the bucket's successful clips, F1 of the means.
* also reported, labelled: `S_e_pooled` (F1 of sum(hits)/sum(events) over successful clips, each direction; an
  empty list adds nothing) and `S_e_clip_mean` (mean of the per-clip F1s, a clip's F1 being 0 when R+P = 0).

CIs: percentile bootstrap resampling clips (multinomial weights), the per-source means recomputed in each replicate.
"""

from __future__ import annotations

import json

import numpy as np
import polars as pl

from capeval.engine.schemas import NO_VERDICT

OFFICIAL_EVENT_STEPS = ("recall", "precision")
AUTODQ_READING = ("DREAM-1K AutoDQ (event_scoring='autodq'): per clip, mean per source, mean over sources, "
                  "F1 of the means")
BUCKETS = {
    "subjects": (("<=1", lambda n: n <= 1), ("==2", lambda n: n == 2), ("==3", lambda n: n == 3),
                 (">=4", lambda n: n >= 4)),
    "shots": (("<=1", lambda n: n <= 1), ("==2", lambda n: n == 2), ("==3", lambda n: n == 3),
              (">=4", lambda n: n >= 4)),
    "events": (("<=3", lambda n: n <= 3), ("in [4, 5]", lambda n: n in (4, 5)), ("in [6, 7]", lambda n: n in (6, 7)),
               (">=8", lambda n: n >= 8)),
}


def f1(r, p):
    """2RP/(R+P), nan when R+P = 0 (numpy 0/0, as the official count_f1)."""
    r, p = np.asarray(r, dtype=np.float64), np.asarray(p, dtype=np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        return 2.0 * r * p / (r + p)


def _mean(x) -> float:
    x = np.asarray(x, dtype=np.float64)
    return float(x.mean()) if x.size else float("nan")


def clip_scores(verdicts: pl.DataFrame, group_columns: list[str]) -> pl.DataFrame:
    """One row per (group, item[, trial]): success, score_r, score_p, hits_r, n_r, hits_p, n_p (from the rows'
    detail). Repeated judge trials of a clip are separate clips (the averages then run over trials too)."""
    v = verdicts.filter(pl.col("step").is_in(OFFICIAL_EVENT_STEPS))
    if "trial" not in v.columns:
        v = v.with_columns(pl.lit(0).alias("trial"))
    rows: dict[tuple, dict] = {}
    cols = group_columns + ["item_id", "video_id", "trial", "step", "verdict", "detail"]
    for rec in v.select(cols).iter_rows(named=True):
        key = tuple(rec[c] for c in group_columns) + (rec["item_id"], rec["trial"])
        clip = rows.setdefault(key, {**{c: rec[c] for c in group_columns}, "item_id": rec["item_id"],
                                     "video_id": rec["video_id"]})
        d = rec["step"][0]  # "r" or "p"
        if rec["verdict"] is None or rec["verdict"] == NO_VERDICT or not rec["detail"]:
            clip[f"ok_{d}"] = False
            continue
        detail = json.loads(rec["detail"])
        clip.update({f"ok_{d}": True, f"score_{d}": float(detail["score"]), f"hits_{d}": int(detail["hits"]),
                     f"n_{d}": int(detail["n_events"])})
    out = []
    for clip in rows.values():
        success = bool(clip.get("ok_r")) and bool(clip.get("ok_p"))
        out.append({**{k: clip.get(k) for k in group_columns + ["item_id", "video_id"]}, "success": success,
                    **{k: clip.get(k) if success else None
                       for k in ("score_r", "score_p", "hits_r", "n_r", "hits_p", "n_p")}})
    schema = {**{c: pl.String for c in group_columns}, "item_id": pl.String, "video_id": pl.String,
              "success": pl.Boolean, "score_r": pl.Float64, "score_p": pl.Float64, "hits_r": pl.Int64,
              "n_r": pl.Int64, "hits_p": pl.Int64, "n_p": pl.Int64}
    return pl.DataFrame(out, schema=schema)


def clip_info(items: pl.DataFrame | None) -> dict[str, dict]:
    """item_id -> {source, n_subjects, n_shots, n_events, duration} from ITEMS (category = source)."""
    info: dict[str, dict] = {}
    if items is None or "item_id" not in items.columns:
        return info
    for rec in items.select([c for c in ("item_id", "category", "extra") if c in items.columns]).iter_rows(named=True):
        try:
            extra = json.loads(rec.get("extra") or "{}")
        except json.JSONDecodeError as exc:
            raise ValueError(f"items: item {rec['item_id']!r}: field 'extra' is not JSON ({exc})") from None
        extra = extra if isinstance(extra, dict) else {}
        info[rec["item_id"]] = {"source": rec.get("category") or extra.get("dataset") or "all",
                                **{k: extra.get(k) for k in ("n_subjects", "n_shots", "n_events", "duration")}}
    return info


def _bucket_of(name: str, n) -> str | None:
    if n is None:
        return None
    for label, test in BUCKETS[name]:
        if test(n):
            return label
    return None


def summarize(clips: pl.DataFrame, info: dict[str, dict]) -> dict:
    """The official tables for ONE group of clips, unrounded fractions: per_source {source: {recall, precision, f1,
    success, failed}}, overall {recall, precision, f1, success, failed}, buckets {subjects|shots|events:
    {label: {recall, precision, f1, count}}}, plus pooled / clip_mean F1s."""
    recs = clips.to_dicts()
    by_source: dict[str, list[dict]] = {}
    for c in recs:
        by_source.setdefault(info.get(c["item_id"], {}).get("source", "all"), []).append(c)
    per_source, means_r, means_p = {}, [], []
    for source in sorted(by_source):
        ok = [c for c in by_source[source] if c["success"]]
        failed = len(by_source[source]) - len(ok)
        if not ok:  # the official table has no row for a source without a successful clip
            per_source[source] = {"recall": float("nan"), "precision": float("nan"), "f1": float("nan"),
                                  "success": 0, "failed": failed}
            continue
        r, p = _mean([c["score_r"] for c in ok]), _mean([c["score_p"] for c in ok])
        means_r.append(r)
        means_p.append(p)
        per_source[source] = {"recall": r, "precision": p, "f1": float(f1(r, p)), "success": len(ok), "failed": failed}
    ok_all = [c for c in recs if c["success"]]
    r, p = _mean(means_r), _mean(means_p)
    overall = {"recall": r, "precision": p, "f1": float(f1(r, p)), "success": len(ok_all),
               "failed": len(recs) - len(ok_all)}
    buckets = {}
    for name in BUCKETS:
        table = {}
        for label, _ in BUCKETS[name]:
            members = [c for c in ok_all if _bucket_of(name, info.get(c["item_id"], {}).get(f"n_{name}")) == label]
            br, bp = _mean([c["score_r"] for c in members]), _mean([c["score_p"] for c in members])
            table[label] = {"recall": br, "precision": bp, "f1": float(f1(br, bp)), "count": len(members)}
        buckets[name] = table
    hr, nr = sum(c["hits_r"] for c in ok_all), sum(c["n_r"] for c in ok_all)
    hp, np_ = sum(c["hits_p"] for c in ok_all), sum(c["n_p"] for c in ok_all)
    pooled_r, pooled_p = (hr / nr if nr else float("nan")), (hp / np_ if np_ else float("nan"))
    clip_f1 = [float(np.nan_to_num(f1(c["score_r"], c["score_p"]))) for c in ok_all]
    return {"per_source": per_source, "overall": overall, "buckets": buckets,
            "pooled": {"recall": pooled_r, "precision": pooled_p, "f1": float(f1(pooled_r, pooled_p))},
            "clip_mean_f1": _mean(clip_f1)}


def _boot_weights(n: int, n_resamples: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.multinomial(n, np.full(n, 1.0 / n), size=n_resamples).astype(np.float64) if n else np.zeros((0, 0))


def _weighted_source_means(w, scores, onehot):
    """(B, S) per-source weighted means; nan where a source has no weight."""
    num, den = w @ (onehot * scores[:, None]), w @ onehot
    with np.errstate(invalid="ignore", divide="ignore"):
        return num / den


def _replicates(ok: list[dict], sources: list[str], info: dict, w: np.ndarray) -> dict[str, np.ndarray]:
    """Bootstrap replicates of overall recall/precision/F1 (mean over sources of per-source means)."""
    src = np.array([sources.index(info.get(c["item_id"], {}).get("source", "all")) for c in ok])
    onehot = np.zeros((len(ok), len(sources)))
    onehot[np.arange(len(ok)), src] = 1.0
    r = np.nanmean(_weighted_source_means(w, np.array([c["score_r"] for c in ok]), onehot), axis=1)
    p = np.nanmean(_weighted_source_means(w, np.array([c["score_p"] for c in ok]), onehot), axis=1)
    return {"event_recall": r, "event_precision": p, "S_e": f1(r, p)}


def metric_rows(clips: pl.DataFrame, info: dict, group: dict, *, n_resamples: int, seed: int,
                confidence: float) -> list[dict]:
    """Long-format metric rows (percent) for one group: OVERALL (bucket "all"), per source, per count bucket."""
    s = summarize(clips, info)
    recs = clips.to_dicts()
    ok = [c for c in recs if c["success"]]
    n_failed = len(recs) - len(ok)
    ci: dict[str, tuple[float, float]] = {}
    if n_resamples and ok:
        sources = sorted({info.get(c["item_id"], {}).get("source", "all") for c in ok})
        with np.errstate(invalid="ignore"):
            reps = _replicates(ok, sources, info, _boot_weights(len(ok), n_resamples, seed))
        alpha = (1.0 - confidence) / 2.0
        for k, x in reps.items():
            x = x[np.isfinite(x)]
            ci[k] = (float(np.quantile(x, alpha)), float(np.quantile(x, 1 - alpha))) if x.size else (None, None)

    def row(bucket, metric, value, n, nv, bounds=(None, None)):
        value = None if value is None or not np.isfinite(value) else 100.0 * value
        lo, hi = (None if b is None else 100.0 * b for b in bounds)
        return {**group, "bucket": bucket, "metric": metric, "value": value, "ci_low": lo, "ci_high": hi, "n": n,
                "n_no_verdict": nv}

    o = s["overall"]
    out = [row("all", "S_e", o["f1"], o["success"], n_failed, ci.get("S_e", (None, None))),
           row("all", "event_recall", o["recall"], o["success"], n_failed, ci.get("event_recall", (None, None))),
           row("all", "event_precision", o["precision"], o["success"], n_failed,
               ci.get("event_precision", (None, None))),
           row("all", "S_e_pooled", s["pooled"]["f1"], o["success"], n_failed),
           row("all", "S_e_clip_mean", s["clip_mean_f1"], o["success"], n_failed)]
    for source, t in s["per_source"].items():
        for metric, key in (("S_e", "f1"), ("event_recall", "recall"), ("event_precision", "precision")):
            out.append(row(f"source:{source}", metric, t[key], t["success"], t["failed"]))
    for name, table in s["buckets"].items():
        for label, t in table.items():
            for metric, key in (("S_e", "f1"), ("event_recall", "recall"), ("event_precision", "precision")):
                out.append(row(f"{name}{label}" if label[0] in "<=>" else f"{name} {label}", metric, t[key],
                               t["count"], 0))
    return out
