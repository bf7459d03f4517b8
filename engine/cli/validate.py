"""`capeval judge validate`: judge exactly the (item, caption) pairs of a recorded reference judge's verdicts with
another judge, through the same path as `capeval judge` (protocol requests, the content-addressed judgment cache,
the protocol's parser), and report how far the two are apart: agreement, Cohen's kappa, Gwet's AC1, the confusion
matrix and each headline metric's bias with a paired bootstrap interval over videos (engine/metrics/validation.py;
docs/validation.md).

`judge` is a flat command whose options are all its own, so `validate` is not an argparse sub-subcommand of it:
the command is registered as "judge validate" and `merge_subcommand` joins the two words of the command line
before parsing (`capeval judge validate ...` -> "judge validate"). `capeval judge --protocol ...` is unchanged.

The reference is a capeval VERDICTS table (Parquet or CSV: `capeval judge --out`, a sweep's verdicts) or, for
CAPability, a released `judgments/<model>/` folder (read by the release loader, GPT-4-Turbo's verdicts)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from capeval.engine.errors import UsageError

COMMAND = "judge validate"

USAGE = """examples:
  capeval judge validate --protocol capability --judge local \\
      --reference ../shared/data/capability/judgments/gpt-4o-0806 \\
      --items ../shared/data/capability/annotations/object_color.jsonl \\
      --captions ../shared/data/capability/captions/gpt-4o-0806 --tolerance 5 --json --out local-vs-gpt4t.json
  capeval judge validate --protocol capquiz --reference gpt-verdicts.parquet --items items.csv \\
      --captions captions.jsonl --judge openai --judge-model Qwen/Qwen2.5-72B-Instruct --base-url http://gpu:8000/v1

