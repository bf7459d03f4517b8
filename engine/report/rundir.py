"""Read a run folder (what `capeval sweep` or `capeval submit` writes) into the tables the report needs.

Layout (engine/sweep/runner.py): `verdicts/`, `metrics/`, `captions/` hold Parquet segments; `results.parquet`
is the results table of the sweep's cells; `run.json` the run records. Verdict rows get the cell's labels
(dataset, protocol and judge as the sweep file names them) from the metrics segments through `cell_key`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

from capeval.engine.runrecord import read_run_records

CELL_COLUMNS = ["dataset", "captioner", "prompt_id", "frame_spec", "protocol", "judge"]
#: what identifies one scored row of a protocol across systems (the pairing key of a comparison)
ITEM_KEY = ["task", "item_id", "sub_index", "step", "trial"]


def _segments(folder: Path) -> pl.DataFrame | None:
    paths = sorted(folder.glob("*.parquet")) if folder.is_dir() else []
    if not paths:
        return None
    return pl.concat([pl.read_parquet(p) for p in paths], how="diagonal_relaxed")


@dataclass
class RunData:
    path: Path
    results: pl.DataFrame
    verdicts: pl.DataFrame | None = None
    captions: pl.DataFrame | None = None
    records: list[dict] = field(default_factory=list)
    source: Path | None = None  # the verdict table itself, when the run was read from one (capeval judge --out)

    @property
    def transcripts_at(self) -> Path:
        """Where its judge transcripts are looked up (capeval.engine.report.transcripts.load_transcripts)."""
        return self.source or self.path

    @property
    def protocols(self) -> list[str]:
        if "protocol" in self.results.columns and self.results.height:
            return list(dict.fromkeys(self.results["protocol"].to_list()))
        if self.verdicts is not None:
            return list(dict.fromkeys(self.verdicts["protocol"].to_list()))
        return []

    def n_videos(self) -> pl.DataFrame | None:
        """Videos behind each cell: CELL_COLUMNS + n_videos (None without verdicts)."""
        if self.verdicts is None:
            return None
        cols = [c for c in CELL_COLUMNS if c in self.verdicts.columns]
        return self.verdicts.group_by(cols).agg(pl.col("video_id").n_unique().alias("n_videos"))


def load_run(run_dir: str | Path) -> RunData:
    """The run folder's tables; fails naming the folder when it holds neither results nor verdicts."""
    path = Path(run_dir)
    if path.is_file() and path.suffix == ".parquet":  # one verdict table (what `capeval judge --out` writes)
        verdicts = pl.read_parquet(path)
        if "verdict" not in verdicts.columns or "video_id" not in verdicts.columns:
            raise ValueError(f"{path}: not a verdict table (needs verdict and video_id columns)")
        return RunData(path.parent, pl.DataFrame(), _label_verdicts(verdicts, None, None),
                       None, read_run_records(path.parent), source=path)
    if not path.is_dir():
        raise FileNotFoundError(f"run folder not found: {path}")
    results_path = path / "results.parquet"
    results = pl.read_parquet(results_path) if results_path.is_file() else None
    metrics = _segments(path / "metrics")
    if results is None and metrics is not None:  # a sweep killed before writing its table
        results = metrics.drop("cell_key")
    verdicts = _segments(path / "verdicts")
    if results is None and verdicts is None:
        raise FileNotFoundError(f"{path} holds no results.parquet, metrics/ or verdicts/: not a capeval run folder")
    if verdicts is not None:
        verdicts = _label_verdicts(verdicts, metrics, results)
    captions = _segments(path / "captions")
    if captions is not None:
        captions = captions.unique(subset=["caption_key"], keep="first", maintain_order=True)
    return RunData(path, results if results is not None else pl.DataFrame(), verdicts, captions,
                   read_run_records(path))


def _label_verdicts(verdicts: pl.DataFrame, metrics: pl.DataFrame | None, results: pl.DataFrame | None):
    """Verdict rows of the results' cells, with the cell labels; a cell appended twice keeps its first copy."""
    v = verdicts
    if "cell_key" in v.columns and metrics is not None and "cell_key" in metrics.columns:
        labels = _cell_labels(metrics, results)
        if "protocol" in v.columns:  # the label may be a sweep-file `label`; metrics need the protocol's name
            v = v.with_columns(pl.col("protocol").alias("protocol_name"))
        v = v.drop([c for c in CELL_COLUMNS if c in v.columns and c in labels.columns and c != "cell_key"])
        v = v.join(labels, on="cell_key", how="inner")
    if "protocol_name" not in v.columns:
        v = v.with_columns((pl.col("protocol") if "protocol" in v.columns else pl.lit("-")).alias("protocol_name"))
    for c in CELL_COLUMNS:
        if c not in v.columns:
            v = v.with_columns(pl.lit("-").alias(c))
    v = v.with_columns(pl.col(c).cast(pl.String).fill_null("-") for c in CELL_COLUMNS)
    key = [c for c in ["cell_key", "request_key", *ITEM_KEY, "video_id", "seed"] if c in v.columns]
    return v.unique(subset=key, keep="first", maintain_order=True)


def _cell_labels(metrics: pl.DataFrame, results: pl.DataFrame | None) -> pl.DataFrame:
    labels = metrics.select([c for c in CELL_COLUMNS if c in metrics.columns] + ["cell_key"]).unique(
        subset=["cell_key"], keep="last", maintain_order=True)
    if results is not None and results.height:
        shown = results.select([c for c in CELL_COLUMNS if c in results.columns]).unique()
        labels = labels.join(shown, on=shown.columns, how="semi", nulls_equal=True)
    return labels


def cell_labels(run_dir: str | Path) -> pl.DataFrame | None:
    """cell_key + the labels (CELL_COLUMNS) of every committed cell of the run folder, as the results table names
    them; None without metrics segments."""
    metrics = _segments(Path(run_dir) / "metrics")
    if metrics is None or "cell_key" not in metrics.columns:
        return None
    return _cell_labels(metrics, None)


def metric_segments(run_dir: str | Path) -> pl.DataFrame | None:
    """Every committed cell's metric rows (cell columns, cell_key, cell_status), earlier sweeps into the same folder
    included; None without metrics segments."""
    return _segments(Path(run_dir) / "metrics")


def load_items(run: RunData) -> pl.DataFrame | None:
    """The items behind a sweep run (question, options, answer), reloaded from the sweep file its last run record
    names; None when there is no record, the file is gone, or loading fails (the report then shows no questions).
    Synthetic datasets are reloaded only when their videos are still in the run folder (no regeneration)."""
    if not run.records:
        return None
    record = run.records[-1]
    path = Path(record.get("sweep_file") or (record.get("config") or {}).get("path") or "")
    if not path.is_file():
        return None
    try:
        from capeval.engine.datasets.registry import load
        from capeval.engine.sweep.config import load_sweep

        sweep = load_sweep(path, check_paths=False)
        frames = []
        for spec in sweep.datasets:
            if spec.kind == "synthetic" and not (run.path / "videos" / spec.name).is_dir():
                continue
            loaded = load(spec.kind, spec.kind_params(), base_dir=path.parent, out_dir=run.path, name=spec.name)
            frames.append(pl.from_arrow(loaded.items).with_columns(pl.lit(spec.name).alias("dataset")))
        return pl.concat(frames, how="diagonal_relaxed") if frames else None
    except Exception:  # a report must not fail because a sweep's inputs moved or changed; it shows less instead
        return None
