"""Construction pipelines come to `capeval construct` through the registry: each protocol's `construction` hook names
its pipeline (under the pipeline's own name), and neither the generic machinery (engine/construct/) nor the command
(engine/cli/construct.py) names a benchmark, so adding a benchmark's pipeline edits no file there."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ENGINE = Path(__file__).resolve().parents[2] / "engine"


def test_the_construction_machinery_and_command_name_no_protocol_and_no_pipeline():
    from capeval.engine import construct, registry

    names = set(registry.names("protocol")) | set(construct.pipelines())
    assert {"capquiz", "capability", "lvcap", "vcinspector", "capability-qa"} <= names  # what is looked for
    files = sorted((ENGINE / "construct").glob("*.py")) + [ENGINE / "cli" / "construct.py"]
    assert files
    hits = sorted(f"{path.relative_to(ENGINE.parent)}: {name}" for path in files for name in names
                  if re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", path.read_text(encoding="utf-8"), re.I))
    assert hits == []


def test_each_builtin_pipeline_is_its_protocols_construction():
    from capeval.engine import construct, registry

    offered = {registry.lookup("protocol", p).construction.name: p for p in registry.names("protocol")
               if registry.lookup("protocol", p).construction is not None}
    assert {k: v for k, v in offered.items() if k != "toy"} == {
        "capquiz": "capquiz", "capability-qa": "capability", "lvcap": "lvcap", "vcinspector": "vcinspector"}
    assert set(construct.pipelines()) == set(offered)
    assert type(construct.lookup("capability-qa")).__module__ == "capeval.engine.protocols.capability.construction"


class _Offering:
    def __init__(self, pipeline):
        self.construction = pipeline


def _registry_of(monkeypatch, protocols: dict):
    from capeval.engine import registry

    monkeypatch.setattr(registry, "names", lambda kind: sorted(protocols))
    monkeypatch.setattr(registry, "lookup", lambda kind, name: protocols[name])


def test_two_protocols_offering_one_pipeline_name_is_an_error_naming_both(monkeypatch):
    from capeval.engine import construct
    from capeval.engine.construct.pipeline import ConstructionPipeline

    class Same(ConstructionPipeline):
        name = "same"

    _registry_of(monkeypatch, {"a": _Offering(Same()), "b": _Offering(Same()), "c": _Offering(None)})
    with pytest.raises(ValueError, match="'same' is offered by protocols 'a' and 'b'"):
        construct.pipelines()


def test_an_unknown_pipeline_names_the_known_ones(monkeypatch):
    from capeval.engine import construct
    from capeval.engine.construct.pipeline import ConstructionPipeline

    class Built(ConstructionPipeline):
        name = "built"

    _registry_of(monkeypatch, {"p": _Offering(Built()), "q": _Offering(None)})
    assert list(construct.pipelines()) == ["built"]
    with pytest.raises(KeyError, match="unknown construction pipeline 'nope'; known: built"):
        construct.lookup("nope")