A sweep names the JSON file (--out) as `[[judges]] validated = "FILE"`; run.json and the report show it.
"""


def merge_subcommand(argv: list[str]) -> list[str]:
    """The command line with `judge validate` as one word, so argparse finds the "judge validate" subcommand.
    Only the command position is looked at (after global options such as --debug): `--items validate` is left alone."""
    argv = list(argv)
    for i, arg in enumerate(argv):
        if arg.startswith("-"):
            continue
        if arg == "judge" and i + 1 < len(argv) and argv[i + 1] == "validate":
            return argv[:i] + [COMMAND] + argv[i + 2:]
        return argv
    return argv


def register(subparsers) -> None:
    from capeval.engine.cli.judge import add_protocol_options

    p = subparsers.add_parser(COMMAND, help="a judge's agreement with a reference judge's verdicts, and each "
                              "metric's bias", description=__doc__.split("\n\n")[0], epilog=USAGE,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--protocol", required=True, help="the protocol both judges judged with")
    p.add_argument("--reference", required=True, type=Path, metavar="VERDICTS",
                   help="the reference's verdicts: a VERDICTS Parquet/CSV, or a CAPability judgments/<model>/ folder")
    p.add_argument("--items", required=True, type=Path, help="items, as `capeval judge --items` (only the reference's "
                   "items are judged)")
    p.add_argument("--captions", type=Path, help="the captions the reference judged, as `capeval judge --captions`")
    p.add_argument("--dataset", metavar="KIND", help="read --items as this dataset kind (as capeval judge)")
    p.add_argument("--media-root", type=Path, help="folder the dataset's media paths are relative to")
    p.add_argument("--frames", type=Path, help="FRAMES Parquet for judges that see frames (as capeval judge)")
    p.add_argument("--frame-size", type=int, default=448, help="longer side of frames decoded for the judge")
    p.add_argument("--judge", required=True, help="the judge to validate: local | replay | vllm | openai")
    p.add_argument("--judge-model", help="model path or name (vLLM: a local path or HF id; openai: model name)")
    p.add_argument("--base-url", help="OpenAI-compatible endpoint, e.g. a vLLM server's http://host:8000/v1")
    p.add_argument("--judge-option", action="append", default=[], metavar="KEY=VALUE",
                   help="backend option (value parsed as JSON when it parses), repeatable; replay: replies=FILE")
    add_protocol_options(p)
    p.add_argument("--seed", type=int, default=0, help="judge seed (one trial; default 0)")
    p.add_argument("--captioner", help="the reference's captioner label to compare, when it holds several")
    p.add_argument("--reference-label", help="name of the reference judge in the report (default: the table's "
                   "judge column and captioner)")
    p.add_argument("--limit", type=int, metavar="N", help="judge only the items of the first N videos (file order)")
    p.add_argument("--per-task", type=int, metavar="N", help="judge a seeded random sample of N of the reference's "
                   "judged items per task (all of a task with fewer); cheaper for a paid judge")
    p.add_argument("--sample-seed", type=int, default=0, help="seed of the --per-task sample (default 0)")
    p.add_argument("--tolerance", type=float, metavar="T", help="flag a metric whose bias interval leaves ±T (the "
                   "metric's own units: percentage points for percent metrics)")
    p.add_argument("--resamples", type=int, default=2000, help="bootstrap resamples for the bias intervals")
    p.add_argument("--confidence", type=float, default=0.95, help="confidence of the bias intervals (default 0.95)")
    p.add_argument("--json", action="store_true", help="print the report as JSON instead of a table")
    p.add_argument("--out", type=Path, metavar="FILE", help="also write the JSON report here (what a sweep's "
                   "`validated` names)")
    p.add_argument("--verdicts", type=Path, metavar="V.parquet", help="also write the judge's verdicts here")
    p.add_argument("--cache", type=Path, default=Path(".capeval/judge-cache"),
                   help="judgment cache directory, shared with capeval judge (default .capeval/judge-cache)")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--max-reasks", type=int, default=None, help="re-asks for malformed output (default: the "
                   "protocol's policy for --mode)")
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("--debug", action="store_true", help="show tracebacks")
    p.set_defaults(func=run)


def reference_table(path: Path, protocol: str):
    """The reference as a VERDICTS table (polars) checked against the protocol, or None for a CAPability release
    folder (read with the items, read_reference). Called before anything is loaded or judged, so a reference that
    does not fit --protocol stops with exit 2 naming what it holds."""
    import polars as pl

    if path.is_dir():
        if protocol != "capability":
            raise UsageError(f"--reference {path}: a folder is read as CAPability's released judgments/<model>/; "
                             f"for {protocol!r} give a VERDICTS table (Parquet or CSV)")
        from capeval.engine.protocols.capability.release import judgments_folder_problem

        problem = judgments_folder_problem(path)
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
    import polars as pl

    from capeval.engine.registry import lookup, names
    from capeval.engine.schemas import NO_VERDICT

    try:
        proto = lookup("protocol", protocol)
    except KeyError as exc:
        raise UsageError(str(exc.args[0])) from None
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


def read_reference(path: Path, table, items):
    """(reference VERDICTS rows (polars), released records that match no item of `items`): `table` (from
    reference_table) as it is, or, for a folder, CAPability's released judgments of those items."""
    if table is None:
        from capeval.engine.cli.capability import release_verdicts

        return release_verdicts(path, items, "--reference")
    return table, 0


def _select_reference(ref, items, captioner: str | None, path: Path):
    """(reference rows of the loaded items, of one captioner (--captioner when the table holds several); the
    rows of that captioner whose (task, item_id) is no item of `items`; an example of them)."""
    import polars as pl

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
    import numpy as np
    import polars as pl

    if n < 1:
        raise UsageError(f"--per-task must be at least 1, got {n}")
    rng = np.random.default_rng(seed)
    parts = []
    for task in sorted(set(keys["task"].to_list())):
        ids = sorted(keys.filter(pl.col("task") == task)["item_id"].to_list())
        pick = sorted(rng.choice(len(ids), size=min(n, len(ids)), replace=False).tolist())
        parts.append(pl.DataFrame({"task": [task] * len(pick), "item_id": [ids[i] for i in pick]}))
    return pl.concat(parts)


def _reference_label(ref, path: Path, given: str | None) -> str:
    if given:
        return given
    judges = sorted(set(ref["judge"].drop_nulls().to_list())) if "judge" in ref.columns else []
    caps = sorted(set(ref["captioner"].drop_nulls().to_list())) if "captioner" in ref.columns else []
    label = ", ".join(judges) or path.name
    return f"{label} on {', '.join(caps)} captions" if caps else label


