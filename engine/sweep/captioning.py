"""Decode -> caption for the caption cells a sweep still needs, streaming video by video, and the caption key.

The FRAMES rows of every decoded (video, spec) go to the frames index (`frames_index/`, one group-committed store
for the whole run folder: rows are buffered and written a few hundred at a time, not one Parquet file per video),
so caption keys can be recomputed by a later run without decoding again; a video whose captions all exist is not
decoded at all. A kill loses at most the index rows of the last commit interval: those videos are decoded again
(from the frame cache when their frames are there) and nothing else changes. What
failed (a video that cannot be decoded, a frame cache that could not be written, a caption that failed) is returned
in a `CaptionOutcome` for the sweep to account for item by item; failures are never written as if they were
results, so the next run retries the retryable ones.

A video's caption key under a caption cell is derived by `video_caption_key` (the frames, the captioner's identity,
the prompt text for the video's media type, the settings and a segmental prompt's scene cuts), the one function the
caption stage, the judge stage, the overlap feed and the cost ledger all ask.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Iterator

import pyarrow as pa

from capeval.engine.frames.cache import frames_key_at
from capeval.engine.frames.sizes import frame_size_for
from capeval.engine.keys import caption_key
from capeval.engine.prompts_library import get_prompt
from capeval.engine.schemas import FRAMES
from capeval.engine.secrets import without_secrets
from capeval.engine.stages.caption import CaptionTask, finished_keys, run_caption_stage
from capeval.engine.stages.decode import decode_stream
from capeval.engine.sweep.config import ComponentSpec
from capeval.engine.sweep.grid import CaptionCell, ResultCell
from capeval.engine.sweep.run import RunStores, SweepRun

SEGMENTS_PER_VIDEO = 4  # segmental prompts: consecutive segments, each conditioned on the previous ones
# Caption length per request when a captioner sets none: room for detailed captions (a long-video benchmark's
# paper reports InternVL2-76B averaging ~1,050 T5 tokens); a caption cut at this limit is flagged `truncated` by the
# backend.
MAX_TOKENS = 2048


@dataclass
class CaptionOutcome:
    stats: dict = field(default_factory=dict)  # summed caption-stage counts
    frame_failures: dict = field(default_factory=dict)  # (video_id, frame_spec) -> accounting.Failure
    caption_failures: dict = field(default_factory=dict)  # caption_key -> error text


def frames_index(stores: RunStores) -> dict[tuple[str, str], dict]:
    table = stores.frames_index.read()
    return {(r["video_id"], r["frame_spec"]): r for r in table.to_pylist() if r["error"] is None}


def _max_tokens(captioner: ComponentSpec) -> int:
    return captioner.max_tokens or MAX_TOKENS


def caption_key_at(frames_row: dict, captioner: ComponentSpec, revision: str, prompt_id: str,
                   media_type: str | None = None, boundaries=()) -> str:
    """The caption's key: frames, captioner identity, the exact text sent (per media type) and the settings (a
    segmental prompt's per-video scene boundaries among them, when the video has some)."""
    prompt = get_prompt(prompt_id)
    params = {"params": without_secrets(captioner.params), "max_tokens": _max_tokens(captioner),
              "segments": SEGMENTS_PER_VIDEO if prompt.segmental else 0, "timestamps": captioner.timestamps}
    if prompt.segmental and boundaries:  # absent otherwise: keys of videos without boundaries stay as they were
        params["boundaries"] = [float(b) for b in boundaries]
    if prompt.system is not None:  # sent with the prompt (packs): it changes the caption
        params["system"] = prompt.system
    # the frames at this captioner's size (capeval.engine.frames.sizes): the index holds one row per (video, spec)
    frames = frames_key_at(frames_row, frame_size_for(captioner))
    return caption_key(frames, captioner.name, revision, prompt.text_for(media_type), params)


def video_caption_key(run: SweepRun, frames_row: dict, cell: CaptionCell) -> str:
    """The key of the caption of `frames_row` (one video of the cell's dataset at the cell's frame spec) under
    caption cell `cell`: the prompt text for the video's media type, a segmental prompt at the video's scene cuts
    (LoadedDataset.media_types, scene_boundaries)."""
    data = run.data(cell)
    vid = frames_row["video_id"]
    return caption_key_at(frames_row, cell.captioner, run.captioner_revisions[cell.captioner.display],
                          cell.prompt_id, data.media_types.get(vid), data.scene_boundaries.get(vid, ()))


