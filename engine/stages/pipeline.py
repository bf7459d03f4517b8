"""Decode -> caption for the caption cells a sweep still needs, streaming video by video.

The FRAMES rows of every decoded (video, spec) go to the frames index (`frames_index/`, one group-committed store
for the whole run folder: rows are buffered and written a few hundred at a time, not one Parquet file per video),
so caption keys can be recomputed by a later run without decoding again; a video whose captions all exist is not
decoded at all. A kill loses at most the index rows of the last commit interval: those videos are decoded again
(from the frame cache when their frames are there) and nothing else changes. What
failed (a video that cannot be decoded, a frame cache that could not be written, a caption that failed) is returned
in a `CaptionOutcome` for the sweep to account for item by item; failures are never written as if they were
results, so the next run retries the retryable ones.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Iterator

import pyarrow as pa

from capeval.engine.keys import caption_key
from capeval.engine.secrets import without_secrets
from capeval.engine.frames.cache import frames_key_at
from capeval.engine.frames.sizes import frame_size_for
from capeval.engine.prompts_library import get_prompt
from capeval.engine.schemas import FRAMES
from capeval.engine.stages.caption import CaptionTask, finished_keys, run_caption_stage

SEGMENTS_PER_VIDEO = 4  # LVCap segmental prompts: consecutive segments, each conditioned on the previous ones
# Caption length per request when a captioner sets none: room for detailed captions (the LVCap-Eval paper's
# InternVL2-76B averages ~1,050 T5 tokens); a caption cut at this limit is flagged `truncated` by the backend.
MAX_TOKENS = 2048


@dataclass
class CaptionOutcome:
    stats: dict = field(default_factory=dict)  # summed caption-stage counts
    frame_failures: dict = field(default_factory=dict)  # (video_id, frame_spec) -> accounting.Failure
    caption_failures: dict = field(default_factory=dict)  # caption_key -> error text


def frames_index_store(stores):
    """The run folder's frames index: the sweep's one group-committed store (its buffer is seen by every reader), or
    a plain store next to the frame cache for callers that hold no `frames_index` store."""
    store = getattr(stores, "frames_index", None)
    if store is not None:
        return store
    from capeval.engine.store import SegmentStore

    return SegmentStore(stores.frames.parent / "frames_index", FRAMES)


def frames_index(stores) -> dict[tuple[str, str], dict]:
    table = frames_index_store(stores).read()
    return {(r["video_id"], r["frame_spec"]): r for r in table.to_pylist() if r["error"] is None}


def _max_tokens(captioner) -> int:
    return getattr(captioner, "max_tokens", None) or MAX_TOKENS


def _timestamps(captioner) -> str:
    """The captioner's `timestamps` option: "none" (the prompt as written) or "text" (frame times appended)."""
    return getattr(captioner, "timestamps", None) or "none"


def _key(row: dict, captioner, cap_rev: dict, prompt_id: str, media_type: str | None = None,
         boundaries=()) -> str:
    """The caption's key: frames, captioner identity, the exact text sent (per media type) and the settings (a
    segmental prompt's per-video scene boundaries among them, when the video has some)."""
    prompt = get_prompt(prompt_id)
    params = {"params": without_secrets(captioner.params), "max_tokens": _max_tokens(captioner),
              "segments": SEGMENTS_PER_VIDEO if prompt.segmental else 0, "timestamps": _timestamps(captioner)}
    if prompt.segmental and boundaries:  # absent otherwise: keys of videos without boundaries stay as they were
        params["boundaries"] = [float(b) for b in boundaries]
    if getattr(prompt, "system", None) is not None:  # sent with the prompt (packs): it changes the caption
        params["system"] = prompt.system
    text = prompt.text_for(media_type) if hasattr(prompt, "text_for") else prompt.text
    # the frames at this captioner's size (capeval.engine.frames.sizes): the index holds one row per (video, spec)
    frames = frames_key_at(row, frame_size_for(captioner))
    return caption_key(frames, captioner.name, cap_rev[captioner.display], text, params)


def caption_key_for(row: dict, captioner, cap_rev: dict, prompt_id: str, media_type: str | None = None,
                    boundaries=()) -> str:
    """Caption key of a frames-index row under a cell's captioner and prompt (`boundaries`: the video's scene cuts,
    scene_boundaries(data))."""
    return _key(row, captioner, cap_rev, prompt_id, media_type, boundaries)


