"""`capeval judge validate` as a function: judge exactly the (item, caption) pairs of a recorded reference judge's
verdicts with another judge, through the same path as `capeval judge` (protocol requests, the content-addressed
judgment cache, the protocol's parser), and report how far the two are apart: agreement, Cohen's kappa, Gwet's AC1,
the confusion matrix and each headline metric's bias with a paired bootstrap interval over videos
(engine/metrics/validation.py; docs/validation.md).

The reference is a capeval VERDICTS table (Parquet or CSV: `capeval judge --out`, a sweep's verdicts) or a folder of
a benchmark's released judge verdicts, read by its protocol (JudgeProtocol.released_verdicts)."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from capeval.engine.errors import UsageError
from capeval.engine.judge_run.backend import build_judge
from capeval.engine.judge_run.inputs import (InputOptions, check_pairs, frames_for_judge, given_captions,
                                             lookup_protocol, protocol_and_items)
from capeval.engine.judge_run.options import check_out
from capeval.engine.judging.runner import run_judging
from capeval.engine.metrics.validation import ValidationInputError, validate
from capeval.engine.protocols.base import JudgeProtocol
from capeval.engine.registry import names
from capeval.engine.schemas import NO_VERDICT
from capeval.engine.store.segments import write_parquet_atomic


@dataclass(frozen=True, kw_only=True)
class ValidateOptions(InputOptions):
    """A `capeval judge validate` run: its inputs (as `capeval judge`), the reference (--reference, --captioner,
    --reference-label), the judge to validate, the sample (--limit, --per-task, --sample-seed), the statistics
    (--tolerance, --resamples, --confidence) and the outputs (--out JSON, --verdicts)."""

    reference: Path
    judge: str
    judge_model: str | None = None
    base_url: str | None = None
    judge_option: tuple[str, ...] = ()
    seed: int = 0
    captioner: str | None = None
    reference_label: str | None = None
    per_task: int | None = None
    sample_seed: int = 0
    tolerance: float | None = None
    resamples: int = 2000
    confidence: float = 0.95
    out: Path | None = None
    verdicts: Path | None = None
    batch_size: int = 64
    max_reasks: int | None = None
    no_progress: bool = False


def reference_table(path: Path, protocol: str):
    """The reference as a VERDICTS table (polars) checked against the protocol, or None for a folder of the
    benchmark's released verdicts (read with the items, read_reference; JudgeProtocol.released_verdicts). Called before anything is loaded or judged, so a reference that
    does not fit --protocol stops with exit 2 naming what it holds."""
    if path.is_dir():
        problem = lookup_protocol(protocol).released_verdicts_problem(path)
        if problem:
            raise UsageError(f"--reference {path}: {problem}")
        return None
    if not path.is_file():
        raise UsageError(f"--reference {path}: not found")
    try:
        table = pl.read_parquet(path) if path.suffix != ".csv" else pl.read_csv(path, infer_schema_length=None)
    except Exception as exc:  # noqa: BLE001 - not a table: the user's file
        raise UsageError(f"--reference {path}: not a Parquet or CSV verdict table: {exc}") from None
    missing = [c for c in ("task", "item_id", "video_id", "verdict") if c not in table.columns]
    if missing:
        raise UsageError(f"--reference {path}: not a VERDICTS table (no column {', '.join(missing)})")
    check_fits_protocol(table, protocol, path)
    return table


def check_fits_protocol(table, protocol: str, path: Path) -> None:
    """A UsageError when the reference's verdicts cannot be the protocol's: its `protocol` column names another
    registered protocol, it holds verdict codes the protocol does not have, or tasks it does not have."""
    proto = lookup_protocol(protocol)
    if "protocol" in table.columns:
        others = sorted(set(table["protocol"].drop_nulls().cast(pl.String).to_list()) & set(names("protocol"))
                        - {protocol})
        if others:
            raise UsageError(f"--reference {path}: holds verdicts of protocol {', '.join(others)} (its `protocol` "
                             f"column), not of --protocol {protocol}: give --protocol {others[0]}, or a reference "
                             f"judged with {protocol}")
    labels = proto.verdict_labels()
    codes = table["verdict"].drop_nulls()
    if labels and codes.dtype.is_numeric():
        unknown = sorted(set(int(c) for c in codes.to_list() if c >= 0) - set(labels))
        if unknown:
            known = ", ".join(f"{c} {n}" for c, n in sorted(labels.items()))
            raise UsageError(f"--reference {path}: verdict codes {unknown} are not codes of protocol {protocol} "
                             f"({known}; {NO_VERDICT} no verdict): was it judged with another protocol?")
    if proto.tasks:
        foreign = sorted(set(table["task"].drop_nulls().cast(pl.String).to_list()) - set(proto.tasks))
        if foreign:
            raise UsageError(f"--reference {path}: tasks {', '.join(foreign[:5])} are not tasks of protocol "
                             f"{protocol} ({', '.join(proto.tasks)}): was it judged with another protocol?")


def read_reference(path: Path, table, items, protocol: JudgeProtocol):
    """(reference VERDICTS rows (polars), released records that match no item of `items`): `table` (from
    reference_table) as it is, or, for a folder, the benchmark's released verdicts of those items."""
    if table is None:
        return protocol.released_verdicts(path, items, "--reference")
    return table, 0