def caption_task(frames_row: dict, cell: CaptionCell, key: str, media_type: str | None = None,
                 boundaries=()) -> CaptionTask:
    """What a caption actor is asked for one video under `cell` (`key`: video_caption_key)."""
    prompt = get_prompt(cell.prompt_id)
    captioner = cell.captioner
    return CaptionTask(
        caption_key=key, video_id=frames_row["video_id"], frames_path=frames_row["path"],
        timestamps=tuple(frames_row["timestamps"] or ()), frame_spec=frames_row["frame_spec"],
        prompt_id=cell.prompt_id, prompt_text=prompt.text_for(media_type),
        segments=SEGMENTS_PER_VIDEO if prompt.segmental else 0, max_tokens=_max_tokens(captioner),
        media_type=media_type or "video", timestamps_mode=captioner.timestamps, system=prompt.system,
        boundaries=tuple(boundaries) if prompt.segmental else (),
    )


def caption_cells_for(pending: list, run: SweepRun, *, watch=None) -> CaptionOutcome:
    """Decode and caption everything the pending cells (result cells or caption cells) need; returns counts and
    what failed. Caption cells read from `[[captions]]` files need no captioning. `watch` (capeval.engine.sweep.overlap
    .CaptionWatch) hears of every decoded frames row, frame failure and finished caption as it happens, and can
    stop the work early (`watch.stopped`: no new video is started)."""
    groups: dict[tuple[str, str], dict] = {}
    for cell in pending:
        cc = cell.caption if isinstance(cell, ResultCell) else cell
        if cc.from_file:
            continue
        g = groups.setdefault((cc.dataset.name, cc.captioner.display),
                              {"cell": cc, "prompts": set(), "specs": set()})
        g["prompts"].add(cc.prompt_id)
        g["specs"].add(cc.frame_spec)
    outcome = CaptionOutcome()
    totals: dict = defaultdict(int)
    stores, opts = run.stores, run.config.options
    for (dname, _), g in groups.items():
        data, captioner = run.datasets[dname], g["cell"].captioner
        specs = sorted(g["specs"])
        # every prompt at every frame spec the pending cells of this dataset and captioner name
        by_spec = {spec: [CaptionCell(g["cell"].dataset, captioner, p, spec) for p in sorted(g["prompts"])]
                   for spec in specs}
        index, done = frames_index(stores), finished_keys(stores.captions)
        todo = []
        for vid, path in data.videos.items():
            rows = [index.get((vid, s)) for s in specs]
            if all(rows) and all(video_caption_key(run, r, cc) in done
                                 for r in rows for cc in by_spec[r["frame_spec"]]):
                totals["cached"] += len(rows) * len(g["prompts"])
                continue
            todo.append((vid, path))
        if not todo:
            continue

        def tasks(todo=todo, specs=specs, by_spec=by_spec, captioner=captioner, index=index,
                  data=data) -> Iterator[CaptionTask]:
            media, scenes = data.media_types, data.scene_boundaries
            for rows in decode_stream(todo, specs, cache_dir=str(stores.frames), progress=run.progress,
                                      desc=f"decode [{dname}]", size=frame_size_for(captioner)):
                if watch is not None and watch.stopped:
                    return
                new = [r for r in rows if r["failure"] is None and (r["video_id"], r["frame_spec"]) not in index]
                if new:
                    stores.frames_index.append(pa.Table.from_pylist(new, schema=FRAMES))
                for r in rows:
                    if r["failure"] is not None:  # accounted item by item when the cells are judged
                        outcome.frame_failures[(r["video_id"], r["frame_spec"])] = r["failure"]
                        if watch is not None:
                            watch.frame_failure((r["video_id"], r["frame_spec"]), r["failure"])
                        continue
                    if watch is not None:
                        watch.frames(r)
                    vid = r["video_id"]
                    for cc in by_spec[r["frame_spec"]]:
                        yield caption_task(r, cc, video_caption_key(run, r, cc), media.get(vid),
                                           scenes.get(vid, ()))

        stats = run_caption_stage(
            tasks(), captioner=captioner.name, params=captioner.params, store=stores.captions,
            n_videos=len(todo), num_actors=opts.caption_actors, gpus_per_actor=opts.gpus_per_actor,
            max_restarts=opts.max_restarts, progress=run.progress,
            on_rows=None if watch is None else watch.captions, label=captioner.display,
        )
        outcome.caption_failures.update(stats.pop("failures", {}))
        for k, v in stats.items():
            totals[k] += v
    outcome.stats = dict(totals)
    return outcome
