"""Registries with decorators (as inspect_ai does): a new protocol, judge or captioner is one file that registers
itself; the CLI and sweep files refer to it by name.

Besides the builtin modules, packages installed elsewhere register through entry points (group `capeval.<kind>`s,
e.g. `capeval.protocols`: `toy = "my_pkg.toy"`); loading the entry point's module runs its registration, so a
protocol defined outside engine/ needs no engine file edited (docs/architecture.md). An entry point that names an
object (`kernels = "capeval.benchmarks.bench_kernels:main"`) registers that object under the entry point's name: that is
how benchmarks register (engine/cli/bench.py), so no module of theirs imports the engine's registry."""

from __future__ import annotations

import importlib
from typing import Callable, TypeVar

T = TypeVar("T")

_REGISTRIES: dict[str, dict[str, object]] = {"protocol": {}, "judge": {}, "captioner": {}, "benchmark": {}}
# Modules imported on first lookup so that registration does not depend on import order elsewhere.
_BUILTIN_MODULES = {
    "protocol": [f"capeval.engine.protocols.{p}" for p in ("capquiz", "lvcap", "capability", "vidcapbench", "vcinspector")],
    "judge": ["capeval.adapters.local_judge", "capeval.adapters.vllm_engine", "capeval.adapters.openai_http", "capeval.adapters.replay",
              "capeval.adapters.openai_batch", "capeval.adapters.vllm_batch"],
    "captioner": ["capeval.adapters.vllm_captioner", "capeval.adapters.openai_http", "capeval.adapters.local_captioner"],
    "benchmark": [],
}
ENTRY_POINT_GROUPS = {kind: f"capeval.{kind}s" for kind in _REGISTRIES}


def _register(kind: str, name: str) -> Callable[[T], T]:
    def decorator(obj: T) -> T:
        existing = _REGISTRIES[kind].get(name)
        if existing is not None and existing is not obj:
            raise ValueError(f"{kind} {name!r} is registered twice ({existing!r} and {obj!r})")
        _REGISTRIES[kind][name] = obj
        return obj

    return decorator


def register_protocol(name: str):
    return _register("protocol", name)


def register_judge(name: str):
    return _register("judge", name)


def register_captioner(name: str):
    return _register("captioner", name)


def register_benchmark(name: str):
    return _register("benchmark", name)


_LOADED: set[str] = set()


def _load_builtins(kind: str) -> None:
    if kind in _LOADED:  # entry points are scanned once per process (a scan reads every installed dist's metadata)
        return
    for module in _BUILTIN_MODULES[kind]:
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as exc:
            # Only a missing builtin module itself is tolerated (optional backends); a broken import is an error.
            if exc.name != module:
                raise
    _load_entry_points(kind)
    _LOADED.add(kind)


def _load_entry_points(kind: str) -> None:
    """Import each installed `capeval.<kind>s` entry point's module (its import registers it). A plugin that fails
    to import is an error naming the plugin: a silently missing protocol would look like a typo in a sweep file."""
    from importlib.metadata import entry_points

    for ep in entry_points(group=ENTRY_POINT_GROUPS[kind]):
        try:
            loaded = ep.load()
        except Exception as exc:  # noqa: BLE001 -- re-raised with the plugin named
            raise ImportError(f"capeval plugin {ep.name!r} ({ep.value}, entry point group {ep.group}) failed to "
                              f"load: {exc}") from exc
        if ep.attr:  # `module:object` names the registered thing itself; a bare module registered itself on import
            _register(kind, ep.name)(loaded)


def lookup(kind: str, name: str):
    if name not in _REGISTRIES[kind]:
        _load_builtins(kind)
    try:
        return _REGISTRIES[kind][name]
    except KeyError:
        known = ", ".join(sorted(_REGISTRIES[kind])) or "none"
        raise KeyError(f"unknown {kind} {name!r}; registered: {known}") from None


def names(kind: str) -> list[str]:
    _load_builtins(kind)
    return sorted(_REGISTRIES[kind])
