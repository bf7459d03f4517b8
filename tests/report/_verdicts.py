"""Verdict tables with known per-video outcomes, shaped like the sweep's verdict segments (VERDICTS + cell
labels), for the report tests."""

from __future__ import annotations

import numpy as np
import polars as pl


def verdict_rows(system: dict, codes_per_video: list[list[int]], *, protocol: str = "capquiz", judge: str = "local",
                 dataset: str = "d", task: str = "t", seed: int = 0) -> pl.DataFrame:
    """One row per (video, question): codes_per_video[v][q] is the verdict of question q of video v."""
    rows = []
    for v, codes in enumerate(codes_per_video):
        for q, code in enumerate(codes):
            rows.append({"dataset": dataset, "protocol": protocol, "protocol_name": protocol, "judge": judge,
                         "captioner": system["captioner"], "prompt_id": system["prompt_id"],
                         "frame_spec": system["frame_spec"], "task": task, "item_id": f"v{v:03d}/q{q}",
                         "video_id": f"v{v:03d}", "step": None, "sub_index": None, "seed": seed, "trial": 0,
                         "verdict": int(code), "parse_status": 0 if code >= 0 else 2,
                         "raw_output": str(code), "request_key": f"{system}-{v}-{q}"})
    return pl.DataFrame(rows, schema_overrides={"verdict": pl.Int8, "parse_status": pl.Int8, "step": pl.String,
                                                "sub_index": pl.Int32, "trial": pl.Int16})


def random_codes(n_videos: int, n_questions: int, p: list[float], seed: int) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return rng.choice(len(p), size=(n_videos, n_questions), p=p).tolist()
