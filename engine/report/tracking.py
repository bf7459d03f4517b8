"""Runs in the team's tracker: one run folder logged to MLflow or Weights & Biases (`capeval export RUN --to
mlflow|wandb`, and a sweep's `[options] tracking`, which logs its folder when the sweep finishes). docs/tracking.md.

What is logged, read from the run folder only (so a sweep and a later export log the same thing):

* one tracker run per result cell (per judge seed when a cell's judge ran several seeds): its parameters (dataset,
  captioner, prompt id, frame spec, protocol, judge, mode; each component's name, revision and params; the judge's
  seeds; the dataset's kind, digest and counts) and its metrics: each headline metric as the leaderboard shows it,
  its interval as two more metrics `<metric>_ci_low` and `<metric>_ci_high`, `n`, `n_no_verdict`, `n_videos`, and
  its cost (`cost_usd`, `judge_cost_usd`, `caption_cost_usd`, tokens, judge requests) where known;
* one run for the whole folder holding the sweep's name, file and capeval revision, the run's totals (cells, items,
  items without a verdict, USD) and the artifacts `run.json`, `results.csv` and `report.html` (rendered afresh).

MLflow: the cells are nested runs (`mlflow.parentRunId`) of the folder's run in one experiment. W&B: the cells
and the folder's run share one group; the folder's run has job type `capeval-run`, the cells `cell`.

Credentials never come from capeval: each tracker reads its own environment variables (MLFLOW_TRACKING_TOKEN,
MLFLOW_TRACKING_USERNAME/PASSWORD, WANDB_API_KEY). A tracking URI holding credentials is refused, every
parameter passes through capeval.engine.secrets.redact, and W&B is started without its metadata capture (it would
record the command line) and without console capture.

mlflow and wandb are optional extras (`capeval[mlflow]`, `capeval[wandb]`), imported only by the functions that
log to them.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import polars as pl

from capeval.engine.errors import AbortedError, UsageError
from capeval.engine.secrets import redact, redact_message
from capeval.engine.report.leaderboard import leaderboards
from capeval.engine.report.rundir import CELL_COLUMNS, RunData, load_run
from capeval.engine.tracking_spec import (DEFAULT_PROJECT, TrackingSpec, extra_missing, is_file_store,
                                          spec_problems)

#: the cost and size columns of the results table logged as each cell's metrics (when not null)
CELL_NUMBERS = ("n", "n_no_verdict", "n_videos", "judge_requests", "prompt_tokens", "cached_prompt_tokens",
                "completion_tokens", "reasoning_tokens", "judge_cost_usd", "caption_prompt_tokens",
                "caption_completion_tokens", "caption_cost_usd", "cost_usd", "cost_usd_cached")
_MLFLOW_PARAMS_PER_BATCH = 100  # MLflow's log_batch limit


@dataclass
class CellRun:
    """What one tracker run of a cell holds."""

    name: str
    params: dict[str, str]
    metrics: dict[str, float]


@dataclass
class RunContent:
    """What a run folder gives a tracker (read once, logged to either tracker the same way)."""

    name: str  # the sweep's name (the run folder's name when no record names one)
    run_dir: Path
    params: dict[str, str]
    metrics: dict[str, float]
    cells: list[CellRun]
    artifacts: list[Path]  # files to upload
    notes: list[str] = field(default_factory=list)  # what could not be included, and why


@dataclass
class Logged:
    """Where a run folder went: the tracker, a line saying where, and the folder run's id."""

    tracker: str
    where: str
    run_id: str
    cells: int
    notes: list[str] = field(default_factory=list)

    def line(self) -> str:
        return (f"logged {self.cells} cell(s) to {self.tracker}: {self.where} (run {self.run_id})"
                + "".join(f"\n  note: {n}" for n in self.notes))


