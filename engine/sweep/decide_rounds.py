"""An adaptive sweep's rounds (`[options] decide`, engine/sweep/decide.py): the pending cells are judged on a
growing prefix of each dataset's videos in a seeded random order; after each round the committed verdicts of every
system give per-video statistics (the protocol's PairedSpec, as `capeval compare` reads them), each open pair's
confidence sequence is updated, and only systems with an open pair are judged in the next round.

Each round is an ordinary judge pass (the runner's caption-and-judge pass) over datasets restricted to the prefix: captions
and judgments are content-keyed, so a round sends only the new videos' requests and a cell committed in one round
is replaced by the next. A cell judged on part of its videos is committed as `pending` (decide.PENDING): a rerun
with `decide` replays the same rounds from the caches and stops where this one did; a rerun without it finishes
the cell. Cells outside any comparison (a protocol without the metric, a lone system) are judged whole first.

`decide.json` in the run folder holds the decisions: per pair its status (decided / equivalent / open), direction,
interval, the videos judged when it stopped and whether that was early, and the items (requests) not judged.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

from capeval.engine.errors import UsageError
from capeval.engine.metrics.paired import per_video_stats
from capeval.engine.registry import lookup
from capeval.engine.store.segments import write_text_atomic
from capeval.engine.sweep import decide as dec
from capeval.engine.sweep.cells import cell_items, stored_verdicts
from capeval.engine.sweep.datasets import LoadedDataset
from capeval.engine.sweep.grid import ResultCell
from capeval.engine.sweep.run import RunStores, SweepRun


@dataclass
class _Group:
    """The systems (cells) of one (dataset, protocol, judge) and their Decider."""

    dataset: str
    cells: list
    protocol: object
    spec: object
    decider: dec.Decider
    order: list[str]
    stopped_at: dict = field(default_factory=dict)  # system index -> videos judged when its last pair stopped


def run_adaptive(run: SweepRun, cells: list[ResultCell], pending: list[ResultCell], keys: dict[ResultCell, str],
                 judge_round) -> tuple[dict, dict]:
    """Judge `pending` in rounds until every pair of the run's `options.decide` stopped. `judge_round(round_run,
    cells, partial)` runs one ordinary judge pass (round_run: the run over the round's datasets; partial: keys of
    cells committed as pending) and returns (caption stats, judge stats). Returns the summed stats; writes
    decide.json."""
    config, datasets, stores, log = run.config, run.datasets, run.stores, run.log
    spec = config.options.decide
    orders = {name: dec.video_order(d.items.column("video_id").to_pylist(), spec.seed, name)
              for name, d in datasets.items()}
    groups, notes = _groups(cells, datasets, spec, orders)
    for text in notes:
        log(f"[sweep {config.name}] decide: {text}")
    in_groups = {c for g in groups for c in g.cells}
    caption_stats, judge_stats = {}, {"sent": 0, "cached": 0}
    whole = [c for c in pending if c not in in_groups]
    if whole:
        _add(caption_stats, judge_stats, judge_round(run, whole, frozenset()))
    sizes = {name: dec.round_sizes(len(order), spec) for name, order in orders.items()}
    waiting = set(pending) & in_groups
    for r in range(max((len(s) for s in sizes.values()), default=0)):
        active = [c for g in groups for i, c in enumerate(g.cells) if i in g.decider.open_systems()]
        if not active:
            break
        upto = {name: s[min(r, len(s) - 1)] for name, s in sizes.items()}
        now = [c for c in active if c in waiting]
        if now:
            restricted = {name: _restrict(datasets[name], orders[name][:upto[name]]) for name in datasets}
            partial = frozenset(keys[c] for c in now
                                if upto[c.caption.dataset.name] < len(orders[c.caption.dataset.name]))
            _add(caption_stats, judge_stats, judge_round(run.with_datasets(restricted), now, partial))
        for g in groups:
            _update(g, upto[g.dataset], stores, keys)
    record = _record(groups, spec, keys, datasets, orders, set(pending))
    _write(run.out, record)
    log(f"[sweep {config.name}] decide: " + summary(record))
    return caption_stats, judge_stats


def _add(caption_stats: dict, judge_stats: dict, stats) -> None:
    caps, judged = stats
    for k, v in (caps or {}).items():
        caption_stats[k] = caption_stats.get(k, 0) + v if isinstance(v, (int, float)) else v
    for k, v in (judged or {}).items():
        judge_stats[k] = judge_stats.get(k, 0) + v


def _groups(cells, datasets, spec, orders) -> tuple[list[_Group], list[str]]:
    """The comparison groups: cells of one (dataset, protocol, judge) whose protocol has the metric."""
    by: dict[tuple, list] = {}
    for c in cells:
        labels = c.labels()
        by.setdefault((labels["dataset"], labels["protocol"], labels["judge"]), []).append(c)
    groups, notes, known = [], [], set()
    for (ds, proto, judge), members in by.items():
        protocol = lookup("protocol", members[0].protocol.name)
        mode = members[0].protocol.params.get("mode") or protocol.compare_default_mode
        pspec = protocol.paired_spec(mode)
        where = f"{proto} on {ds} (judge {judge})"
        if pspec is None or spec.metric not in pspec.metrics:
            known |= set(pspec.metrics) if pspec is not None else set()
            notes.append(f"{where}: no paired metric {spec.metric!r}; judged in full")
            continue
        pairs, why = dec.plan_pairs([c.labels() for c in members], spec.baseline)
        if why:
            if spec.baseline != dec.ALL_PAIRS and len(members) > 1:
                raise UsageError(f"options.decide.baseline: {where}: {why}; systems: "
                                 + "; ".join(_label(c) for c in members))
            notes.append(f"{where}: {why}; judged in full")
            continue
        statistic = dec.metric_statistic(pspec, spec.metric)
        n_tasks = max(1, len(set(_tasks(protocol, members[0], datasets[ds]))))
        span = dec.metric_span(statistic, n_tasks, pspec.n_stats, pspec.scale)
        decider = dec.Decider(len(members), pairs, statistic, len(orders[ds]), spec, span)
        groups.append(_Group(ds, members, protocol, pspec, decider, orders[ds]))
    if not groups and by:
        raise UsageError(f"options.decide.metric: no protocol of the sweep has a paired metric {spec.metric!r}"
                         + (f"; they have: {', '.join(sorted(known))}" if known else ""))
    return groups, notes


def _tasks(protocol, cell, data) -> list[str]:
    col = protocol.compare_average_over
    items = data.items
    return [str(v) for v in items.column(col).to_pylist()] if col and col in items.column_names else ["all"]


def _restrict(data, videos: list[str]):
    """The dataset with only these videos (and the items of them); same spec and digest (the cells' keys)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    keep = pa.array(sorted(set(videos)), pa.string())
    items = data.items.filter(pc.is_in(data.items.column("video_id"), value_set=keep))
    owners = set(videos) | set(items.column("item_id").to_pylist())
    return LoadedDataset(data.spec, items, {v: p for v, p in data.videos.items() if v in owners}, data.digest)


def _update(g: _Group, upto: int, stores: RunStores, keys: dict[ResultCell, str]) -> None:
    open_now = g.decider.open_systems()
    if not open_now:
        return
    videos = g.order[:upto]
    rows = {}
    for i in open_now:
        table = stored_verdicts(stores, keys[g.cells[i]])
        frame = pl.from_arrow(table) if table is not None else pl.DataFrame({"video_id": [], "verdict": []})
        col = g.protocol.compare_average_over
        task = pl.col(col).cast(pl.String) if col and col in frame.columns else pl.lit("all")
        rows[i] = frame.filter(pl.col("video_id").is_in(videos)).with_columns(task.alias("_task"))
    tasks = sorted({t for f in rows.values() for t in f["_task"].to_list()}) or ["all"]
    stats = {i: per_video_stats(f, g.spec, videos, tasks) for i, f in rows.items()}
    for p in g.decider.update(upto, stats):
        for i in (p.a, p.b):
            if i not in g.decider.open_systems():
                g.stopped_at.setdefault(i, upto)


def _label(cell) -> str:
    labels = cell.labels()
    return " | ".join(f"{k}={labels[k]}" for k in dec.FACTORS)


def _record(groups, spec, keys, datasets, orders, pending) -> dict:
    pairs, total, judged = [], 0, 0
    for g in groups:
        for p in g.decider.pairs:
            pairs.append({"dataset": g.dataset, "protocol": g.cells[p.a].labels()["protocol"],
                          "judge": g.cells[p.a].labels()["judge"], "a": _label(g.cells[p.a]),
                          "b": _label(g.cells[p.b]), "status": p.status,
                          "direction": {1: "a > b", -1: "a < b"}.get(p.direction), "diff": _num(p.estimate),
                          "ci_low": _num(p.low), "ci_high": _num(p.high), "videos": p.videos,
                          "videos_total": len(g.order), "early": p.early})
        for i, cell in enumerate(g.cells):
            vids = cell_items(cell, datasets[g.dataset]).column("video_id").to_pylist()
            seeds = max(1, len(cell.judge.seeds))
            stop = g.stopped_at.get(i, len(g.order)) if cell in pending else len(g.order)
            seen = set(g.order[:stop])
            total += len(vids) * seeds
            judged += sum(v in seen for v in vids) * seeds
    return {"metric": spec.metric, "baseline": spec.baseline, "delta": spec.delta, "alpha": spec.alpha,
            "seed": spec.seed, "min_videos": spec.min_videos, "rounds": spec.rounds, "pairs": pairs,
            "requests": {"first_step_total": total, "first_step_judged": judged,
                         "saved": total - judged, "saved_share": (total - judged) / total if total else 0.0},
            "pending_cells": sorted({keys[g.cells[i]] for g in groups for i in g.stopped_at
                                     if g.cells[i] in pending and g.stopped_at[i] < len(g.order)})}


def _num(x: float):
    import math

    return None if x is None or not math.isfinite(x) else round(float(x), 6)


def _write(out: Path, record: dict) -> None:
    write_text_atomic(json.dumps(record, indent=2), out / "decide.json",
                      what="the adaptive run's decisions")


def summary(record: dict) -> str:
    """A few lines: counts of decisions, the early ones, requests saved; then one line per pair."""
    pairs = record["pairs"]
    counts = {s: sum(p["status"] == s for p in pairs) for s in (dec.DECIDED, dec.EQUIVALENT, dec.UNDEFINED)}
    req = record["requests"]
    lines = [f"{len(pairs)} pair(s) on {record['metric']} (delta {record['delta']:g}, alpha {record['alpha']:g}): "
             f"{counts[dec.DECIDED]} decided, {counts[dec.EQUIVALENT]} equivalent, {counts[dec.UNDEFINED]} undefined; "
             f"{sum(p['early'] for p in pairs)} early; first-step requests saved {req['saved']} of "
             f"{req['first_step_total']} ({req['saved_share']:.0%})"]
    for p in pairs:
        what = p["direction"] if p["status"] == dec.DECIDED else p["status"]
        ci = "-" if p["ci_low"] is None else f"[{p['ci_low']:+.2f}, {p['ci_high']:+.2f}]"
        lines.append(f"  {p['a']}  vs  {p['b']}: {what}, a-b = {_fmt(p['diff'])} {ci} after {p['videos']}/"
                     f"{p['videos_total']} videos" + (" (early)" if p["early"] else ""))
    return "\n".join(lines)


def _fmt(x) -> str:
    return "-" if x is None else f"{x:+.2f}"


def replay(verdicts: dict[str, pl.DataFrame], protocol_name: str, spec, *, mode: str | None = None) -> dict:
    """An adaptive run replayed on recorded verdicts (e.g. a finished full run's, or a benchmark's released ones):
    `verdicts` maps a system's label to its verdict rows on the same videos. Returns what decide.json holds for a
    sweep (pairs, requests), the requests counted as verdict rows of the videos each system needed."""
    protocol = lookup("protocol", protocol_name)
    pspec = protocol.paired_spec(mode or protocol.compare_default_mode)
    col = protocol.compare_average_over
    labels = list(verdicts)
    rows = {k: v.with_columns((pl.col(col).cast(pl.String) if col else pl.lit("all")).alias("_task"))
            for k, v in verdicts.items()}
    order = dec.video_order([v for f in rows.values() for v in f["video_id"].to_list()], spec.seed, protocol_name)
    tasks = sorted({t for f in rows.values() for t in f["_task"].to_list()})
    stats = {i: per_video_stats(rows[k], pspec, order, tasks) for i, k in enumerate(labels)}
    statistic = dec.metric_statistic(pspec, spec.metric)
    systems = [{"captioner": k, "prompt_id": "-", "frame_spec": "-"} for k in labels]
    pairs, why = dec.plan_pairs(systems, spec.baseline)
    if why:
        raise UsageError(f"decide.baseline: {why}")
    decider = dec.Decider(len(labels), pairs, statistic, len(order), spec,
                          dec.metric_span(statistic, len(tasks), pspec.n_stats, pspec.scale))
    until = dict.fromkeys(range(len(labels)), len(order))
    for t in dec.round_sizes(len(order), spec):
        active = decider.open_systems()
        if not active:
            break
        decider.update(t, {i: stats[i] for i in active})
        for i in active - decider.open_systems():
            until[i] = t
    per_video = {k: rows[k].group_by("video_id").len() for k in labels}
    position = {v: n for n, v in enumerate(order)}
    judged = sum(int(per_video[k].filter(pl.col("video_id").replace_strict(position, default=len(order))
                                         < until[i])["len"].sum()) for i, k in enumerate(labels))
    total = sum(f.height for f in rows.values())
    return {"metric": spec.metric, "baseline": spec.baseline, "delta": spec.delta, "alpha": spec.alpha,
            "pairs": [{"a": labels[p.a], "b": labels[p.b], "status": p.status,
                       "direction": {1: "a > b", -1: "a < b"}.get(p.direction), "diff": _num(p.estimate),
                       "ci_low": _num(p.low), "ci_high": _num(p.high), "videos": p.videos,
                       "videos_total": len(order), "early": p.early} for p in decider.pairs],
            "requests": {"first_step_total": total, "first_step_judged": judged, "saved": total - judged,
                         "saved_share": (total - judged) / total if total else 0.0}}
