"""Sweep files: which datasets, captioners, prompts, frame specs, protocols and judges to cross.

A sweep file is TOML (read with tomllib) or YAML. Validation is strict and names the file, the field and (where it
can be found) the line: unknown keys, wrong types, unknown prompt ids and unknown protocol/judge/captioner names
(checked against engine.registry) are errors before any work starts.

    name = "demo"
    prompts = ["capquiz_standard", "brief"]      # ids from engine.prompts_library
    frames = ["uniform:4", 8]                     # sampling specs; an int N means "uniform:N"

    [[datasets]]
    name = "shapes"
    kind = "synthetic"      # synthetic: generated videos of moving shapes + CapQuiz-style items from ground truth
    n_videos = 6            # items: `path` to an ITEMS-schema Parquet/JSONL file whose media_path are videos

    [[captioners]]
    name = "local"          # registry name
    params = {}             # constructor keyword arguments

    [[protocols]]
    name = "capquiz"

    [[judges]]
    name = "local"
    seeds = [0]

    [options]
    caption_actors = 1      # caption actors (one per GPU on GPU nodes)
    batch_size = 4          # videos per caption call
    n_resamples = 200       # bootstrap resamples for the metrics' confidence intervals
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


class SweepFileError(ValueError):
    """A sweep file that cannot be run; the message names the file, the field and the line when known."""


@dataclass(frozen=True)
class DatasetSpec:
    name: str
    kind: str  # synthetic | items
    path: str | None = None
    n_videos: int = 6
    seed: int = 0
    duration_s: float = 2.0
    limit: int | None = None


@dataclass(frozen=True)
class ComponentSpec:
    """A captioner, protocol or judge: a registry name, constructor params and (judges) the seeds to run."""

    name: str
    params: dict = field(default_factory=dict, hash=False)
    seeds: tuple[int, ...] = (0,)
    label: str | None = None  # how it shows in the results table; defaults to the name

    @property
    def display(self) -> str:
        return self.label or self.name


@dataclass(frozen=True)
class SweepOptions:
    caption_actors: int = 1
    batch_size: int = 4
    gpus_per_actor: float = 0.0  # 0 on CPU machines; 1 on GPU nodes (one actor per GPU)
    n_resamples: int = 200
    judge_batch_size: int = 64
    max_restarts: int = 3
    # 0: the judge runs in the sweep driver (local judge, HTTP judges); N: a pool of N Ray actors
    # (adapters.ray_pool.JudgePool), e.g. one vLLM engine per GPU; GPUs per actor follow tensor_parallel_size.
    judge_actors: int = 0


@dataclass(frozen=True)
class SweepConfig:
    name: str
    path: Path
    datasets: tuple[DatasetSpec, ...]
    captioners: tuple[ComponentSpec, ...]
    prompts: tuple[str, ...]
    frames: tuple[str, ...]
    protocols: tuple[ComponentSpec, ...]
    judges: tuple[ComponentSpec, ...]
    options: SweepOptions = SweepOptions()


# field -> (type(s), required). Types are checked before anything else so errors are precise.
_TOP = {"name": (str, True), "datasets": (list, True), "captioners": (list, True), "prompts": (list, True),
        "frames": (list, True), "protocols": (list, True), "judges": (list, True), "options": (dict, False)}
_DATASET = {"name": (str, True), "kind": (str, True), "path": (str, False), "n_videos": (int, False),
            "seed": (int, False), "duration_s": ((int, float), False), "limit": (int, False)}
_COMPONENT = {"name": (str, True), "params": (dict, False), "label": (str, False)}
_JUDGE = {**_COMPONENT, "seeds": (list, False)}
_OPTIONS = {"caption_actors": (int, False), "batch_size": (int, False), "gpus_per_actor": ((int, float), False),
            "n_resamples": (int, False), "judge_batch_size": (int, False), "max_restarts": (int, False),
            "judge_actors": (int, False)}
_DATASET_KINDS = ("synthetic", "items")
_FRAME_SPEC = re.compile(r"^[a-z_]+:[0-9.]+(?:[,:@][a-z0-9_.=]+)*$")


class _Checker:
    def __init__(self, path: Path, text: str):
        self.path, self.lines = path, text.splitlines()

    def fail(self, where: str, message: str, key: str | None = None) -> None:
        line = self._line_of(where, key)
        at = f", line {line}" if line else ""
        raise SweepFileError(f"{self.path}{at}: {where}: {message}")

    def _line_of(self, where: str, key: str | None) -> int | None:
        """Best-effort line of `where` (e.g. "judges[1].seeds"): tomllib gives no positions, so walk the text:
        the (i+1)-th `[[judges]]` header (TOML) or i-th `- ` item under `judges:` (YAML), then the key's line."""
        pos = 0
        parts = [p for p in where.split(".") if p and p != "top level"]
        for part in parts:
            m = re.match(r"^(\w+)(?:\[(\d+)\])?$", part)
            if not m:
                return None
            name, idx = m.group(1), m.group(2)
            found = self._find(rf"^\s*\[\[\s*{name}\s*\]\]", pos, int(idx) + 1) if idx is not None else None
            if found is None:
                found = self._find(rf"^\s*(-\s*)?{{?\s*{name}\s*[=:]", pos, 1) or self._find(
                    rf"^\s*\[\s*{name}\s*\]", pos, 1)
                if found is not None and idx is not None and not self.lines[found - 1].rstrip().endswith("]"):
                    found = self._find(r"^\s*-", found, int(idx) + 1) or found
            if found is None:
                break
            pos = found
        if key and (not parts or parts[-1].split("[")[0] != key):
            hit = self._find(rf"^\s*(-\s*)?{re.escape(key)}\s*[=:]", pos, 1)
            pos = hit or pos
        return pos or None

    def _find(self, pattern: str, start: int, nth: int) -> int | None:
        rx = re.compile(pattern)
        for i in range(start, len(self.lines)):
            if rx.search(self.lines[i]):
                nth -= 1
                if nth == 0:
                    return i + 1
        return None

    def table(self, value: Any, spec: dict, where: str) -> dict:
        if not isinstance(value, dict):
            self.fail(where, f"expected a table, got {type(value).__name__}")
        for key in value:
            if key not in spec:
                self.fail(f"{where}.{key}" if where else key,
                          f"unknown key {key!r} (allowed: {', '.join(sorted(spec))})", key)
        for key, (types, required) in spec.items():
            name = f"{where}.{key}" if where else key
            if key not in value:
                if required:
                    self.fail(where or "top level", f"missing required key {key!r}", where.split("[")[0] or None)
                continue
            v = value[key]
            ok = isinstance(v, types) and not (isinstance(v, bool) and bool not in _as_tuple(types))
            if not ok:
                wanted = "/".join(t.__name__ for t in _as_tuple(types))
                self.fail(name, f"expected {wanted}, got {type(v).__name__} ({v!r})", key)
        return value


