"""One sweep cell, from stored captions to committed verdicts and metrics, with every item accounted for.

Captions are looked up per *video id*, not per content key: videos with identical bytes share one decode and one
caption (same keys), and each still gets its own caption row, so each of their items gets its own verdict rows.
A video without a usable caption gets a caption row without text whose error says why (capeval.engine.sweep.accounting),
so its items become verdict rows without a verdict instead of vanishing.

Commit protocol (one writer holds the output folder's lock; capeval.engine.store.lock):
  0. transcripts/<cell_key>.parquet what the judge was sent and answered (engine/store/transcripts.py)
  1. verdicts/<cell_key>.parquet   the cell's verdict rows (+ cell_key, item_status, retryable)
  2. metrics/<cell_key>.parquet    the cell's metrics (+ cell columns, cell_key, cell_status)  <- the commit point
All are written whole under the cell's name: redoing a cell replaces them, never adds a copy. A kill between 0 and 2
leaves transcripts or a verdicts segment with no metrics; `recover` (run at the start of every sweep, under the
lock) removes them, so at rest each cell is in every store exactly once or in none. A cell is finished when its
metrics segment says `complete` or `failures_accepted`; an `incomplete` cell (retryable failures) is redone by the
next run, which re-sends only what is not in the caches.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from capeval.engine.datasets.video_ids import with_dataset_video_ids
from capeval.engine.frames.sizes import frame_size_for
from capeval.engine.registry import lookup
from capeval.engine.schemas import CAPTIONS, FRAMES, conform
from capeval.engine.stages.caption import read_captions
from capeval.engine.stages.decode import decode_stream
from capeval.engine.sweep import accounting
from capeval.engine.sweep.accounting import CAPTION_FAILED, FRAMES_MISSING, Failure
from capeval.engine.sweep.captioning import CaptionOutcome, frames_index, video_caption_key
from capeval.engine.sweep.datasets import LoadedDataset
from capeval.engine.faultpoints import hit
from capeval.engine.sweep.grid import CELL_COLUMNS, ResultCell, file_captions
from capeval.engine.sweep.pairs import protocol_items
from capeval.engine.sweep.run import RunStores, SweepRun


def recover(stores: RunStores) -> list[str]:
    """Roll back cells killed between their verdicts and their metrics (returns their keys), and remove the temp
    files of writes a kill interrupted (they were never renamed into place, so nothing refers to them)."""
    committed = {p.stem for p in stores.metrics.segments()}
    orphans = [p.stem for p in stores.verdicts.segments() if _is_cell_name(p.stem) and p.stem not in committed]
    for name in orphans:
        stores.verdicts.remove(name)
    out = stores.metrics.root.parent
    for p in stores.transcripts.glob("*.parquet"):  # written just before the verdicts (judge_stage.py)
        if _is_cell_name(p.stem) and p.stem not in committed:
            p.unlink()
    for folder in [out] + [d for d in out.iterdir() if d.is_dir() and d.name != "frames"]:
        for stray in folder.glob(".*.tmp"):
            stray.unlink(missing_ok=True)
    return orphans


def _is_cell_name(stem: str) -> bool:
    return "-" not in stem  # cell keys are hex; timestamp-named segments of older runs contain "-"


def cell_states(stores: RunStores) -> dict[str, str]:
    """cell_key -> cell_status of every committed cell (segments of older runs count as complete)."""
    states: dict[str, str] = {}
    for p in stores.metrics.segments():
        names = pq.read_schema(p).names
        cols = ["cell_key"] + (["cell_status"] if "cell_status" in names else [])
        t = pq.read_table(p, columns=cols)
        if t.num_rows == 0:
            continue
        key = t.column("cell_key")[0].as_py()
        states[key] = t.column("cell_status")[0].as_py() if "cell_status" in cols else accounting.COMPLETE
    return states


def stored_verdicts(stores: RunStores, key: str, columns: list[str] | None = None) -> pa.Table | None:
    """The cell's committed verdict table (only `columns`, when given), or None."""
    path = stores.verdicts.path_of(key)
    return pq.read_table(path, columns=columns) if path.exists() else None


