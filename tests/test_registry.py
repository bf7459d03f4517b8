"""The one registry (capeval.engine.registry) for every kind of plugin: the builtins are the entry points
pyproject.toml declares, a distribution installed elsewhere adds its own the same way (a dist-info folder on
PYTHONPATH here), an unknown name lists the registered ones, and a plugin that fails to import is an error naming it.
Each case runs in a fresh interpreter, so what other tests registered does not count."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
KINDS = {"protocol": "capeval.protocols", "judge": "capeval.judges", "captioner": "capeval.captioners",
         "dataset_kind": "capeval.dataset_kinds", "benchmark": "capeval.benchmarks"}

PROBE = """
import json, sys
from capeval.engine import registry

out = {"names": {kind: registry.names(kind) for kind in sys.argv[1].split(",") if kind}}
try:
    registry.lookup(sys.argv[2], sys.argv[3])
except (KeyError, ImportError) as exc:
    out["error"] = [type(exc).__name__, str(exc.args[0])]
print(json.dumps(out))
"""


def _probe(tmp_path: Path, kinds, kind: str, name: str, site: Path | None = None) -> dict:
    path = os.pathsep.join(([str(site)] if site else []) + [os.environ.get("PYTHONPATH", "")])
    done = subprocess.run([sys.executable, "-c", PROBE, ",".join(kinds), kind, name], cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": path}, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _site(root: Path, entry_points: str, modules: dict[str, str]) -> Path:
    dist = root / "plugin_probe-0.1.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: plugin-probe\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(entry_points)
    for name, text in modules.items():
        (root / f"{name}.py").write_text(text)
    return root


def test_the_builtins_are_the_entry_points_pyproject_declares(tmp_path):
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"]
    out = _probe(tmp_path, KINDS, "judge", "no-such-judge")
    for kind, group in KINDS.items():
        assert set(declared[group]) <= set(out["names"][kind]), (kind, "reinstall after editing pyproject.toml's "
                                                                       "entry points: pip install -e .")
    assert out["error"] == ["KeyError", "unknown judge 'no-such-judge'; registered: "
                            + ", ".join(out["names"]["judge"])]


def test_a_plugin_registers_through_its_entry_point_under_the_entry_points_name(tmp_path):
    site = _site(tmp_path / "site", "[capeval.judges]\nprobe-judge = probe_judge:ProbeJudge\n\n"
                                    "[capeval.dataset_kinds]\nprobe-kind = probe_judge:KIND\n",
                 {"probe_judge": "class ProbeJudge:\n    name = 'probe'\n\nKIND = object()\n"})
    out = _probe(tmp_path, ("judge", "dataset_kind"), "dataset_kind", "no-such-kind", site)
    assert "probe-judge" in out["names"]["judge"] and "replay" in out["names"]["judge"]
    assert "probe-kind" in out["names"]["dataset_kind"] and "synthetic" in out["names"]["dataset_kind"]
    assert out["error"][0] == "KeyError" and out["error"][1].startswith("unknown dataset kind 'no-such-kind'; "
                                                                        "registered: ")
    assert "probe-kind" in out["error"][1]


@pytest.mark.parametrize("kind,group", [("protocol", "capeval.protocols"), ("captioner", "capeval.captioners")])
def test_a_plugin_that_fails_to_import_is_an_error_naming_it(tmp_path, kind, group):
    site = _site(tmp_path / "site", f"[{group}]\nbroken-plugin = broken_plugin:THING\n",
                 {"broken_plugin": "import a_module_nobody_installed_xyz\nTHING = 1\n"})
    out = _probe(tmp_path, (), kind, "broken-plugin", site)
    assert out["error"][0] == "ImportError"
    assert "'broken-plugin'" in out["error"][1] and "broken_plugin:THING" in out["error"][1]
    assert "a_module_nobody_installed_xyz" in out["error"][1]
