"""CAPability's own commands (`CapabilityProtocol.cli_commands`):
`capeval capability score`: CAPability metrics of one model's released (or our own) judgment files.
`capeval capability kt`: KT beside QA accuracy and F1 from CAPability-QA verdicts (capeval construct capability-qa)."""

from __future__ import annotations

import sys
from pathlib import Path

import polars as pl

from capeval.engine.errors import UsageError
from capeval.engine.protocols.base import CommandTools

from .official import OFFICIAL_MAX_ALLOW_MISSING
from .release import judgments_folder_problem, load_items, load_judgments


def register(subparsers, tools: CommandTools) -> None:
    cap = subparsers.add_parser("capability", help="CAPability benchmark tools")
    sub = cap.add_subparsers(dest="capability_command", metavar="SUBCOMMAND")
    score = sub.add_parser("score", help="precision / recall / F1 / hit rate per task and their average, from "
                                         "annotations and one model's judgment directory")
    score.add_argument("--annotations", required=True, type=Path, help="annotations/ with <task>.jsonl files")
    score.add_argument("--judgments", required=True, type=Path, help="ONE model's judgments/<model>/ directory")
    score.add_argument("--out", required=True, type=Path, help="CSV to write (one row per task plus avg)")
    score.add_argument("--mode", choices=("official", "strict"), default="official",
                       help="official: items without a judgment are left out of the denominator (as eval.py); "
                            "strict: they count as misses")
    score.add_argument("--resamples", type=int, default=1000, help="bootstrap resamples of videos (0: no CIs)")
    score.add_argument("--seed", type=int, default=0)
    score.add_argument("--unknown-ids", choices=("error", "count"), default="error",
                       help="a judgment for a file_id not annotated for its task: fail, or skip and count it")
    score.add_argument("--debug", action="store_true", help="show tracebacks")
    score.set_defaults(func=lambda args: run_score(args, tools))
    kt = sub.add_parser("kt", help="KT (know but cannot tell) beside QA accuracy and F1, per task and averaged, from "
                                   "QA verdicts (capeval construct capability-qa) and the same model's caption "
                                   "verdicts")
    kt.add_argument("--qa-verdicts", required=True, type=Path, help="qa_verdicts.parquet of capeval construct "
                    "capability-qa")
    kt.add_argument("--caption-verdicts", required=True, type=Path, help="CAPability caption verdicts: a run folder, "
                    "a verdicts Parquet or the release's judgments/<model>/")
    kt.add_argument("--annotations", type=Path, help="annotations/ (needed with released judgments)")
    kt.add_argument("--mode", choices=("official", "strict"), default="official",
                    help="caption metrics' mode for F1 and KT (official: items without a caption verdict are left out)")
    kt.add_argument("--out", type=Path, help="CSV to write (one row per caption group and task)")
    kt.add_argument("--resamples", type=int, default=1000, help="bootstrap resamples of videos (0: no CIs)")
    kt.add_argument("--seed", type=int, default=0)
    kt.add_argument("--debug", action="store_true", help="show tracebacks")
    kt.set_defaults(func=run_kt)
    cap.set_defaults(func=lambda args: (cap.print_help(), 2)[1])


def run_kt(args) -> int:
    from .construction import load_caption_verdicts  # deferred: construction machinery

    from .kt import format_kt_table, kt_table, kt_wide  # deferred: numba bootstrap kernels

    if not args.qa_verdicts.is_file():
        raise UsageError(f"--qa-verdicts {args.qa_verdicts}: not found")
    if not args.caption_verdicts.exists():
        raise UsageError(f"--caption-verdicts {args.caption_verdicts}: not found")
    qa = pl.read_parquet(args.qa_verdicts)
    caption = load_caption_verdicts(args.caption_verdicts, args.annotations)
    try:
        table = kt_wide(kt_table(qa, caption, mode=args.mode, n_resamples=args.resamples, seed=args.seed))
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    print(format_kt_table(table, mode=args.mode))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        table.write_csv(args.out)
        print(f"wrote {args.out}")
    return 0


