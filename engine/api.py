"""The public Python API, for notebooks and scripts: `capeval.sweep`, `capeval.judge` and `capeval.load_run`.

Each is a thin front over the library functions the `capeval` command runs (capeval.engine.sweep.runner.run_sweep,
capeval.engine.judging.runner.run_judging, capeval.engine.report.rundir.load_run): the same caches, keys and run
folders, so a notebook and the command line share their work. Tables come back as Polars frames; `.to_pandas()`
(or `load_run(..., pandas=True)`) converts them when pandas is installed (the optional extra `capeval[pandas]`).
docs/api.md shows them in use.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, Literal, Mapping, Sequence, TypeVar, overload

import polars as pl
import pyarrow as pa

from capeval.engine.datasets.video_ids import with_dataset_video_ids
from capeval.engine.inputs import read_captions, read_items
from capeval.engine.judging.backends import make_judge
from capeval.engine.judging.runner import run_judging
from capeval.engine.judging.summary import JudgingSummary
from capeval.engine.metrics.reasons import explain_nulls
from capeval.engine.registry import lookup
from capeval.engine.report import rundir
from capeval.engine.sweep.config import load_sweep
from capeval.engine.sweep.results import SweepResult
from capeval.engine.sweep.runner import run_sweep
from capeval.engine.sweep.validation import protocol_param_problems, writable_problem

if TYPE_CHECKING:
    import pandas as pd  # optional: only to_pandas() needs it

__all__ = ["JudgeResult", "RunTables", "judge", "load_run", "sweep"]

Frame = TypeVar("Frame")  # polars.DataFrame, or pandas.DataFrame after to_pandas()


@dataclass(frozen=True)
class RunTables(Generic[Frame]):
    """The tables of a run folder (or of one verdict file that `capeval judge --out` wrote), each None when the run
    has none. `results`: one row per metric of each cell of the sweep (empty for a verdict file); `metrics`: every
    committed cell's metric rows with its `cell_key` and `cell_status`; `verdicts`: one row per judged request with
    the cell's labels; `captions`: one row per caption key; `items`: the sweep's items, reloaded from its sweep file
    (None when the file or a synthetic dataset's videos are gone)."""

    path: Path
    results: Frame
    metrics: Frame | None
    verdicts: Frame | None
    captions: Frame | None
    items: Frame | None

    def to_pandas(self) -> RunTables[pd.DataFrame]:
        """The same tables as pandas DataFrames (needs pandas and pyarrow)."""
        _require_pandas()
        return replace(self, **{f.name: _to_pandas(getattr(self, f.name)) for f in fields(self) if f.name != "path"})


@dataclass(frozen=True)
class JudgeResult(Generic[Frame]):
    """What `judge` gives back: `verdicts` (one row per request: verdict, parse_status, the judge's answer),
    `metrics` (the protocol's metrics with bootstrap CIs; a metric without verdicts is null with its reason) and
    `summary` (requests sent, cached, re-asked; wall time)."""

    verdicts: Frame
    metrics: Frame
    summary: JudgingSummary

    def to_pandas(self) -> JudgeResult[pd.DataFrame]:
        """The same result with pandas DataFrames (needs pandas and pyarrow)."""
        _require_pandas()
        return replace(self, verdicts=_to_pandas(self.verdicts), metrics=_to_pandas(self.metrics))


def sweep(path: str | Path, out: str | Path | None = None, *, progress: bool = False,
          accept_failures: bool = False, max_failure_share: float = 0.0, verbose: bool = False) -> SweepResult:
    """Run the sweep file at `path` into the run folder `out` (default runs/<sweep name>), as `capeval sweep` does:
    finished cells are skipped, a rerun resumes. Returns the SweepResult: `results` (Polars, one row per metric of
    each cell), cell counts, item accounting, `exit_code` (0, or 3 when more than `max_failure_share` of the items
    have no verdict) and `out_dir`. Raises SweepFileError listing every problem of the file, ValueError when `out`
    cannot be written, AbortedError when the run cannot go on (lock held, auth refused, disk full)."""
    config = load_sweep(path)
    folder = Path(out) if out is not None else Path("runs") / config.name
    if problem := writable_problem(folder):
        raise ValueError(f"output folder {problem}")
    return run_sweep(config, folder, progress=progress, accept_failures=accept_failures,
                     max_failure_share=max_failure_share, verbose=verbose)


def judge(protocol: str, items: pa.Table | pl.DataFrame | str | Path,
          captions: pa.Table | pl.DataFrame | str | Path, *, judge: str = "local",
          judge_options: Mapping[str, Any] | None = None, params: Mapping[str, Any] | None = None,
          seeds: Sequence[int] = (0,), frames: pa.Table | None = None, cache: str | Path = ".capeval/judge-cache",
          n_resamples: int = 1000, progress: bool = False, captions_format: str | None = None,
          captions_id_field: str | None = None) -> JudgeResult[pl.DataFrame]:
    """Judge `captions` of `items` with `protocol` (a registered protocol's name, `capeval list`) and the
    judge backend `judge` built with `judge_options` (e.g. {"model": ..., "base_url": ...}), as `capeval judge`
    does: requests go through the judgment cache `cache`, so a repeated call sends nothing. `items` and `captions`
    are Arrow tables, Polars frames or files (JSONL/CSV/Parquet, docs/inputs.md); `params` are protocol params
    (mode, prompts, ...), `seeds` one trial each. A protocol whose judge sees frames (a multimodal judge) needs
    `frames`, a FRAMES table. A captions file written by another tool is read with `captions_format` ("lmms-eval",
    "vlmevalkit", "inspect") and `captions_id_field` (docs/inputs.md, "Captions from other tools"). Raises ValueError
    for params, items or captions the protocol refuses, before anything is judged."""
    chosen = lookup("protocol", protocol)
    run_params = dict(params or {})
    problems = protocol_param_problems(run_params, Path.cwd(), protocol=protocol)
    if problems:
        raise ValueError("; ".join(f"params[{key!r}]: {message}" for key, message in problems))
    if chosen.judge_frames is not None and frames is None:
        raise ValueError(f"protocol {protocol!r} shows frames to its judge: pass frames= (a FRAMES table)")
    item_table = _items_table(items, protocol)
    problem = chosen.columns_problem(item_table)
    refused = [problem] if problem else chosen.items_problems(item_table)
    if refused:
        raise ValueError(f"protocol {protocol!r} cannot judge these items: " + "; ".join(refused))
    rules = dict(chosen.caption_file_rules(run_params.get("mode")))
    if captions_format is not None or captions_id_field is not None:
        if not isinstance(captions, (str, Path)):
            raise ValueError("captions_format and captions_id_field describe a captions file; got a table")
        rules.update(caption_format=captions_format, id_field=captions_id_field)
    caption_table = _captions_table(captions, item_table, rules)
    backend = make_judge(judge, **dict(judge_options or {}))
    try:
        requests = chosen.build_requests(item_table, caption_table, judge=backend.name,
                                         judge_revision=backend.revision, seeds=[int(s) for s in seeds],
                                         frames=frames, **run_params)
        verdicts, summary = run_judging(requests, backend, cache_dir=cache, protocol=chosen, progress=progress,
                                        return_summary=True, protocol_params=run_params)
    finally:
        backend.close()
    metrics = chosen.compute_metrics(pl.from_arrow(verdicts), items=pl.from_arrow(item_table),
                                     captions=pl.from_arrow(caption_table), n_resamples=n_resamples, seed=0,
                                     **chosen.metric_params(run_params))
    metrics = explain_nulls(metrics, verdicts, captions=caption_table)
    return JudgeResult(pl.from_arrow(verdicts), metrics, summary)


@overload
def load_run(path: str | Path, *, pandas: Literal[False] = False) -> RunTables[pl.DataFrame]: ...
@overload
def load_run(path: str | Path, *, pandas: Literal[True]) -> RunTables[pd.DataFrame]: ...


def load_run(path: str | Path, *, pandas: bool = False) -> RunTables[Any]:
    """The tables of a run folder that `capeval sweep`/`capeval.sweep` wrote, or of a verdict file that
    `capeval judge --out` wrote, as Polars frames (pandas ones with `pandas=True`). Raises FileNotFoundError when
    `path` is neither."""
    run = rundir.load_run(path)
    tables: RunTables[pl.DataFrame] = RunTables(
        path=run.path, results=run.results, metrics=rundir.metric_segments(run.path) if run.source is None else None,
        verdicts=run.verdicts, captions=run.captions, items=rundir.load_items(run))
    return tables.to_pandas() if pandas else tables


def _items_table(items: pa.Table | pl.DataFrame | str | Path, protocol: str) -> pa.Table:
    if isinstance(items, (str, Path)):
        return read_items(items, benchmark=protocol)
    return _arrow(items)


def _captions_table(captions: pa.Table | pl.DataFrame | str | Path, items: pa.Table, rules: dict) -> pa.Table:
    if isinstance(captions, (str, Path)):
        # a caption may name its video by the media file (docs/inputs.md "Video ids")
        return with_dataset_video_ids(read_captions(captions, **rules), items)[0]
    return _arrow(captions)


def _arrow(table: pa.Table | pl.DataFrame) -> pa.Table:
    if isinstance(table, pa.Table):
        return table
    if isinstance(table, pl.DataFrame):
        return table.to_arrow()
    raise TypeError(f"expected a pyarrow Table, a polars DataFrame or a file path, got {type(table).__name__}")


def _require_pandas() -> None:
    try:
        import pandas  # noqa: F401  # deferred: optional extra
    except ImportError:
        raise ModuleNotFoundError("to_pandas() needs pandas, an optional extra of capeval: "
                                  "pip install 'capeval[pandas]'", name="pandas") from None


def _to_pandas(frame):
    return None if frame is None else frame.to_pandas()