def log_run(run_dir: str | Path, spec: TrackingSpec) -> Logged:
    """Log the run folder `run_dir` to the tracker `spec` names (module doc); raises UsageError when the folder
    has no metrics or the spec cannot be used, and AbortedError (its error in one line) when the tracker refuses
    the run or cannot be reached."""
    if problems := spec_problems(spec):
        raise UsageError("; ".join(f"tracking {name}: {why}" for name, why in problems))
    with tempfile.TemporaryDirectory(prefix="capeval-track-") as scratch:
        content = run_content(run_dir, Path(scratch))
        try:
            logged = _log_mlflow(content, spec) if spec.to == "mlflow" else _log_wandb(content, spec)
        except (UsageError, KeyboardInterrupt):
            raise
        except Exception as exc:  # noqa: BLE001 - the tracker's errors (refused, unreachable) are many kinds
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            raise AbortedError(f"{spec.to} did not take the run: {type(exc).__name__}: {redact_message(first)}; "
                               f"the run folder is unchanged") from exc
    logged.notes = content.notes + logged.notes
    return logged


def run_content(run_dir: str | Path, scratch: Path) -> RunContent:
    """The parameters, metrics and artifacts of a run folder; the report is rendered into `scratch`."""
    data = load_run(run_dir)
    if data.results.is_empty() or "value" not in data.results.columns:
        raise UsageError(f"{data.path}: no metrics to log (a caption-only run, or no cell finished)")
    record = data.records[-1] if data.records else {}
    config = record.get("config") or {}
    name = str(config.get("name") or data.path.resolve().name)
    notes: list[str] = []
    cells = _cells(data, record)
    artifacts = [p for p in (data.path / "run.json", data.path / "results.csv") if p.is_file()]
    try:
        from capeval.engine.report.html import write_report  # deferred: plotting modules, only for the artifact

        artifacts.append(write_report(data.path, scratch / "report.html"))
    except Exception as exc:  # noqa: BLE001 - the numbers are complete without the report; say why it is missing
        notes.append(f"report.html not logged: {type(exc).__name__}: {exc}")
    return RunContent(name, data.path, _run_params(data.path, record, name), _run_metrics(record), cells, artifacts,
                      notes)


def _run_params(run_dir: Path, record: dict, name: str) -> dict[str, str]:
    params = {"sweep": name, "run_dir": str(run_dir.resolve()), "command": record.get("command"),
              "sweep_file": record.get("sweep_file"), "status": record.get("status"),
              "capeval.git_revision": (record.get("capeval") or {}).get("git_revision"),
              "capeval.version": (record.get("versions") or {}).get("capeval"),
              "finished_at": record.get("finished_at")}
    return _text_params({k: v for k, v in params.items() if v is not None})


def _run_metrics(record: dict) -> dict[str, float]:
    counts = record.get("counts_by_status") or {}
    cost = record.get("cost") or {}
    values = {"cells": (counts.get("cells") or {}).get("total"),
              "items": sum((counts.get("items") or {}).values()) if counts.get("items") else None,
              "items_without_verdict": counts.get("items_without_verdict"),
              "judge_requests_sent": (counts.get("judge_requests") or {}).get("sent"),
              "wall_s": record.get("wall_s"), "total_usd": cost.get("total_usd"),
              "paid_in_run_usd": cost.get("paid_in_run_usd"), "reused_usd": cost.get("reused_usd")}
    return _numbers(values)


