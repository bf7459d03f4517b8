"""The sweep files the pipeline, report and cluster tests run: CapQuiz on generated videos (or on an items table),
captioned by the local pixel-statistics captioner and judged by the local judge, small enough for 2 cores."""

from __future__ import annotations

import json


def _toml(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {_toml(v)}" for k, v in value.items()) + " }"
    return json.dumps(value)  # strings, numbers and lists of them are written alike in TOML and JSON


def capquiz_sweep(name: str, *, prompts=("capquiz_standard", "brief"), frames=("uniform:2", "uniform:6"),
                  n_videos: int = 3, dataset: dict | None = None, captioner_params: dict | None = None,
                  seeds=None, options: dict | None = None, judge: dict | None = None) -> str:
    """A sweep file's text. `dataset` replaces the synthetic dataset (e.g. {"name": "clips", "kind": "items",
    "path": "..."}); `judge` the local judge (e.g. {"name": "openai", "params": {...}}); `options` are added to
    batch_size = 2, n_resamples = 100."""
    dataset = dataset or {"name": "shapes", "kind": "synthetic", "n_videos": n_videos, "duration_s": 1.5}
    lines = [f"name = {_toml(name)}", f"prompts = {_toml(list(prompts))}", f"frames = {_toml(list(frames))}", "",
             "[[datasets]]", *(f"{k} = {_toml(v)}" for k, v in dataset.items()), "",
             "[[captioners]]", 'name = "local"']
    if captioner_params:
        lines.append(f"params = {_toml(captioner_params)}")
    judge = judge or {"name": "local"}
    lines += ["", "[[protocols]]", 'name = "capquiz"', "", "[[judges]]", *(f"{k} = {_toml(v)}" for k, v in judge.items())]
    if seeds is not None:
        lines.append(f"seeds = {_toml(list(seeds))}")
    lines += ["", "[options]", *(f"{k} = {_toml(v)}" for k, v in {"batch_size": 2, "n_resamples": 100,
                                                                 **(options or {})}.items())]
    return "\n".join(lines) + "\n"