def select_reference(ref, items, captioner: str | None, path: Path):
    """(reference rows of the loaded items, of one captioner (--captioner when the table holds several); the
    rows of that captioner whose (task, item_id) is no item of `items`; an example of them)."""
    labels = sorted(set(ref["captioner"].drop_nulls().to_list())) if "captioner" in ref.columns else []
    if captioner is not None:
        if captioner not in labels:
            raise UsageError(f"--captioner {captioner!r}: the reference has captioner(s) {', '.join(labels) or 'none'}")
        ref = ref.filter(pl.col("captioner") == captioner)
    elif len(labels) > 1:
        raise UsageError(f"--reference {path}: verdicts of {len(labels)} captioners ({', '.join(labels[:5])}); "
                         f"name the one to compare with --captioner")
    keys = pl.from_arrow(items.select(["task", "item_id"]))
    ref = ref.with_columns(pl.col("task").cast(pl.String), pl.col("item_id").cast(pl.String))
    unmatched = ref.join(keys, on=["task", "item_id"], how="anti")
    example = None if unmatched.is_empty() else f"task {unmatched['task'][0]!r}, item {unmatched['item_id'][0]!r}"
    return ref.join(keys, on=["task", "item_id"], how="semi"), unmatched.height, example


def sample_per_task(keys, n: int, seed: int):
    """`n` (task, item_id) keys per task, drawn without replacement by a seeded generator from the sorted keys, so
    the same reference, n and seed give the same sample on any machine."""
    if n < 1:
        raise UsageError(f"--per-task must be at least 1, got {n}")
    rng = np.random.default_rng(seed)
    parts = []
    for task in sorted(set(keys["task"].to_list())):
        ids = sorted(keys.filter(pl.col("task") == task)["item_id"].to_list())
        pick = sorted(rng.choice(len(ids), size=min(n, len(ids)), replace=False).tolist())
        parts.append(pl.DataFrame({"task": [task] * len(pick), "item_id": [ids[i] for i in pick]}))
    return pl.concat(parts)


def reference_label(ref, path: Path, given: str | None) -> str:
    if given:
        return given
    judges = sorted(set(ref["judge"].drop_nulls().to_list())) if "judge" in ref.columns else []
    caps = sorted(set(ref["captioner"].drop_nulls().to_list())) if "captioner" in ref.columns else []
    label = ", ".join(judges) or path.name
    return f"{label} on {', '.join(caps)} captions" if caps else label