def _cells(data: RunData, record: dict) -> list[CellRun]:
    """One CellRun per leaderboard row (a cell, or a cell's judge seed), with its labels looked up in the results."""
    results = data.results.with_columns(pl.col(c).cast(pl.String).fill_null("-") for c in CELL_COLUMNS + ["seed"]
                                        if c in data.results.columns)
    config = record.get("config") or {}
    specs = {kind: {(s.get("label") or s.get("name")): s for s in config.get(kind) or []}
             for kind in ("captioners", "protocols", "judges")}
    datasets = record.get("datasets") or {}
    components = record.get("components") or {}
    out = []
    for board in leaderboards(data.results, n_videos=data.n_videos()):
        for row in board.table.iter_rows(named=True):
            rows = results.filter(pl.col("protocol") == board.protocol) if "protocol" in results.columns else results
            for column in board.system_columns:
                if column in rows.columns:
                    rows = rows.filter(pl.col(column) == str(row[column]))
            first = rows.row(0, named=True) if rows.height else {}
            labels = {c: first.get(c, row.get(c, "-")) for c in CELL_COLUMNS}
            labels["protocol"] = labels.get("protocol") or board.protocol
            params: dict[str, Any] = dict(labels)
            if "seed" in board.system_columns:
                params["seed"] = row["seed"]
            for key in ("mode", "cell_status"):
                if first.get(key) is not None:
                    params[key] = first[key]
            params.update(_component("captioner", specs["captioners"].get(labels["captioner"]),
                                     (components.get("captioners") or {}).get(labels["captioner"])))
            params.update(_component("protocol", specs["protocols"].get(labels["protocol"]), None))
            params.update(_component("judge", specs["judges"].get(labels["judge"]),
                                     (components.get("judges") or {}).get(labels["judge"])))
            dataset = datasets.get(labels["dataset"]) or {}
            params.update({f"dataset.{k}": dataset[k] for k in ("kind", "digest", "n_items", "n_videos", "path")
                           if dataset.get(k) is not None})
            metrics: dict[str, Any] = {}
            for m in board.metrics:
                metrics.update({m: row[m], f"{m}_ci_low": row[f"{m}_low"], f"{m}_ci_high": row[f"{m}_high"]})
            metrics.update({c: row[c] if c in row else first.get(c) for c in CELL_NUMBERS})
            title = " ".join(str(labels[c]) for c in ("captioner", "prompt_id", "frame_spec", "protocol", "judge"))
            out.append(CellRun(title + (f" seed={row['seed']}" if "seed" in board.system_columns else ""),
                               _text_params(params), _numbers(metrics)))
    return out


def _component(kind: str, spec: dict | None, revision: str | None) -> dict[str, Any]:
    """A captioner's, protocol's or judge's parameters as `<kind>.name`, `<kind>.params.<key>`, ... (its sweep
    file entry as run.json records it; None for a component the record does not hold, e.g. captions from a file)."""
    out: dict[str, Any] = {f"{kind}.revision": revision} if revision else {}
    if not spec:
        return out
    out[f"{kind}.name"] = spec.get("name")
    for key, value in (spec.get("params") or {}).items():
        out[f"{kind}.params.{key}"] = value
    if kind == "judge":
        out[f"{kind}.seeds"] = spec.get("seeds")
    if kind == "captioner":
        out.update({f"{kind}.{k}": spec.get(k) for k in ("max_tokens", "timestamps", "frame_size")
                    if spec.get(k) is not None})
    return out


def _text_params(params: dict[str, Any]) -> dict[str, str]:
    """Parameters as the trackers store them: text (JSON for anything but text), credentials redacted, keys in the
    characters both trackers accept."""
    clean = redact(params)
    return {tracker_key(k): v if isinstance(v, str) else json.dumps(v, sort_keys=True, default=str)
            for k, v in clean.items() if v is not None}


def _numbers(values: dict[str, Any]) -> dict[str, float]:
    """The finite numbers among `values` (a null value, an undefined metric, is not logged), keys made safe."""
    return {tracker_key(k): float(v) for k, v in values.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)}


def tracker_key(name: str) -> str:
    """A parameter or metric name both trackers accept (MLflow: letters, digits, `_-. :/`; no `/` here, so a
    metric never becomes a folder of another metric's file in MLflow's file store)."""
    return re.sub(r"[^\w\-. :]", "_", str(name)).strip() or "_"


# --- MLflow -------------------------------------------------------------------------------------------------------

def mlflow_uri(spec: TrackingSpec) -> str:
    """The tracking URI: the spec's, else $MLFLOW_TRACKING_URI, else the file store ./mlruns (MLflow's own default
    is a SQLite database, which needs SQLAlchemy, not part of the mlflow extra)."""
    return spec.uri or os.environ.get("MLFLOW_TRACKING_URI") or (Path.cwd() / "mlruns").resolve().as_uri()


@contextlib.contextmanager
def _file_store_allowed(uri: str) -> Iterator[None]:
    """MLflow 3 refuses its file store unless MLFLOW_ALLOW_FILE_STORE is set; naming a file store (or leaving the
    default) is that choice, so it is allowed while capeval logs, and the variable restored afterwards."""
    if not is_file_store(uri):
        yield
        return
    before = os.environ.get("MLFLOW_ALLOW_FILE_STORE")
    os.environ["MLFLOW_ALLOW_FILE_STORE"] = "true"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("MLFLOW_ALLOW_FILE_STORE", None)
        else:
            os.environ["MLFLOW_ALLOW_FILE_STORE"] = before


