"""The sweep files tests run, written in one place: by default CapQuiz on generated (`synthetic`) videos, captioned
by the local pixel-statistics captioner and judged by the local judge, small enough for 2 cores. Each test passes
only what it varies (prompts, frames, videos, the dataset, captioners, protocols, judges, options).

Tests of the sweep-file parser itself (tests/pipeline/test_pipeline_sweep_config.py, test_pipeline_sweep_check.py)
keep their files written out: they assert line numbers and feed deliberately malformed entries."""

from __future__ import annotations

import json
from pathlib import Path

DEFAULT_OPTIONS = {"n_resamples": 100}


def _toml(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {_toml(v)}" for k, v in value.items()) + " }"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return json.dumps(value)  # strings and numbers are written alike in TOML and JSON


def _tables(header: str, entries) -> list[str]:
    """`[[header]]` tables, one per entry: a dict's keys as written, a bare string as `name = "..."`."""
    lines: list[str] = []
    for entry in entries:
        fields = {"name": entry} if isinstance(entry, str) else entry
        lines += ["", f"[[{header}]]", *(f"{k} = {_toml(v)}" for k, v in fields.items())]
    return lines


def sweep_toml(name: str, *, prompts=("capquiz_standard", "brief"), frames=("uniform:2", "uniform:6"),
               n_videos: int = 3, duration_s: float | None = 1.5, dataset: dict | None = None,
               captioners=("local",), captions=(), protocols=("capquiz",), judges=("local",),
               options: dict | None = None) -> str:
    """A sweep file's text.

    prompts: prompt ids (`prompts = [...]`), or dicts written as `[[prompts]]` tables (a pack's prompt).
    n_videos, duration_s: the synthetic dataset's size (duration_s None: the kind's default);
    dataset: a whole `[[datasets]]` entry instead (e.g. {"name": "clips", "kind": "items", "path": "..."}).
    captioners, protocols, judges: one table each, a name or a dict of the entry's fields (e.g. {"name": "openai",
    "params": {...}, "seeds": [0, 1]}); empty: no such section (a caption-only sweep has no protocols or judges).
    captions: `[[captions]]` tables (dicts: a caption file's `path` and its fields); frames empty: no `frames` line
    (a sweep of given captions alone has no frames to name).
    options: merged over DEFAULT_OPTIONS; a None value leaves that option out; options={} keeps the defaults."""
    if dataset is None:
        dataset = {"name": "shapes", "kind": "synthetic", "n_videos": n_videos}
        if duration_s is not None:
            dataset["duration_s"] = duration_s
    ids = [p for p in prompts if isinstance(p, str)]
    lines = [f"name = {_toml(name)}", *([f"prompts = {_toml(ids)}"] if ids else []),
             *([f"frames = {_toml(list(frames))}"] if frames else [])]
    lines += _tables("prompts", [p for p in prompts if not isinstance(p, str)])
    lines += _tables("datasets", [dataset])
    lines += _tables("captioners", captioners) + _tables("captions", captions)
    lines += _tables("protocols", protocols) + _tables("judges", judges)
    merged = {k: v for k, v in {**DEFAULT_OPTIONS, **(options or {})}.items() if v is not None}
    if merged:
        lines += ["", "[options]", *(f"{k} = {_toml(v)}" for k, v in merged.items())]
    return "\n".join(lines) + "\n"


def write_sweep(path: Path, name: str, **kw) -> Path:
    """Writes `sweep_toml(name, **kw)` to `path` (a folder: `<path>/<name>.toml`, the folder made) and returns the
    file's path."""
    path = Path(path)
    if path.is_dir() or not path.suffix:
        path.mkdir(parents=True, exist_ok=True)
        path = path / f"{name}.toml"
    path.write_text(sweep_toml(name, **kw))
    return path
