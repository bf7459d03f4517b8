"""Construction pipelines (`capeval construct NAME`): the benchmarks' own recipes for building items, run on any
judge backend through the judging path (engine/construct/base.py).

A pipeline is a `ConstructionPipeline` registered by name with `register_pipeline`; the builtin ones are imported on
first lookup from `_BUILTIN_MODULES` (one line per pipeline), so `capeval construct --list` and the CLI need no edit
when a pipeline is added. Pipelines are per-protocol features (like `capeval capquiz filter`): a pipeline module may
import its protocol's package; base.py names no protocol.
"""

from __future__ import annotations

import importlib

from .pipeline import ConstructionPipeline, PipelineResult  # noqa: F401

_PIPELINES: dict[str, ConstructionPipeline] = {}
#: name -> module that registers it (imported on first lookup)
_BUILTIN_MODULES = {
    "capquiz": "capeval.engine.construct.capquiz",
    "lvcap": "capeval.engine.construct.lvcap",
    "capability-qa": "capeval.engine.construct.capability_qa",
    "vcinspector": "capeval.engine.construct.vcinspector",
}


def register_pipeline(pipeline: ConstructionPipeline) -> ConstructionPipeline:
    existing = _PIPELINES.get(pipeline.name)
    if existing is not None and existing is not pipeline:
        raise ValueError(f"construction pipeline {pipeline.name!r} is registered twice")
    _PIPELINES[pipeline.name] = pipeline
    return pipeline


def _load(name: str) -> None:
    module = _BUILTIN_MODULES.get(name)
    if module is not None and name not in _PIPELINES:
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name != module:  # only a pipeline module not written yet is skipped; a broken import is an error
                raise


def names() -> list[str]:
    for name in _BUILTIN_MODULES:
        _load(name)
    return sorted(_PIPELINES)


def lookup(name: str) -> ConstructionPipeline:
    _load(name)
    try:
        return _PIPELINES[name]
    except KeyError:
        raise KeyError(f"unknown construction pipeline {name!r}; known: {', '.join(names()) or 'none'}") from None