def _log_mlflow(content: RunContent, spec: TrackingSpec) -> Logged:
    try:
        from mlflow.entities import Metric, Param, RunTag  # deferred: optional extra
        from mlflow.tracking import MlflowClient  # deferred: optional extra
    except ImportError:
        raise UsageError(extra_missing("mlflow")
                         or "mlflow cannot be imported: pip install 'capeval[mlflow]'") from None
    import time

    uri = mlflow_uri(spec)
    experiment_name = spec.experiment or content.name
    now = int(time.time() * 1000)

    def batch(client, run_id: str, params: dict[str, str], metrics: dict[str, float], tags: dict[str, str]):
        items = list(params.items())
        metric_rows = [Metric(k, v, now, 0) for k, v in metrics.items()]
        tag_rows = [RunTag(k, v) for k, v in tags.items()]
        for start in range(0, max(len(items), 1), _MLFLOW_PARAMS_PER_BATCH):
            chunk = [Param(k, v) for k, v in items[start:start + _MLFLOW_PARAMS_PER_BATCH]]
            client.log_batch(run_id, metrics=metric_rows if start == 0 else [], params=chunk,
                             tags=tag_rows if start == 0 else [])

    with _file_store_allowed(uri):
        client = MlflowClient(tracking_uri=uri)
        experiment = client.get_experiment_by_name(experiment_name)
        experiment_id = experiment.experiment_id if experiment else client.create_experiment(experiment_name)
        parent = client.create_run(experiment_id, run_name=content.name, tags={"capeval.kind": "run"})
        parent_id = parent.info.run_id
        try:
            for cell in content.cells:
                child = client.create_run(experiment_id, run_name=cell.name,
                                          tags={"mlflow.parentRunId": parent_id, "capeval.kind": "cell"})
                batch(client, child.info.run_id, cell.params, cell.metrics, {})
                client.set_terminated(child.info.run_id)
            batch(client, parent_id, content.params, content.metrics, {})
            for path in content.artifacts:
                client.log_artifact(parent_id, str(path))
        except BaseException:
            client.set_terminated(parent_id, status="FAILED")
            raise
        client.set_terminated(parent_id)
    return Logged("mlflow", f"experiment {experiment_name!r} at {uri}", parent_id, len(content.cells))


# --- Weights & Biases ---------------------------------------------------------------------------------------------

def _log_wandb(content: RunContent, spec: TrackingSpec) -> Logged:
    try:
        import wandb  # deferred: optional extra
    except ImportError:
        raise UsageError(extra_missing("wandb")
                         or "wandb cannot be imported: pip install 'capeval[wandb]'") from None

    project = spec.project or DEFAULT_PROJECT
    if spec.dir:
        Path(spec.dir).mkdir(parents=True, exist_ok=True)
    # no console capture (the command's own output), no metadata (it holds the command line), no system sampling
    settings = wandb.Settings(console="off", x_disable_meta=True, x_disable_stats=True, save_code=False,
                              disable_git=True, silent=True)
    group = f"{content.name} {content.params.get('finished_at', '')}".strip()
    common = {"project": project, "entity": spec.entity, "mode": spec.mode, "dir": spec.dir, "group": group,
              "settings": settings, "reinit": "create_new"}
    common = {k: v for k, v in common.items() if v is not None}
    for cell in content.cells:
        run = wandb.init(name=cell.name, job_type="cell", config=cell.params, **common)
        try:
            run.summary.update(cell.metrics)
        finally:
            run.finish()
    run = wandb.init(name=content.name, job_type="capeval-run", config=content.params, **common)
    try:
        run.summary.update(content.metrics)
        artifact = wandb.Artifact(re.sub(r"[^\w\-.]", "_", f"capeval-{content.name}"), type="capeval-run")
        for path in content.artifacts:
            artifact.add_file(str(path), name=path.name)
        run.log_artifact(artifact)
        run_id, offline = run.id, run.settings.mode == "offline" or run.offline
        folder = run.dir
    finally:
        run.finish()
    where = f"project {project!r}" + (f" of {spec.entity!r}" if spec.entity else "")
    if offline:
        where += f", offline under {Path(folder).parent.parent} (upload: wandb sync)"
    return Logged("wandb", where, run_id, len(content.cells))
