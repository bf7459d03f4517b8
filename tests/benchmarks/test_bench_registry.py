"""`capeval bench` finds benchmarks through the `capeval.benchmarks` entry point group (engine/cli/bench.py): the
installed `capeval` script lists every entry point of the group with its module's first docstring line, and a
benchmark that a distribution outside this project declares (a dist-info folder on PYTHONPATH naming a function in a
module whose name has nothing to do with the benchmark's) is listed and runs, its arguments passed through and its
return value the exit code. An unknown name lists the valid ones and exits 2."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path

import pytest

CAPEVAL = Path(sys.executable).with_name("capeval")  # the script the editable install wrote into the venv


def _capeval(args: list[str], env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([str(CAPEVAL), *args], capture_output=True, text=True, timeout=120, env=env)


def _listed(stdout: str) -> dict[str, str]:
    return {line.split()[0]: line.split(None, 1)[1] for line in stdout.splitlines() if line.strip()}


@pytest.fixture(scope="module")
def plugin_env(tmp_path_factory) -> dict:
    """PYTHONPATH holding a module `timing_probe_xyz` and the metadata of a distribution `capeval-probe-bench` whose
    entry point `probe` names its function `measure`."""
    root = tmp_path_factory.mktemp("probe_site")
    (root / "timing_probe_xyz.py").write_text(
        '"""A probe benchmark from outside capeval: echoes its arguments as JSON."""\n'
        "import json\n\n\n"
        "def measure(argv):\n"
        "    print(json.dumps({'probe_argv': argv}))\n"
        "    return 5 if '--fail' in argv else 0\n")
    dist = root / "capeval_probe_bench-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: capeval-probe-bench\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[capeval.benchmarks]\nprobe = timing_probe_xyz:measure\n")
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")]))}


def test_list_shows_every_entry_point_of_the_group_with_its_docstring_line():
    assert CAPEVAL.exists(), f"no capeval script beside {sys.executable}"
    declared = {ep.name: ep for ep in entry_points(group="capeval.benchmarks")}
    assert {"kernels", "judge", "decode", "caption"} <= set(declared)
    for args in (["bench", "--list"], ["bench"]):
        done = _capeval(args)
        assert done.returncode == 0, done.stderr
        listed = _listed(done.stdout)
        assert set(listed) == set(declared), (listed, declared)
        for name, ep in declared.items():
            assert listed[name] == importlib.import_module(ep.module).__doc__.strip().splitlines()[0]


def test_benchmark_declared_by_another_distribution_is_listed_and_runs(plugin_env):
    listed = _listed(_capeval(["bench", "--list"], plugin_env).stdout)
    assert listed["probe"] == "A probe benchmark from outside capeval: echoes its arguments as JSON."
    assert "kernels" in listed  # the project's own still register beside it
    done = _capeval(["bench", "probe", "--json", "--quick"], plugin_env)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"probe_argv": ["--json", "--quick"]}
    assert _capeval(["bench", "probe", "--fail"], plugin_env).returncode == 5  # main's return value is the exit code


def test_without_the_distribution_the_probe_is_unknown_and_the_valid_names_are_listed():
    done = _capeval(["bench", "probe"])
    assert done.returncode == 2 and not done.stdout
    assert "unknown benchmark 'probe'" in done.stderr
    for ep in entry_points(group="capeval.benchmarks"):
        assert f"\n{ep.name} " in done.stderr
