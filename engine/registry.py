"""The one registry of every kind of plugin: protocols, judges, captioners, dataset kinds and benchmarks. The CLI and
sweep files refer to a plugin by name; `lookup(kind, name)` finds it and `names(kind)` lists them.

Plugins are declared as entry points (group `capeval.<kind>s`: `capeval.protocols`, `capeval.judges`,
`capeval.captioners`, `capeval.dataset_kinds`, `capeval.benchmarks`), this project's own builtins in its
pyproject.toml like any other distribution's, so a plugin defined outside engine/ needs no engine file edited
(docs/architecture.md). An entry point names the registered object (`<name> = "capeval.engine.protocols.<name>:
PROTOCOL"`, `kernels = "capeval.benchmarks.bench_kernels:main"`), which is registered under the entry point's name;
one that names a bare module registers whatever that module registers on import (`register`). Entry points are
loaded when a name is looked up, so a plugin's module is imported only when it is asked for (or listed).

`register(kind, name)(obj)` registers an object at run time (a test's protocol or judge)."""

from __future__ import annotations

from importlib.metadata import EntryPoint, entry_points
from typing import Callable, TypeVar

T = TypeVar("T")

#: kind -> how messages name it
KINDS = {"protocol": "protocol", "judge": "judge", "captioner": "captioner", "dataset_kind": "dataset kind",
         "benchmark": "benchmark"}
ENTRY_POINT_GROUPS = {kind: f"capeval.{kind}s" for kind in KINDS}

_REGISTRIES: dict[str, dict[str, object]] = {kind: {} for kind in KINDS}
_ALL_LOADED: set[str] = set()  # kinds whose every entry point has been loaded (a scan reads every dist's metadata)


def register(kind: str, name: str) -> Callable[[T], T]:
    """A decorator (or call: `register("judge", "x")(obj)`) registering `obj` as the `kind` called `name`; the same
    name registered twice with different objects is an error."""
    registry = _REGISTRIES[kind]

    def decorator(obj: T) -> T:
        existing = registry.get(name)
        if existing is not None and existing is not obj:
            raise ValueError(f"{KINDS[kind]} {name!r} is registered twice ({existing!r} and {obj!r})")
        registry[name] = obj
        return obj

    return decorator


def _load(kind: str, ep: EntryPoint) -> None:
    """Import one entry point and register what it names. A plugin that fails to import is an error naming it: a
    silently missing protocol would look like a typo in a sweep file."""
    try:
        loaded = ep.load()
    except Exception as exc:  # noqa: BLE001 -- re-raised with the plugin named
        raise ImportError(f"capeval plugin {ep.name!r} ({ep.value}, entry point group {ep.group}) failed to "
                          f"load: {exc}") from exc
    if ep.attr:  # `module:object` names the registered thing itself; a bare module registered itself on import
        register(kind, ep.name)(loaded)


def _load_all(kind: str) -> None:
    if kind in _ALL_LOADED:
        return
    for ep in entry_points(group=ENTRY_POINT_GROUPS[kind]):
        if ep.name not in _REGISTRIES[kind]:
            _load(kind, ep)
    _ALL_LOADED.add(kind)


def lookup(kind: str, name: str):
    """The `kind` registered as `name`: its entry point is loaded on first use. An unknown name is a KeyError that
    lists the registered names."""
    registry = _REGISTRIES[kind]
    if name not in registry and kind not in _ALL_LOADED:
        for ep in entry_points(group=ENTRY_POINT_GROUPS[kind], name=name):
            _load(kind, ep)
        if name not in registry:  # a bare-module plugin may register names other than its entry point's
            _load_all(kind)
    try:
        return registry[name]
    except KeyError:
        known = ", ".join(sorted(registry)) or "none"
        raise KeyError(f"unknown {KINDS[kind]} {name!r}; registered: {known}") from None


def names(kind: str) -> list[str]:
    _load_all(kind)
    return sorted(_REGISTRIES[kind])
