"""`capeval export RUN --to mlflow|wandb`: log a run folder to the team's tracker, one tracker run per cell with its
parameters, headline metrics and intervals (`<metric>_ci_low`, `<metric>_ci_high`) and cost, and the folder's
run.json, results.csv and HTML report as artifacts (engine/report/tracking.py; docs/tracking.md). A sweep's
`[options] tracking` does the same when the sweep finishes.

Exit codes (engine/exitcodes.py): 0 logged; 2 not a run folder, a run without metrics (caption-only), a setting of
the other tracker, a URI holding credentials, or the tracker's extra not installed; 4 the tracker refused the run or
could not be reached (its error in one line, the traceback with --debug)."""

from __future__ import annotations

from pathlib import Path

from capeval.engine.errors import UsageError
from capeval.engine.report.tracking import log_run
from capeval.engine.tracking_spec import DEFAULT_PROJECT, TRACKERS, WANDB_MODES, TrackingSpec, spec_problems


def register(sub) -> None:
    p = sub.add_parser("export", help="log a run folder to MLflow or Weights & Biases (parameters and metrics per "
                                      "cell, run.json and the report as artifacts)",
                       description="Log a run folder to a tracker: one run per cell (parameters, headline metrics "
                                   "with <metric>_ci_low/<metric>_ci_high, cost) under one run of the folder "
                                   "(totals; run.json, results.csv and report.html as artifacts). Credentials come "
                                   "from the tracker's own environment variables (MLFLOW_TRACKING_TOKEN, "
                                   "WANDB_API_KEY), never from the command line.")
    p.add_argument("run_dir", type=Path, metavar="RUN", help="a sweep's output folder (results.parquet, run.json)")
    p.add_argument("--to", required=True, choices=TRACKERS, help="the tracker")
    mlflow = p.add_argument_group("mlflow")
    mlflow.add_argument("--uri", help="tracking URI (default: $MLFLOW_TRACKING_URI, else the file store ./mlruns); "
                                      "a path or file: URI is a local file store")
    mlflow.add_argument("--experiment", help="experiment name (default: the sweep's name)")
    wandb = p.add_argument_group("wandb")
    wandb.add_argument("--project", help=f"project (default: {DEFAULT_PROJECT!r})")
    wandb.add_argument("--entity", help="team or user (default: the API key's default entity)")
    wandb.add_argument("--mode", choices=WANDB_MODES,
                       help="online (upload now) or offline (files under --dir, uploaded later with `wandb sync`); "
                            "default: $WANDB_MODE, else online")
    wandb.add_argument("--dir", help="folder for W&B's local files (default: $WANDB_DIR, else ./wandb)")
    p.add_argument("--debug", action="store_true", help="show tracebacks")
    p.set_defaults(func=run)


def run(args) -> int:
    spec = TrackingSpec(args.to, uri=args.uri, experiment=args.experiment, project=args.project, entity=args.entity,
                        mode=args.mode, dir=args.dir)
    if problems := spec_problems(spec):  # e.g. --uri with --to wandb: said, not ignored
        raise UsageError("; ".join(f"--{name}: {why}" if name != "to" else why for name, why in problems))
    logged = log_run(args.run_dir, spec.resolved(Path.cwd()))
    print(logged.line())
    return 0
