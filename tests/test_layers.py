"""The import rules that keep capeval's layers one-way, read from the source with `ast` (nothing is imported).

Every import counts wherever it is written: at module level, inside a function, under `if TYPE_CHECKING:`, and
`importlib.import_module("...")` with a literal name. A function-level import hides a cycle from Python's import
machinery but not from the design: the two modules still cannot be understood, tested or moved apart.

The rules:
* kernels/ is the bottom: it imports nothing from engine, adapters or benchmarks;
* engine/ and adapters/ never import benchmarks/ (benchmarks measure the engine, not the other way round);
* a protocol (engine/protocols/**) sees only what lies below it: never the judging loop, the stages, the sweep, the
  report, the CLI, the staging, or a backend (adapters); a backend reaches it through an interface it is handed;
* the generic engine (report, sweep, judging, datasets, metrics, stages, store, frames, inputs, staging) never names
  one protocol: it goes through capeval.engine.protocols.base / the registry, so a new protocol needs no engine edit;
* no import cycles among the modules of engine/, adapters/, kernels/.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCANNED = ("engine", "adapters", "kernels", "benchmarks", "cluster")
CYCLE_SCOPE = ("capeval.engine", "capeval.adapters", "capeval.kernels")

PROTOCOL_FORBIDDEN = ("capeval.engine.judging", "capeval.engine.stages", "capeval.engine.sweep", "capeval.engine.report", "capeval.engine.cli",
                      "capeval.engine.staging", "capeval.adapters")
GENERIC_ENGINE = tuple(f"capeval.engine.{p}" for p in ("report", "sweep", "judging", "datasets", "metrics", "stages", "store",
                                               "frames", "inputs")) + ("capeval.engine.staging", "capeval.engine.staging_items")
PROTOCOL_INTERFACE = ("capeval.engine.protocols", "capeval.engine.protocols.base")


@dataclass(frozen=True)
class Import:
    source: str  # dotted name of the importing module
    path: str  # its file, relative to the scanned root
    line: int
    target: str  # dotted name of the module imported (a submodule when `from pkg import sub` names one)

    def where(self) -> str:
        return f"{self.path}:{self.line} imports {self.target}"


def module_files(root: Path, tops=SCANNED) -> dict[str, Path]:
    """Dotted module name -> file, for every .py under the top-level folders (a package is its __init__.py)."""
    found = {}
    for top in tops:
        for path in sorted((root / top).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join(("capeval",) + parts)] = path
    return found


def _within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def _resolve_relative(module: str, is_package: bool, level: int, name: str | None) -> str:
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (level - 1)] if level > 1 else base
    return ".".join(base + ([name] if name else []))


def _literal_import_module(call: ast.Call) -> str | None:
    """The module named by `importlib.import_module("x")` / `import_module("x")` / `__import__("x")`, if literal."""
    func = call.func
    called = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
    if called not in ("import_module", "__import__") or not call.args:
        return None
    first = call.args[0]
    return first.value if isinstance(first, ast.Constant) and isinstance(first.value, str) else None


def collect_imports(root: Path, tops=SCANNED) -> tuple[list[Import], dict[str, Path]]:
    """Every import written in the scanned files, at any depth, with the module each one names."""
    modules = module_files(root, tops)
    imports = []
    for module, path in modules.items():
        is_package = path.name == "__init__.py"
        rel = str(path.relative_to(root))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=rel)):
            targets = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = _resolve_relative(module, is_package, node.level, node.module) if node.level else node.module
                # `from pkg import sub` imports the submodule when there is one; otherwise a name of pkg
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
            elif isinstance(node, ast.Call) and (named := _literal_import_module(node)):
                targets = [_resolve_relative(module, is_package, 1, named[1:]) if named.startswith(".") else named]
            imports += [Import(module, rel, node.lineno, t) for t in dict.fromkeys(targets)]
    return imports, modules


def rule_violations(imports: list[Import]) -> dict[str, list[str]]:
    """Rule name -> the imports breaking it, each as 'file:line imports module'."""
    broken = defaultdict(list)
    for imp in sorted(imports, key=lambda i: (i.path, i.line, i.target)):
        if _within(imp.source, "capeval.kernels") and any(_within(imp.target, "capeval." + p) for p in ("engine", "adapters", "benchmarks")):
            broken["kernels"].append(imp.where())
        if (_within(imp.source, "capeval.engine") or _within(imp.source, "capeval.adapters")) and _within(imp.target, "capeval.benchmarks"):
            broken["benchmarks"].append(imp.where())
        if _within(imp.source, "capeval.engine.protocols") and any(_within(imp.target, p) for p in PROTOCOL_FORBIDDEN):
            broken["protocols"].append(imp.where())
        if (any(_within(imp.source, g) for g in GENERIC_ENGINE) and _within(imp.target, "capeval.engine.protocols")
                and imp.target not in PROTOCOL_INTERFACE):
            broken["generic_engine"].append(imp.where())
    return broken


def import_cycles(imports: list[Import], modules: dict[str, Path], scope=CYCLE_SCOPE) -> list[list[Import]]:
    """The import cycles among module files (strongly connected components of more than one module, or a module
    importing itself): each as the imports that form it. Edges into a package's __init__ are left out: importing a
    package for its re-exports does not tie the importer to the package's other modules."""
    packages = {m for m, p in modules.items() if p.name == "__init__.py"}
    in_scope = {m for m in modules if any(_within(m, s) for s in scope)}
    edges = defaultdict(list)
    for imp in sorted(imports, key=lambda i: (i.path, i.line, i.target)):
        if imp.source in in_scope and imp.target in in_scope and imp.target not in packages:
            edges[imp.source].append(imp)

    # Tarjan's strongly connected components, iterative (no recursion limit on deep chains)
    index, low, on_stack, stack, components, counter = {}, {}, set(), [], [], 0
    for start in sorted(in_scope):
        if start in index:
            continue
        work = [(start, 0)]
        while work:
            node, i = work.pop()
            if i == 0:
                index[node] = low[node] = counter
                counter += 1
                stack.append(node)
                on_stack.add(node)
            out = edges[node]
            if i < len(out):
                work.append((node, i + 1))
                nxt = out[i].target
                if nxt not in index:
                    work.append((nxt, 0))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            if work:  # propagate to the caller
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                components.append(component)
    cycles = []
    for component in components:
        inner = [imp for m in sorted(component) for imp in edges[m] if imp.target in component]
        if len(component) > 1 or inner:
            cycles.append(inner)
    return cycles