def stored_verdict_batches(stores: RunStores, key: str, columns: list[str], rows: int) -> Iterator[pa.RecordBatch]:
    """The cell's committed verdict rows (only `columns`), `rows` at a time, never the whole table at once;
    nothing when the cell has none."""
    path = stores.verdicts.path_of(key)
    if path.exists():
        yield from pq.ParquetFile(path).iter_batches(batch_size=rows, columns=columns)


@dataclass
class CellInputs:
    """What the caption stage left for the cells: the frames index, stored captions by key, and failures."""

    index: dict  # (video_id, frame_spec) -> FRAMES row
    captions: dict  # caption_key -> CAPTIONS row (successful captions only)
    frame_failures: dict  # (video_id, frame_spec) -> Failure (this run)
    caption_failures: dict  # caption_key -> error text (this run)


def load_inputs(stores: RunStores, outcome: CaptionOutcome) -> CellInputs:
    table = read_captions(stores.captions)
    ok = table.filter(pc.is_null(table.column("error"))) if table.num_rows else table
    captions = {r["caption_key"]: r for r in ok.to_pylist()}
    return CellInputs(frames_index(stores), captions, dict(outcome.frame_failures), dict(outcome.caption_failures))


def cell_captions(cell: ResultCell, run: SweepRun, inputs: CellInputs,
                  videos=None) -> tuple[pa.Table, dict[str, Failure]]:
    """One caption row per video of the cell's dataset (video_id = that video), and the failure of each video
    without a usable caption; with `videos`, of those videos only (in the dataset's order)."""
    cc = cell.caption
    data = run.data(cc)
    if cc.from_file:
        return file_cell_captions(cell, data)
    rows, failures = [], {}
    wanted = None if videos is None else set(videos)
    for vid in data.videos:
        if wanted is not None and vid not in wanted:
            continue
        frames = inputs.index.get((vid, cc.frame_spec))
        failure = inputs.frame_failures.get((vid, cc.frame_spec))
        cap = None
        if frames is not None:
            key = video_caption_key(run, frames, cc)
            cap = inputs.captions.get(key)
            if cap is None and failure is None:
                error = inputs.caption_failures.get(key, "no caption stored for these frames")
                failure = Failure(CAPTION_FAILED, f"captioner: {accounting.short_reason(error, 80)}",
                                  f"caption failed: {error}")
        elif failure is None:
            failure = Failure(FRAMES_MISSING, "no frames", "no frames: the video was not decoded in this run")
        if cap is not None:  # the cell's label names the system (rows an older capeval stored hold the name)
            rows.append({**cap, "video_id": vid, "captioner": cc.captioner.display})
            continue
        failures[vid] = failure
        rows.append({"caption_key": f"none:{vid}:{cc.frame_spec}:{cc.prompt_id}", "captioner": cc.captioner.display,
                     "prompt_id": cc.prompt_id, "frame_spec": cc.frame_spec, "video_id": vid, "text": None,
                     "error": failure.message})
    return pa.Table.from_pylist(rows, schema=CAPTIONS), failures


def cell_items(cell: ResultCell, data: LoadedDataset) -> pa.Table:
    """The items of the cell's dataset its protocol reads (capeval.engine.sweep.pairs.protocol_items)."""
    return protocol_items(data.items, cell.protocol.name)


def commit_verdicts(stores: RunStores, key: str, verdicts: pa.Table) -> None:
    """Step 1 of the commit protocol (module docstring): after the transcripts, before the metrics."""
    stores.verdicts.put(verdicts, key)
    hit("cell_verdicts")


def commit_metrics(stores: RunStores, key: str, metrics: pa.Table) -> None:
    """Step 2, the commit point: after `commit_verdicts`."""
    stores.metrics.put(metrics, key)


def label_metrics(metrics, cell, key: str, status: str):
    import polars as pl

    metrics = metrics.drop([c for c in CELL_COLUMNS + ["cell_key", "cell_status"] if c in metrics.columns])
    return metrics.with_columns([pl.lit(v).alias(k) for k, v in cell.labels().items()]
                                + [pl.lit(key).alias("cell_key"), pl.lit(status).alias("cell_status")])