def run(args) -> int:
    import time

    import polars as pl
    import pyarrow as pa
    import pyarrow.compute as pc

    from capeval.engine.cli import terminal_text
    from capeval.engine.cli.judge import check_out, frames_for_judge, given_captions, protocol_and_items
    from capeval.engine.cli.judge_checks import build_judge, check_pairs
    from capeval.engine.judging.runner import run_judging
    from capeval.engine.metrics.validation import ValidationInputError, format_report, validate

    started = time.time()
    if args.tolerance is not None and not args.tolerance >= 0:
        raise UsageError(f"--tolerance must be >= 0, got {args.tolerance}")
    if args.resamples < 1:
        raise UsageError(f"--resamples must be at least 1, got {args.resamples}")
    if not 0 < args.confidence < 1:
        raise UsageError(f"--confidence must be within (0, 1), got {args.confidence}")
    for flag, path in (("--out", args.out), ("--verdicts", args.verdicts)):
        if path is not None:
            check_out(path, flag)
    table = reference_table(args.reference, args.protocol)  # a reference that does not fit: exit 2, nothing run
    params, protocol, items, bundled = protocol_and_items(args)
    reference, unknown = read_reference(args.reference, table, items)
    reference, unmatched, example = _select_reference(reference, items, args.captioner, args.reference)
    unmatched += unknown
    if unmatched:
        total = unmatched + reference.height
        print(f"[validate] warning: {unmatched} of {total} reference rows match no item of --items "
              f"({'e.g. ' + example + '; ' if example else ''}matched by task and item id): left out, counted in "
              f"counts.reference_rows_not_in_items", file=sys.stderr)
    judged_keys = reference.filter(pl.col("verdict") >= 0).select("task", "item_id").unique()
    if args.per_task is not None:
        judged_keys = sample_per_task(judged_keys, args.per_task, args.sample_seed)
        reference = reference.join(judged_keys, on=["task", "item_id"], how="semi")
    if judged_keys.height == 0:
        raise UsageError(f"--reference {args.reference}: no verdict for any of the {items.num_rows} items of --items")
    wanted = pc.is_in(pc.binary_join_element_wise(items.column("task"), items.column("item_id"), "\x1f"),
                      value_set=pa.array([f"{t}\x1f{i}" for t, i in judged_keys.iter_rows()], pa.string()))
    items = items.filter(wanted)  # exactly the reference's judged pairs
    captions = given_captions(args, items, bundled)
    check_pairs(items, captions, args.captions or args.items)
    frames = frames_for_judge(args, protocol, params, items)
    judge = build_judge(args.judge, args.judge_model, args.base_url, args.judge_option)
    try:
        requests = protocol.build_requests(items, captions, judge=judge.name, judge_revision=judge.revision,
                                           seeds=[args.seed], frames=frames, **params)
        print(f"[validate] {protocol.name}: judging the reference's {items.num_rows} items ({requests.num_rows} "
              f"first-step requests) with {judge.name}", file=sys.stderr)
        verdicts, summary = run_judging(requests, judge, cache_dir=args.cache, protocol=protocol,
                                        batch_size=args.batch_size, max_reasks=args.max_reasks,
                                        progress=not args.no_progress, return_summary=True, protocol_params=params)
    finally:
        judge.close()
    if args.verdicts is not None:
        from capeval.engine.store.segments import write_parquet_atomic

        write_parquet_atomic(verdicts, args.verdicts)
    try:
        report = validate(reference, pl.from_arrow(verdicts), protocol=protocol.name,
                          mode=params.get("mode", "strict"), tolerance=args.tolerance, n_resamples=args.resamples,
                          confidence=args.confidence)
    except ValidationInputError as exc:
        raise UsageError(f"--reference {args.reference}: {exc}") from None
    report["counts"] = {**report["counts"], "reference_rows_not_in_items": unmatched}
    report = {**report, "judge": {"name": judge.name, "revision": judge.revision, "backend": args.judge,
                                  "model": args.judge_model},
              "reference": {"label": _reference_label(reference, args.reference, args.reference_label),
                            "path": str(args.reference.resolve())},
              "inputs": {"items": str(args.items.resolve()),
                         "captions": None if args.captions is None else str(args.captions.resolve()),
                         "params": params},
              "judging": summary.as_dict(), "wall_s": round(time.time() - started, 3)}
    text = json.dumps(report, indent=2, default=str)
    if args.out is not None:
        tmp = args.out.with_name(f".{args.out.name}.tmp")
        tmp.write_text(text + "\n", encoding="utf-8")
        tmp.replace(args.out)
        print(f"[validate] wrote {args.out}", file=sys.stderr)
    print(text if args.json else terminal_text(format_report(report)))
    return 0
