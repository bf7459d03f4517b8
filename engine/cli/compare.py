"""`capeval compare RUN_DIR [--a X --b Y] [--json]`: paired differences of headline metrics between systems
judged on the same videos, with paired bootstrap CIs, p-values and Holm's correction.

`capeval compare RUN_DIR --across protocols|judges [--json]`: the protocols (or judges) that scored the same systems
held against each other: rank agreement (Kendall tau_b) and length sensitivity (engine/metrics/across.py).

`capeval compare --frames A B [--json]`: whether two systems saw identical frames, video by video, and where they
differ (frame indices or timestamps, sizes, pixels): A and B are run folders, or selections of one run's systems
(`capeval compare RUN --frames 'frame_spec=uniform:8' 'frame_spec=linspace:8'`); engine/report/frames_ledger.py."""

from __future__ import annotations

import json
from pathlib import Path

from capeval.engine.errors import UsageError
from capeval.engine.report.across import across_for_run, across_json, format_across
from capeval.engine.report.compare import FACTORS, FIXED, compare_run, format_comparison, selector_problems
from capeval.engine.report.frames_ledger import (AmbiguousSide, Side, caption_rows, compare_sides,
                                                 format_frame_comparison, select_rows)
from capeval.engine.report.rundir import load_run
from capeval.engine.safetext import json_for_terminal


#: what every row's `diff` is, said in the JSON output
DIFF_MEANING = ("a_value - b_value: a is the --a side, else the system that sorts first over the factors the two "
                "differ in (frame specs by frame count, other values as text); the same direction for every judge")


def register(sub) -> None:
    p = sub.add_parser("compare", help="paired differences between captioners / prompts / frame specs of a run")
    p.add_argument("run_dir", type=Path, nargs="?",
                   help="a sweep's output folder (verdicts/, metrics/), or one verdict table (.parquet); with "
                        "--frames, the run whose systems A and B select (optional when A and B are run folders)")
    p.add_argument("--frames", nargs=2, metavar=("A", "B"),
                   help="whether A and B saw identical frames, per video, and where they differ (frame indices or "
                        "timestamps, sizes, pixels): each a run folder, or a selection of RUN_DIR's systems "
                        "('captioner=X,frame_spec=Y' or a bare value)")
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
    if args.frames:
        return run_frames(args)
    if args.run_dir is None:
        raise UsageError("capeval compare needs a run folder (or --frames A B)")
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


def run_frames(args) -> int:
    """--frames A B: text or JSON of capeval.engine.report.frames_ledger.compare_sides; exit 0 whether or not the
    frames are identical (the output says which), 2 when a side names nothing."""
    given = [o for o, v in (("--a", args.a), ("--b", args.b), ("--all-pairs", args.all_pairs), ("--across", args.across),
                            ("--out", args.out)) if v]
    if given:
        raise UsageError(f"--frames compares the frames two systems saw; {', '.join(given)} do not apply")
    base = caption_rows(args.run_dir) if args.run_dir is not None else None
    sides = []
    for name in args.frames:
        if Path(name).exists():
            sides.append(Side(name, caption_rows(name)))
            continue
        if base is None:
            raise UsageError(f"--frames {name!r}: no such run folder (a selection of systems needs RUN_DIR first)")
        rows = select_rows(base, name)
        if not rows.height:
            systems = sorted({",".join(f"{c}={r[c]}" for c in ("captioner", "prompt_id", "frame_spec"))
                              for r in base.iter_rows(named=True)})
            raise UsageError(f"--frames {name!r} matches no caption of {args.run_dir}; it holds "
                             f"{', '.join(systems[:8]) or 'no captions'}" + (" ..." if len(systems) > 8 else ""))
        sides.append(Side(name, rows))
    try:
        result = compare_sides(*sides)
    except AmbiguousSide as exc:
        raise UsageError(str(exc)) from None
    if args.json:
        print(json_for_terminal(result, default=str, indent=1))
    else:
        print(format_frame_comparison(result))
    return 0 if result["videos"] else 2