def _report(lines: list[str]) -> str:
    return "\n  " + "\n  ".join(lines)


_IMPORTS, _MODULES = collect_imports(ROOT)
_BROKEN = rule_violations(_IMPORTS)


def test_kernels_import_nothing_above_them():
    assert not _BROKEN["kernels"], "kernels/ must not import engine, adapters or benchmarks:" + _report(
        _BROKEN["kernels"])


def test_engine_and_adapters_never_import_benchmarks():
    assert not _BROKEN["benchmarks"], "engine/ and adapters/ must not import benchmarks:" + _report(
        _BROKEN["benchmarks"])


def test_protocols_import_only_what_lies_below_them():
    assert not _BROKEN["protocols"], (
        "engine/protocols/** must not import " + ", ".join(PROTOCOL_FORBIDDEN) + ":" + _report(_BROKEN["protocols"]))


def test_generic_engine_names_no_single_protocol():
    assert not _BROKEN["generic_engine"], (
        "report/sweep/judging/datasets/metrics/stages/store/frames/inputs/staging import a protocol's own module "
        "(only capeval.engine.protocols and capeval.engine.protocols.base are allowed):" + _report(_BROKEN["generic_engine"]))


def test_no_import_cycles():
    cycles = import_cycles(_IMPORTS, _MODULES)
    assert not cycles, "import cycles among engine/, adapters/, kernels/ modules:" + "".join(
        _report([imp.where() for imp in cycle]) + "\n" for cycle in cycles)


def test_the_checker_sees_the_project():
    """The scan really reads the project: a module-level import and one inside a function are both found."""
    seen = {(imp.source, imp.target) for imp in _IMPORTS}
    assert ("capeval.engine.replies.repair", "capeval.engine.replies.fences") in seen  # module level
    assert ("capeval.engine.cli.capquiz", "capeval.adapters.local_judge") in seen  # inside sentence_embeddings()
    assert len(_MODULES) > 100 and len(_IMPORTS) > 500


def test_the_checker_reports_a_protocol_reaching_up_and_a_cycle(tmp_path):
    files = {
        "engine/__init__.py": "",
        "engine/judging/__init__.py": "",
        "engine/judging/loop.py": "X = 1\n",
        "engine/protocols/__init__.py": "",
        "engine/protocols/base.py": "",
        "engine/protocols/toy/__init__.py": "",
        # the upward import is inside a function, where Python would only run it late
        "engine/protocols/toy/parsing.py": "import json\n\n\ndef parse():\n    from capeval.engine.judging import loop\n",
        "engine/protocols/toy/prompts.py": "import importlib\nm = importlib.import_module('capeval.adapters.backend')\n",
        "engine/report/__init__.py": "",
        "engine/report/tables.py": "from capeval.engine.protocols import base\nfrom capeval.engine.protocols.toy import parsing\n",
        "engine/store/__init__.py": "",
        "engine/store/a.py": "from . import b\n",
        "engine/store/b.py": "def f():\n    from capeval.engine.store.a import g\n",
        "engine/store/c.py": "from capeval.engine import store\nfrom capeval.engine.store import a\n",  # into the cycle, not part of it
        "engine/store/d.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import capeval.benchmarks.bench\n",
        "adapters/__init__.py": "",
        "adapters/backend.py": "",
        "benchmarks/__init__.py": "",
        "benchmarks/bench.py": "",
        "kernels/__init__.py": "",
        "kernels/k.py": "from capeval.engine.store.c import x\n",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    imports, modules = collect_imports(tmp_path)
    broken = rule_violations(imports)
    assert broken["kernels"] == ["kernels/k.py:1 imports capeval.engine.store.c"]
    assert broken["benchmarks"] == ["engine/store/d.py:3 imports capeval.benchmarks.bench"]
    assert broken["protocols"] == ["engine/protocols/toy/parsing.py:5 imports capeval.engine.judging.loop",
                                   "engine/protocols/toy/prompts.py:2 imports capeval.adapters.backend"]
    assert broken["generic_engine"] == ["engine/report/tables.py:2 imports capeval.engine.protocols.toy.parsing"]
    cycles = import_cycles(imports, modules)
    assert [[imp.where() for imp in cycle] for cycle in cycles] == [
        ["engine/store/a.py:1 imports capeval.engine.store.b", "engine/store/b.py:2 imports capeval.engine.store.a"]]
