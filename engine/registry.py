"""Registries with decorators (as inspect_ai does): a new protocol, judge or captioner is one file that registers
itself; the CLI and sweep files refer to it by name."""

from __future__ import annotations

import importlib
from typing import Callable, TypeVar

T = TypeVar("T")

_REGISTRIES: dict[str, dict[str, object]] = {"protocol": {}, "judge": {}, "captioner": {}}
# Modules imported on first lookup so that registration does not depend on import order elsewhere.
_BUILTIN_MODULES = {
    "protocol": [f"engine.protocols.{p}" for p in ("capquiz", "lvcap", "capability", "vidcapbench", "vcinspector")],
    "judge": ["adapters.local_judge", "adapters.vllm_engine", "adapters.openai_http", "adapters.replay"],
    "captioner": ["adapters.vllm_captioner", "adapters.openai_http", "adapters.local_captioner"],
}


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


def _load_builtins(kind: str) -> None:
    for module in _BUILTIN_MODULES[kind]:
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as exc:
            # Only a missing builtin module itself is tolerated (optional backends); a broken import is an error.
            if exc.name != module:
                raise


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
