"""`pip install` of the project into a fresh virtual environment (issue 27, item 4): the only name it adds at the top
of site-packages is `capeval` (with its dist-info), so `import engine` fails there while `import capeval` works;
the `capeval` command runs; what the product reads at run time (the demo's sweep file, protocol packs, the compiled
kernels) is installed with it; and docs/api.md's example runs there, from a folder outside the checkout.

No network: the fresh venv is made without pip, and a .pth file in it (added by this test, never to the checkout)
puts this interpreter's site-packages on its path (and runs the environment's torchvision hook), so pip, the build backend (setuptools, Cython, numpy: hence
--no-build-isolation) and capeval's dependencies are found. The install is built from a copy of the checkout's
files, so the build leaves nothing in the checkout."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from _api_page import run_page

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
DEPS_PTH = "capeval_test_deps.pth"


def _checkout_files() -> list[str]:
    listed = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            capture_output=True, text=True, check=True).stdout
    return [name for name in listed.split("\0") if name and (ROOT / name).is_file()]


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(python of the fresh venv, its site-packages, an environment that sees nothing of the checkout)."""
    tmp = tmp_path_factory.mktemp("packaging")
    source = tmp / "source"
    for name in _checkout_files():
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, source / name)
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    deps = dict.fromkeys([sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]])
    # the environment's start-up hook for torchvision on the CPU torch (scripts/env.sh) comes along: a .pth in a
    # folder named by another .pth is not run
    hook = Path(sysconfig.get_paths()["purelib"]) / "zz_capeval_torchvision.pth"
    (site / DEPS_PTH).write_text("".join(f"{d}\n" for d in deps) + (hook.read_text() if hook.is_file() else ""))
    home = tmp / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "CAPEVAL_MODEL_CACHE", "VIRTUAL_ENV")}
    env.update(HOME=str(home), PATH=f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}", PIP_NO_INDEX="1")
    done = subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", str(source)],
                          cwd=tmp, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    return python, site, env


def _run(python: Path, code: str, env: dict, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(python), "-c", code], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def test_only_capeval_lands_at_the_top_of_site_packages(installed):
    _, site, _ = installed
    top = {p.name for p in site.iterdir() if p.name != "__pycache__"}
    assert top == {"capeval", "capeval-0.1.0.dist-info", DEPS_PTH}, sorted(top)
    installed_tops = {p.name for p in (site / "capeval").iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert installed_tops == {"engine", "adapters", "kernels", "benchmarks", "testing"}
    assert not (site / "capeval" / "engine" / "root").exists()  # engine/root/ installs once, as capeval itself


def test_capeval_imports_and_engine_does_not(installed, tmp_path):
    python, site, env = installed
    done = _run(python, "import engine", env, tmp_path)
    assert done.returncode != 0 and "No module named 'engine'" in done.stderr, done.stderr[-2000:]
    code = ("import capeval, capeval.engine.api, capeval.testing, capeval.kernels._aggregate\n"
            "from capeval.engine.cli.demo import DEMO_FILE\n"
            "from capeval.engine.runrecord import git_revision\n"
            "print(capeval.__file__); print(DEMO_FILE.is_file(), DEMO_FILE); print(git_revision())")
    done = _run(python, code, env, tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    capeval_file, demo, revision = done.stdout.splitlines()
    assert Path(capeval_file).parent == site / "capeval"
    assert demo == f"True {site / 'capeval' / 'engine' / 'cli' / 'demo.toml'}"
    assert revision == "None"  # an install is no checkout


def test_capeval_command_runs_and_finds_what_ships_in_the_package(installed, tmp_path):
    python, site, env = installed
    helped = subprocess.run(["capeval", "--help"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert helped.returncode == 0 and "usage: capeval" in helped.stdout, helped.stderr[-2000:]
    assert shutil.which("capeval", path=env["PATH"]) == str(python.parent / "capeval")
    demo = site / "capeval" / "engine" / "cli" / "demo.toml"
    checked = subprocess.run(["capeval", "sweep", str(demo), "--check"], cwd=tmp_path, env=env, capture_output=True,
                             text=True, timeout=300)
    assert checked.returncode == 0 and "valid; 4 cells" in checked.stdout, checked.stdout + checked.stderr[-2000:]
    # the model cache of an install is the user's, never inside site-packages
    built_at = _run(python, "from capeval.adapters.smollm2 import default_dir; print(default_dir())", env, tmp_path)
    assert built_at.stdout.strip() == str(Path(env["HOME"]) / ".cache" / "capeval" / "models" / "smollm2-135m-instruct")


def test_api_page_example_runs_in_the_install(installed, tmp_path):
    python, _, env = installed
    done = run_page(str(python), tmp_path, env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    assert (tmp_path / "runs" / "shapes" / "results.parquet").is_file()
