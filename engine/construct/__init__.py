"""Construction pipelines (`capeval construct NAME`): a benchmark's own recipe for building items, run on any judge
backend through the judging path (engine/construct/base.py).

This package holds the generic machinery only (steps on the judging path, the per-item record, the outputs). A
benchmark's pipeline lives in its own package (engine/protocols/<name>/construction.py) and is found through the
registry: each registered protocol's `construction` hook (capeval.engine.protocols.base.JudgeProtocol) names its
pipeline, so a protocol installed from another distribution brings `capeval construct` its pipeline with no engine
file edited. Users type the pipeline's own `name`, which need not be its protocol's.
"""

from __future__ import annotations

from capeval.engine import registry

from .pipeline import ConstructionPipeline


def pipelines() -> dict[str, ConstructionPipeline]:
    """name -> pipeline, from every registered protocol that has one, sorted by name; two protocols offering
    pipelines of the same name is an error naming both."""
    found: dict[str, tuple[str, ConstructionPipeline]] = {}
    for protocol_name in registry.names("protocol"):
        pipeline = registry.lookup("protocol", protocol_name).construction
        if pipeline is None:
            continue
        if pipeline.name in found:
            raise ValueError(f"construction pipeline {pipeline.name!r} is offered by protocols "
                             f"{found[pipeline.name][0]!r} and {protocol_name!r}")
        found[pipeline.name] = (protocol_name, pipeline)
    return {name: found[name][1] for name in sorted(found)}


def lookup(name: str) -> ConstructionPipeline:
    known = pipelines()
    try:
        return known[name]
    except KeyError:
        raise KeyError(f"unknown construction pipeline {name!r}; known: {', '.join(known) or 'none'}") from None