def _task(row: dict, captioner, cap_rev: dict, prompt_id: str, media_type: str | None = None,
          boundaries=()) -> CaptionTask:
    prompt = get_prompt(prompt_id)
    text = prompt.text_for(media_type) if hasattr(prompt, "text_for") else prompt.text
    return CaptionTask(
        caption_key=_key(row, captioner, cap_rev, prompt_id, media_type, boundaries), video_id=row["video_id"],
        frames_path=row["path"], timestamps=tuple(row["timestamps"] or ()), frame_spec=row["frame_spec"],
        prompt_id=prompt_id, prompt_text=text, segments=SEGMENTS_PER_VIDEO if prompt.segmental else 0,
        max_tokens=_max_tokens(captioner), media_type=media_type or "video", timestamps_mode=_timestamps(captioner),
        system=getattr(prompt, "system", None), boundaries=tuple(boundaries) if prompt.segmental else (),
    )


def _media_types(data) -> dict:
    return getattr(data, "media_types", None) or {}


def scene_boundaries(data) -> dict[str, tuple[float, ...]]:
    """{video_id: scene cuts} that a dataset's items give (LoadedDataset.scene_boundaries): segmental prompts caption
    those videos scene by scene; other videos keep the equal parts / the frame spec's segments."""
    return getattr(data, "scene_boundaries", None) or {}


def caption_cells_for(pending, datasets, config, stores, cap_rev: dict, *, progress: bool = True,
                      exit_once_marker: str | None = None, watch=None) -> CaptionOutcome:
    """Decode and caption everything the pending cells (result cells or caption cells) need; returns counts and
    what failed. Caption cells read from `[[captions]]` files need no captioning. `watch` (capeval.engine.sweep.overlap
    .CaptionWatch) hears of every decoded frames row, frame failure and finished caption as it happens, and can
    stop the work early (`watch.stopped`: no new video is started)."""
    from capeval.engine.stages.decode import decode_stream

    groups: dict[tuple[str, str], dict] = {}
    for cell in pending:
        cc = getattr(cell, "caption", cell)
        if getattr(cc, "from_file", False):
            continue
        g = groups.setdefault((cc.dataset.name, cc.captioner.display),
                              {"captioner": cc.captioner, "prompts": set(), "specs": set()})
        g["prompts"].add(cc.prompt_id)
        g["specs"].add(cc.frame_spec)
    outcome = CaptionOutcome()
    totals: dict = defaultdict(int)
    index_store = frames_index_store(stores)
    for (dname, _), g in groups.items():
        data, captioner = datasets[dname], g["captioner"]
        prompts, specs = sorted(g["prompts"]), sorted(g["specs"])
        index, done = frames_index(stores), finished_keys(stores.captions)
        media, scenes = _media_types(data), scene_boundaries(data)
        todo = []
        for vid, path in data.videos.items():
            rows = [index.get((vid, s)) for s in specs]
            if all(rows) and all(_key(r, captioner, cap_rev, p, media.get(vid), scenes.get(vid, ())) in done
                                 for r in rows for p in prompts):
                totals["cached"] += len(rows) * len(prompts)
                continue
            todo.append((vid, path))
        if not todo:
            continue

        def tasks(todo=todo, prompts=prompts, specs=specs, captioner=captioner, index=index,
                  media=media, scenes=scenes) -> Iterator[CaptionTask]:
            for rows in decode_stream(todo, specs, cache_dir=str(stores.frames), progress=progress,
                                      desc=f"decode [{dname}]", size=frame_size_for(captioner)):
                if watch is not None and watch.stopped:
                    return
                new = [r for r in rows if r["failure"] is None and (r["video_id"], r["frame_spec"]) not in index]
                if new:
                    index_store.append(pa.Table.from_pylist(new, schema=FRAMES))
                for r in rows:
                    if r["failure"] is not None:  # accounted item by item when the cells are judged
                        outcome.frame_failures[(r["video_id"], r["frame_spec"])] = r["failure"]
                        if watch is not None:
                            watch.frame_failure((r["video_id"], r["frame_spec"]), r["failure"])
                        continue
                    if watch is not None:
                        watch.frames(r)
                    for p in prompts:
                        yield _task(r, captioner, cap_rev, p, media.get(r["video_id"]), scenes.get(r["video_id"], ()))

        opts = config.options
        stats = run_caption_stage(
            tasks(), captioner=captioner.name, params=captioner.params, store=stores.captions,
            n_videos=len(todo), num_actors=opts.caption_actors, gpus_per_actor=opts.gpus_per_actor,
            max_restarts=opts.max_restarts, progress=progress,
            exit_once_marker=exit_once_marker, on_rows=None if watch is None else watch.captions,
            label=captioner.display,
        )
        outcome.caption_failures.update(stats.pop("failures", {}))
        for k, v in stats.items():
            totals[k] += v
    outcome.stats = dict(totals)
    return outcome