def file_cell_captions(cell: ResultCell, data: LoadedDataset) -> tuple[pa.Table, dict[str, Failure]]:
    """Captions of a `[[captions]]` cell: the file's rows (matched to items by item_id, else video_id), plus a row
    without text for every item the file does not caption (permanent: the rerun reads the same file)."""
    items = cell_items(cell, data)
    # a caption may name its video by the media file (docs/inputs.md "Video ids"): one file serves every kind
    table, _ = with_dataset_video_ids(file_captions(cell.caption), data.items)
    # the items the file captions, found on the columns: only the others are made into Python values (a set of
    # the ids and two lists of every item's ids were ~15 MB at 100,000 items, left in the interpreter's arenas)
    have = pc.unique(table.column("video_id"))
    item_ids, video_ids = items.column("item_id"), items.column("video_id")
    uncaptioned = pc.indices_nonzero(pc.invert(pc.or_(pc.is_in(item_ids, value_set=have.cast(item_ids.type)),
                                                      pc.is_in(video_ids, value_set=have.cast(video_ids.type)))))
    rows, failures = [], {}
    source = cell.caption.source.path
    for item, vid in zip(item_ids.take(uncaptioned).to_pylist(), video_ids.take(uncaptioned).to_pylist()):
        if item in failures:
            continue
        f = Failure(accounting.NO_CAPTION, "no caption in the captions file",
                    f"no caption for item {item!r} (video {vid!r}) in {source}")
        failures[item] = f
        rows.append({"caption_key": f"none:{item}", "captioner": cell.caption.captioner.display,
                     "prompt_id": cell.caption.prompt_id, "frame_spec": cell.caption.frame_spec, "video_id": item,
                     "text": None, "error": f.message})
    if rows:
        table = pa.concat_tables([conform(table, CAPTIONS), pa.Table.from_pylist(rows, schema=CAPTIONS)])
    return table, failures


def judge_frames_spec(cell: ResultCell) -> str:
    """The frames a frame-showing judge sees: the `judge_frames` param; else the protocol's declared
    default (JudgeProtocol.judge_frames, e.g. an official linspace:32) in official mode and for captions read
    from a file (their `frame_spec` is a label, "file" by default, not frames anyone decoded); else, strict mode's
    rule, the frames the captioner saw (the caption cell's frame spec). The judge stage passes this spec to the
    protocol as `judge_frames`, so its requests look up the very frames decoded here."""
    params = cell.protocol.params
    if params.get("judge_frames"):
        return str(params["judge_frames"])
    if params.get("mode") == "official" or cell.caption.from_file:
        return lookup("protocol", cell.protocol.name).judge_frames
    return cell.caption.frame_spec


def judge_frames(cell: ResultCell, run: SweepRun, inputs: CellInputs) -> tuple[pa.Table, dict[str, Failure]]:
    """FRAMES rows of the cell's videos at the judge's frame spec, decoding (through the frame cache, on Ray) the
    videos the frames index does not hold yet; returns them and the failure of each video without frames."""
    data, stores = run.data(cell.caption), run.stores
    spec = judge_frames_spec(cell)
    missing = [(vid, path) for vid, path in data.videos.items() if (vid, spec) not in inputs.index]
    if missing:
        new = []
        for rows in decode_stream(missing, [spec], cache_dir=str(stores.frames), progress=run.progress,
                                  desc=f"judge frames [{spec}]", size=frame_size_for(cell.judge)):
            for r in rows:
                if r["failure"] is None:
                    inputs.index[(r["video_id"], spec)] = r
                    new.append(r)
                else:
                    inputs.frame_failures[(r["video_id"], spec)] = r["failure"]
        if new:
            stores.frames_index.append(pa.Table.from_pylist(new, schema=FRAMES))
    rows = [inputs.index[(vid, spec)] for vid in data.videos if (vid, spec) in inputs.index]
    failures = {vid: inputs.frame_failures.get((vid, spec)) or Failure(FRAMES_MISSING, "no judge frames",
                                                                        f"no frames at {spec} for the judge")
                for vid in data.videos if (vid, spec) not in inputs.index}
    return pa.Table.from_pylist(rows, schema=FRAMES), failures