def validate_judge(options: ValidateOptions) -> dict:
    """The validation report (a JSON-able dict), after writing --verdicts when asked; every input problem is a
    UsageError raised before anything is judged."""
    started = time.time()
    if options.tolerance is not None and not options.tolerance >= 0:
        raise UsageError(f"--tolerance must be >= 0, got {options.tolerance}")
    if options.resamples < 1:
        raise UsageError(f"--resamples must be at least 1, got {options.resamples}")
    if not 0 < options.confidence < 1:
        raise UsageError(f"--confidence must be within (0, 1), got {options.confidence}")
    for flag, path in (("--out", options.out), ("--verdicts", options.verdicts)):
        if path is not None:
            check_out(path, flag)
    table = reference_table(options.reference, options.protocol)  # a reference that does not fit: exit 2, nothing run
    params, protocol, items, bundled = protocol_and_items(options)
    reference, unknown = read_reference(options.reference, table, items, protocol)
    reference, unmatched, example = select_reference(reference, items, options.captioner, options.reference)
    unmatched += unknown
    if unmatched:
        total = unmatched + reference.height
        print(f"[validate] warning: {unmatched} of {total} reference rows match no item of --items "
              f"({'e.g. ' + example + '; ' if example else ''}matched by task and item id): left out, counted in "
              f"counts.reference_rows_not_in_items", file=sys.stderr)
    judged_keys = reference.filter(pl.col("verdict") >= 0).select("task", "item_id").unique()
    if options.per_task is not None:
        judged_keys = sample_per_task(judged_keys, options.per_task, options.sample_seed)
        reference = reference.join(judged_keys, on=["task", "item_id"], how="semi")
    if judged_keys.height == 0:
        raise UsageError(f"--reference {options.reference}: no verdict for any of the {items.num_rows} items of --items")
    wanted = pc.is_in(pc.binary_join_element_wise(items.column("task"), items.column("item_id"), "\x1f"),
                      value_set=pa.array([f"{t}\x1f{i}" for t, i in judged_keys.iter_rows()], pa.string()))
    items = items.filter(wanted)  # exactly the reference's judged pairs
    captions = given_captions(options, protocol, params, items, bundled)
    check_pairs(items, captions, options.captions or options.items)
    frames = frames_for_judge(options, protocol, params, items)
    judge = build_judge(options.judge, options.judge_model, options.base_url, list(options.judge_option))
    try:
        requests = protocol.build_requests(items, captions, judge=judge.name, judge_revision=judge.revision,
                                           seeds=[options.seed], frames=frames, **params)
        print(f"[validate] {protocol.name}: judging the reference's {items.num_rows} items ({requests.num_rows} "
              f"first-step requests) with {judge.name}", file=sys.stderr)
        verdicts, summary = run_judging(requests, judge, cache_dir=options.cache, protocol=protocol,
                                        batch_size=options.batch_size, max_reasks=options.max_reasks,
                                        progress=not options.no_progress, return_summary=True, protocol_params=params)
    finally:
        judge.close()
    if options.verdicts is not None:
        write_parquet_atomic(verdicts, options.verdicts)
    try:
        report = validate(reference, pl.from_arrow(verdicts), protocol=protocol.name,
                          mode=params.get("mode", "strict"), tolerance=options.tolerance, n_resamples=options.resamples,
                          confidence=options.confidence)
    except ValidationInputError as exc:
        raise UsageError(f"--reference {options.reference}: {exc}") from None
    report["counts"] = {**report["counts"], "reference_rows_not_in_items": unmatched}
    report = {**report, "judge": {"name": judge.name, "revision": judge.revision, "backend": options.judge,
                                  "model": options.judge_model},
              "reference": {"label": reference_label(reference, options.reference, options.reference_label),
                            "path": str(options.reference.resolve())},
              "inputs": {"items": str(options.items.resolve()),
                         "captions": None if options.captions is None else str(options.captions.resolve()),
                         "params": params},
              "judging": summary.as_dict(), "wall_s": round(time.time() - started, 3)}
    return report