def score_table(annotations: Path, judgments: Path, *, mode: str = "official", resamples: int = 1000,
                seed: int = 0, unknown_ids: str = "error"):
    """The CLI's CSV as a Polars frame: dimension, precision, recall, f1, hit_rate, their CIs, counts, the mode
    that made it and a note saying why a value is empty (0/0)."""
    from .metrics import METRICS, compute_metrics, wide  # deferred: numba bootstrap kernels

    items = load_items(annotations)
    loaded = load_judgments(judgments, items, on_unknown=unknown_ids)
    metrics = compute_metrics(loaded.verdicts, items=items, n_resamples=resamples, seed=seed, mode=mode)
    table = wide(metrics).rename({"task": "dimension"})
    book = loaded.counts.select("task", "n_items", "n_duplicates", "n_unknown")
    book = pl.concat([book, book.select(pl.lit("avg").alias("task"), pl.exclude("task").sum())])
    table = table.join(book.rename({"task": "dimension"}), on="dimension", how="left", maintain_order="left")
    cis = [f"{m}_ci_{s}" for m in METRICS for s in ("low", "high")]
    counts = ["n", "n_items", "n_no_verdict", "n_missing", "n_failed", "n_duplicates", "n_unknown"]
    return table.select("dimension", *METRICS, *cis, *counts, "mode", "note")


def run_score(args, tools: CommandTools) -> int:
    problem = judgments_folder_problem(args.judgments)
    if problem:
        raise UsageError(f"--judgments {args.judgments}: {problem}")
    table = score_table(args.annotations, args.judgments, mode=args.mode, resamples=args.resamples,
                        seed=args.seed, unknown_ids=args.unknown_ids)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    table.write_csv(args.out)
    print(_leaderboard(table, args.judgments.name, tools))
    print(_notes(table), file=sys.stderr)
    print(f"wrote {args.out}")
    return 0


def _leaderboard(table, model: str, tools: CommandTools) -> str:
    """The leaderboard every scoring command prints, with the judged model as the captioner, its per-dimension
    breakdown below it (the counts per dimension are in the CSV)."""
    return tools.leaderboards(table.with_columns(pl.lit(model).alias("captioner")), protocol="capability")


def _unfinished_rounds(per_task) -> list[str]:
    """Official mode, released judgments: a task with more items unjudged than the official script leaves behind.
    eval.py re-asks in rounds until at most max_allow_missing items are missing (427-468), so such files are not
    where an official run ends: the figures of an official rerun may differ."""
    k = OFFICIAL_MAX_ALLOW_MISSING
    return [f"note: {d}: {n} items have no judgment, more than the official max_allow_missing ({k}): the official "
            f"eval.py would re-ask them in another retry round (eval.py:427-468) instead of leaving them out, so "
            f"these judgments are not the end of an official run and its figures for {d} may differ."
            for d, n in zip(per_task["dimension"], per_task["n_no_verdict"]) if n > k]


def _notes(table) -> str:
    avg = table.filter(table["dimension"] == "avg").row(0, named=True)
    notes = []
    if avg["n_no_verdict"]:
        per = table.filter((table["dimension"] != "avg") & (table["n_no_verdict"] > 0))
        detail = ", ".join(f"{d} {n}" for d, n in zip(per["dimension"], per["n_no_verdict"]))
        how = ("left out of the denominators, as the official eval.py does" if avg["mode"] == "official"
               else "counted as misses (strict mode)")
        notes.append(f"note: {avg['n_no_verdict']} verdict rows have no judgment ({detail}); {how}.")
        if avg["mode"] == "official":
            notes += _unfinished_rounds(per)
    if avg["n_duplicates"]:
        notes.append(f"note: {avg['n_duplicates']} duplicate judgments; the last one per file_id is kept (as eval.py).")
    for r in table.filter(table["note"].is_not_null() & (table["note"].str.strip_chars() != "")).iter_rows(named=True):
        notes.append(f"note: {r['dimension']}: {r['note']}.")
    if avg["n_unknown"]:
        notes.append(f"note: {avg['n_unknown']} judgments for file_ids not in the annotations were skipped.")
    return "\n".join(notes) or "note: every annotated item has a judgment."
