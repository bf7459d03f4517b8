"""`capeval compare RUN_DIR [--a X --b Y] [--json]`: paired differences of headline metrics between systems
judged on the same videos, with paired bootstrap CIs, p-values and Holm's correction.

`capeval compare RUN_DIR --across protocols|judges [--json]`: the protocols (or judges) that scored the same systems
held against each other: rank agreement (Kendall tau_b) and length sensitivity (engine/metrics/across.py)."""

from __future__ import annotations

import json
from pathlib import Path

from capeval.engine.errors import UsageError
from capeval.engine.report.across import across_for_run, across_json, format_across
from capeval.engine.report.compare import FACTORS, FIXED, compare_run, format_comparison, selector_problems
from capeval.engine.report.rundir import load_run


#: what every row's `diff` is, said in the JSON output
DIFF_MEANING = ("a_value - b_value: a is the --a side, else the system that sorts first over the factors the two "
                "differ in (frame specs by frame count, other values as text); the same direction for every judge")


def register(sub) -> None:
    p = sub.add_parser("compare", help="paired differences between captioners / prompts / frame specs of a run")
    p.add_argument("run_dir", type=Path,
                   help="a sweep's output folder (verdicts/, metrics/), or one verdict table (.parquet)")
    p.add_argument("--a", help="systems on the left of a - b: 'captioner=X,prompt_id=Y' or a bare value (e.g. a "
                              "prompt id); default: the system that sorts first (frame specs by frame count)")
    p.add_argument("--b", help="systems on the right of a - b, same syntax; factors neither side names are held "
                              "equal")
    p.add_argument("--all-pairs", action="store_true",
                   help="every pair of systems, not only those differing in one factor")
    p.add_argument("--resamples", type=int, default=2000, help="paired bootstrap resamples over videos")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--confidence", type=float, default=0.95)
    p.add_argument("--mode", action="append", default=[], metavar="PROTOCOL=MODE",
                   help="metric mode per protocol (PROTOCOL=MODE, e.g. <name>=paper, ...); default: the run's")
    p.add_argument("--across", choices=["protocols", "judges"],
                   help="instead of pairs of systems: rank agreement of the systems between protocols (or judges) "
                        "that scored the same ones, and each one's length sensitivity with length-controlled scores")
    p.add_argument("--reference-words", type=float, metavar="N",
                   help="with --across: the caption length (words) of the length-controlled scores; default: the "
                        "median word count of the run's judged captions")
    p.add_argument("--json", action="store_true", help="print JSON rows instead of text")
    p.add_argument("--out", type=Path, help="also write the table (.csv or .parquet)")
    p.add_argument("--debug", action="store_true", help="show tracebacks")
    p.set_defaults(func=run)


def run_modes(results, overrides: list[str]) -> dict[str, str]:
    """protocol -> mode: the `mode` column of the run's results, then --mode overrides."""
    modes = {}
    if results.height and "mode" in results.columns and "protocol" in results.columns:
        for r in results.select("protocol", "mode").drop_nulls().unique(subset=["protocol"], keep="first").iter_rows():
            modes[r[0]] = r[1]
    for item in overrides:
        proto, sep, mode = item.partition("=")
        if not sep or not mode:
            raise ValueError(f"--mode expects PROTOCOL=MODE, got {item!r}")
        modes[proto.strip()] = mode.strip()
    return modes


def run(args) -> int:
    if args.resamples < 1:
        raise ValueError(f"--resamples must be >= 1, got {args.resamples}")
    data = load_run(args.run_dir)
    if args.across or args.reference_words is not None:
        return run_across(args, data)
    if data.verdicts is None:
        raise FileNotFoundError(f"{args.run_dir}/verdicts holds no verdict segments: nothing to compare")
    systems = data.verdicts.select([c for c in FIXED + FACTORS if c in data.verdicts.columns]).unique()
    problems = selector_problems(systems, args.a, "--a") + selector_problems(systems, args.b, "--b")
    if problems:  # a name the run does not have: say which names it has (exit USAGE, as for no match)
        raise UsageError("\n".join(problems))
    frame = compare_run(data.verdicts, a=args.a, b=args.b, all_pairs=args.all_pairs,
                        modes=run_modes(data.results, args.mode), n_resamples=args.resamples, seed=args.seed,
                        confidence=args.confidence)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        frame.write_parquet(args.out) if args.out.suffix == ".parquet" else frame.write_csv(args.out)
    if args.json:
        print(json.dumps({"comparisons": frame.to_dicts(), "n_resamples": args.resamples, "diff": DIFF_MEANING,
                          "multiple_comparisons": f"Holm over {int(frame['p_value'].is_not_null().sum())} tests"},
                         indent=1))
    else:
        print(format_comparison(frame))
    if frame.is_empty() and (args.a or args.b):
        return 2  # the selectors matched no pair: a usage problem worth a non-zero exit
    return 0


def run_across(args, data) -> int:
    """--across: text or JSON of capeval.engine.report.across; exit 2 when no two protocols (judges) share a system."""
    if not args.across:
        raise UsageError("--reference-words goes with --across protocols|judges")
    given = [o for o, v in (("--a", args.a), ("--b", args.b), ("--all-pairs", args.all_pairs), ("--out", args.out))
             if v]
    if given:
        raise UsageError(f"--across holds protocols or judges against each other over every system; "
                         f"{', '.join(given)} select pairs of systems and do not apply (use --json for the tables)")
    modes = run_modes(data.results, args.mode)
    result = across_for_run(data, args.across, modes=modes, reference_words=args.reference_words,
                            n_resamples=args.resamples, seed=args.seed, confidence=args.confidence)
    print(json.dumps(across_json(result, args.resamples), indent=1) if args.json else format_across(result))
    return 0 if result.agreement.height else 2  # nothing held against anything: the run has one protocol (judge)