def _as_tuple(types) -> tuple:
    return types if isinstance(types, tuple) else (types,)


def _canonical_frame_spec(value: Any) -> str | None:
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return f"uniform:{value}"
    if isinstance(value, str) and _FRAME_SPEC.match(value.strip()):
        return value.strip()
    return None


def _registered(kind: str, name: str) -> str | None:
    """None when `name` is registered, else the registry's error text."""
    from engine.registry import lookup

    if kind == "captioner" and name == "vllm":
        # adapters.vllm_captioner is not among the registry's builtin modules yet; importing it registers "vllm".
        import importlib

        try:
            importlib.import_module("adapters.vllm_captioner")
        except ImportError:
            pass
    try:
        lookup(kind, name)
        return None
    except KeyError as exc:
        return str(exc.args[0]) if exc.args else str(exc)


def load_sweep(path: str | Path, *, check_registry: bool = True) -> SweepConfig:
    """Read and validate a sweep file; raises SweepFileError naming the file, field and line."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"sweep file not found: {path}")
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".toml":
        try:
            raw = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise SweepFileError(f"{path}: invalid TOML: {exc}") from None
    elif path.suffix in (".yaml", ".yml"):
        import yaml

        try:
            raw = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise SweepFileError(f"{path}: invalid YAML: {exc}") from None
    else:
        raise SweepFileError(f"{path}: sweep files are .toml, .yaml or .yml")
    return parse_sweep(raw, path=path, text=text, check_registry=check_registry)


def parse_sweep(raw: Any, *, path: Path, text: str = "", check_registry: bool = True) -> SweepConfig:
    from engine.prompts_library import PROMPTS

    c = _Checker(path, text)
    c.table(raw, _TOP, "")
    datasets = []
    for i, d in enumerate(raw["datasets"]):
        where = f"datasets[{i}]"
        c.table(d, _DATASET, where)
        if d["kind"] not in _DATASET_KINDS:
            c.fail(f"{where}.kind", f"unknown dataset kind {d['kind']!r} (known: {', '.join(_DATASET_KINDS)})", "kind")
        if d["kind"] == "items" and not d.get("path"):
            c.fail(where, "a dataset of kind 'items' needs `path` (an ITEMS-schema Parquet or JSONL file)", "kind")
        if d.get("n_videos", 1) < 1:
            c.fail(f"{where}.n_videos", "must be at least 1", "n_videos")
        datasets.append(DatasetSpec(**d))

    def components(key: str, spec: dict, kind: str) -> list[ComponentSpec]:
        out = []
        for i, comp in enumerate(raw[key]):
            where = f"{key}[{i}]"
            c.table(comp, spec, where)
            seeds = comp.get("seeds", [0])
            if not seeds or not all(isinstance(s, int) and not isinstance(s, bool) for s in seeds):
                c.fail(f"{where}.seeds", f"expected a non-empty list of integers, got {seeds!r}", "seeds")
            if check_registry:
                error = _registered(kind, comp["name"])
                if error:
                    c.fail(f"{where}.name", error, "name")
            out.append(ComponentSpec(comp["name"], dict(comp.get("params", {})), tuple(seeds), comp.get("label")))
        from engine.keys import canonical_json

        seen: dict[str, int] = {}
        for i, x in enumerate(out):
            ident = canonical_json([x.name, x.params, list(x.seeds)])
            if ident in seen:  # same content key: it would give the very same results twice
                c.fail(f"{key}[{i}]", f"identical to {key}[{seen[ident]}] (same name, params and seeds)", key)
            seen[ident] = i
        labels = [x.display for x in out]
        if len(set(labels)) != len(labels):
            c.fail(key, f"two entries show as the same name ({labels}); give one a distinct `label`", key)
        return out

    captioners = components("captioners", _COMPONENT, "captioner")
    protocols = components("protocols", _COMPONENT, "protocol")
    judges = components("judges", _JUDGE, "judge")
    for i, p in enumerate(raw["prompts"]):
        if not isinstance(p, str):
            c.fail(f"prompts[{i}]", f"expected a prompt id (str), got {type(p).__name__}", "prompts")
        if p not in PROMPTS:
            c.fail(f"prompts[{i}]", f"unknown caption prompt {p!r}; known: {', '.join(sorted(PROMPTS))}", "prompts")
    frames = []
    for i, f in enumerate(raw["frames"]):
        spec = _canonical_frame_spec(f)
        if spec is None:
            c.fail(f"frames[{i}]", f"not a frame spec: {f!r} (use e.g. 'uniform:8', 'fps:1' or a positive int)",
                   "frames")
        frames.append(spec)
    for key in ("datasets", "captioners", "prompts", "frames", "protocols", "judges"):
        if not raw[key]:
            c.fail(key, "must not be empty", key)
    options = SweepOptions(**c.table(raw.get("options", {}), _OPTIONS, "options"))
    if options.caption_actors < 1 or options.batch_size < 1:
        c.fail("options", "caption_actors and batch_size must be at least 1", "options")
    if options.judge_actors < 0:
        c.fail("options", "judge_actors must be 0 (judge in the driver) or a number of Ray actors", "options")
    return SweepConfig(raw["name"], path, tuple(datasets), tuple(captioners), tuple(dict.fromkeys(raw["prompts"])),
                       tuple(dict.fromkeys(frames)), tuple(protocols), tuple(judges), options)
