"""The import rules that keep capeval's layers one-way, read from the source with `ast` (nothing is imported).

The rule is the layer table of docs/architecture.md ("Layers, bottom to top"): this test parses it, puts every
module of the scanned folders in the row whose path matches it most closely, and checks each import against the
row's "may import" column. Editing the table changes the rule; a module no row names is an error.

Every import counts wherever it is written: at module level, inside a function, under `if TYPE_CHECKING:`, and
`importlib.import_module("...")` with a literal name. A function-level import hides a cycle from Python's import
machinery but not from the design: the two modules still cannot be understood, tested or moved apart.

Beside the table:
* no import cycles among the modules of engine/, adapters/, kernels/;
* no private name (`_x`) imported from another module; a private module (`_x.py`) only from its own package;
* a function-level import of the project's own modules says why on its line (`# deferred: ...`).
The rules the table must keep (kernels at the bottom, nothing of the product importing benchmarks/, protocols below
the judging loop, no benchmark named by the generic engine) are checked on the parsed table itself.
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ARCHITECTURE = ROOT / "docs" / "architecture.md"
TABLE_HEADING = "## Layers, bottom to top"
CYCLE_SCOPE = ("capeval.engine", "capeval.adapters", "capeval.kernels")
ROOT_PACKAGE = "engine/root"  # installs as `capeval` itself (setup.py), never as capeval.engine.root
DEFERRED = re.compile(r"#\s*deferred:\s*\S")


@dataclass(frozen=True)
class Layer:
    name: str
    patterns: tuple[str, ...]  # paths relative to the repository root, as the table writes them
    may_import: frozenset[str]


def read_layers(text: str) -> list[Layer]:
    """The rows of the layer table under TABLE_HEADING, bottom to top: `| layer | modules | may import |`, the
    modules as backticked paths, "may import" as comma-separated layer names ("—" for none)."""
    section = text.split(TABLE_HEADING, 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("|")]
    header = [c.strip() for c in rows[0].strip("|").split("|")]
    assert header == ["layer", "modules", "may import"], f"layer table header is {header}"
    layers = []
    for line in rows[2:]:  # after the header and its |---| line
        name, modules, may = (c.strip() for c in line.strip().strip("|").split("|"))
        allowed = frozenset(n.strip() for n in may.split(",") if n.strip() not in ("", "—", "-"))
        layers.append(Layer(name, tuple(re.findall(r"`([^`]+)`", modules)), allowed))
    return layers


def _pattern_regex(pattern: str) -> re.Pattern:
    """`dir/` matches everything under dir; `<name>` one path part (a benchmark package); a trailing `*` a module
    or a package; anything else the file itself."""
    out = re.escape(pattern).replace(re.escape("<name>"), r"(?P<name>[^/]+)")
    if pattern.endswith("*"):
        out = out[: -len(re.escape("*"))] + r"[^/]*(?:/.*)?"
    else:
        out = out.replace(re.escape("*"), r"[^/]*")
    if pattern.endswith("/"):
        out += ".*"
    return re.compile(out + r"\Z")


def _specificity(pattern: str) -> int:
    return len(pattern.replace("<name>", "").replace("*", ""))


@dataclass(frozen=True)
class Place:
    layer: str
    package: str | None  # the benchmark package, for a row written with <name>


def place_of(path: str, layers: list[Layer]) -> Place | None:
    """The row a file (path relative to the root) belongs to: the matching pattern written most closely."""
    best = None
    for layer in layers:
        for pattern in layer.patterns:
            match = _pattern_regex(pattern).match(path)
            if match and (best is None or _specificity(pattern) > best[0]):
                best = (_specificity(pattern), Place(layer.name, match.groupdict().get("name")))
    return best[1] if best else None


def scanned_tops(layers: list[Layer]) -> tuple[str, ...]:
    """The top-level folders the table names: the ones scanned."""
    return tuple(dict.fromkeys(p.split("/")[0] for layer in layers for p in layer.patterns if "/" in p))


@dataclass(frozen=True)
class Import:
    source: str  # dotted name of the importing module
    path: str  # its file, relative to the scanned root
    line: int
    target: str  # dotted name of the module imported (a submodule when `from pkg import sub` names one)
    in_function: bool = False  # written inside a function (or a class) body
    deferred: bool = False  # its line says why: `# deferred: ...`
    names: tuple[str, ...] = ()  # the names a `from x import ...` takes

    def where(self) -> str:
        return f"{self.path}:{self.line} imports {self.target}"


def module_name(parts: tuple[str, ...]) -> str:
    """Dotted module name of a file's path parts (without .py): folders install as capeval.<folder>, and
    engine/root/ as `capeval` itself."""
    if parts[:2] == tuple(ROOT_PACKAGE.split("/")):
        parts = parts[2:]
    return ".".join(("capeval",) + parts)


def module_files(root: Path, tops) -> dict[str, Path]:
    """Dotted module name -> file, for every .py under the top-level folders (a package is its __init__.py)."""
    found = {}
    for top in tops:
        for path in sorted((root / top).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[module_name(parts)] = path
    return found


def compiled_modules(root: Path, tops) -> set[str]:
    """Dotted names of the Cython modules (built from a .pyx beside the Python files): imported, never parsed."""
    return {module_name(p.relative_to(root).with_suffix("").parts) for top in tops for p in (root / top).rglob("*.pyx")}


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


def _nodes_with_depth(tree: ast.AST):
    """Every node with whether it sits inside a function or class body."""
    stack = [(tree, False)]
    while stack:
        node, inside = stack.pop()
        yield node, inside
        nested = inside or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef))
        stack.extend((child, nested) for child in ast.iter_child_nodes(node))


def collect_imports(root: Path, tops=None) -> tuple[list[Import], dict[str, Path]]:
    """Every import written in the scanned files, at any depth, with the module each one names."""
    tops = tops or scanned_tops(read_layers(ARCHITECTURE.read_text(encoding="utf-8")))
    modules = module_files(root, tops)
    importable = set(modules) | compiled_modules(root, tops)
    imports = []
    for module, path in modules.items():
        is_package = path.name == "__init__.py"
        rel = str(path.relative_to(root))
        text = path.read_text(encoding="utf-8")
        lines = text.splitlines()
        for node, inside in _nodes_with_depth(ast.parse(text, filename=rel)):
            targets, names = [], ()
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = _resolve_relative(module, is_package, node.level, node.module) if node.level else node.module
                # `from pkg import sub` imports the submodule when there is one; otherwise a name of pkg
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in importable else base for a in node.names]
                names = tuple(a.name for a in node.names if f"{base}.{a.name}" not in importable)
            elif isinstance(node, ast.Call) and (named := _literal_import_module(node)):
                targets = [_resolve_relative(module, is_package, 1, named[1:]) if named.startswith(".") else named]
            deferred = bool(targets) and bool(DEFERRED.search(lines[node.lineno - 1]))
            imports += [Import(module, rel, node.lineno, t, inside, deferred, names) for t in dict.fromkeys(targets)]
    return imports, modules


def file_of(target: str, modules: dict[str, Path]) -> Path | None:
    """The project file a dotted name lives in (the longest module prefix), or None outside the project."""
    parts = target.split(".")
    for n in range(len(parts), 0, -1):
        found = modules.get(".".join(parts[:n]))
        if found is not None:
            return found
    return None


def layer_violations(imports: list[Import], modules: dict[str, Path], layers: list[Layer], root: Path) -> list[str]:
    """The imports the table does not allow, each as 'file:line imports module (layer -> layer)'."""
    by_name = {layer.name: layer for layer in layers}
    broken = []
    for imp in sorted(imports, key=lambda i: (i.path, i.line, i.target)):
        target_file = file_of(imp.target, modules)
        if target_file is None:
            continue
        src, dst = place_of(imp.path, layers), place_of(str(target_file.relative_to(root)), layers)
        if src is None or dst is None:
            continue  # test_every_module_is_in_a_layer names it
        same_package = src.package is not None and src.package == dst.package
        if src.package is not None and dst.package is not None and not same_package:
            broken.append(f"{imp.where()} (benchmark {src.package} -> benchmark {dst.package})")
        elif dst.layer == src.layer or dst.layer in by_name[src.layer].may_import:
            continue
        elif same_package and imp.in_function and imp.deferred:
            continue  # a protocol's hook loading its own package's extension (docs/architecture.md)
        else:
            broken.append(f"{imp.where()} ({src.layer} -> {dst.layer})")
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


def private_imports(imports: list[Import], modules: dict[str, Path]) -> list[str]:
    """Private names taken from another module, and private modules imported from outside their package."""
    found = []
    for imp in sorted(imports, key=lambda i: (i.path, i.line, i.target)):
        if file_of(imp.target, modules) is None:
            continue
        for name in imp.names:
            if name.startswith("_") and not name.startswith("__"):
                found.append(f"{imp.path}:{imp.line} imports {name} from {imp.target}")
        parts = imp.target.split(".")
        for i, part in enumerate(parts):
            if part.startswith("_") and not part.startswith("__"):
                package = ".".join(parts[:i])
                source_package = imp.source if modules[imp.source].name == "__init__.py" else imp.source.rpartition(".")[0]
                if source_package != package and ".".join(parts[: i + 1]) != imp.source:
                    found.append(f"{imp.path}:{imp.line} imports the private module {imp.target}")
                break
    return found


def undeferred_function_imports(imports: list[Import], modules: dict[str, Path]) -> dict[str, list[str]]:
    """File -> its function-level imports of the project's own modules that do not say why (`# deferred: ...`)."""
    found = defaultdict(list)
    for imp in sorted(imports, key=lambda i: (i.path, i.line, i.target)):
        if imp.in_function and not imp.deferred and file_of(imp.target, modules) is not None:
            if not found[imp.path] or not found[imp.path][-1].startswith(f"{imp.path}:{imp.line} "):
                found[imp.path].append(imp.where())
    return found


def _report(lines: list[str]) -> str:
    return "\n  " + "\n  ".join(lines)


LAYERS = read_layers(ARCHITECTURE.read_text(encoding="utf-8"))
_IMPORTS, _MODULES = collect_imports(ROOT)

#: Imports that break the table today, each with the change that removes it. The list only shrinks: an entry whose
#: import is gone fails the test until it is deleted here.
KNOWN_LAYER_BREAKS = {
    # the report reads the sweep file and the cell columns of the sweep (the sweep's run context)
    "engine/report/results.py imports capeval.engine.sweep.grid": "cell columns below the sweep",
    "engine/report/rundir.py imports capeval.engine.sweep.config": "sweep file below the report",
    # usage accounting lives in sweep/ but serves the stages
    "engine/stages/decode.py imports capeval.engine.sweep.accounting": "accounting below the stages",
}

#: Private names imported across modules today; the list only shrinks (as KNOWN_LAYER_BREAKS).
KNOWN_PRIVATE_IMPORTS: set[str] = set()

#: file -> how many function-level imports of the project's own modules it may still have without a `# deferred:`
#: reason. The numbers only go down: a file over its number fails (lower a number when its file has fewer).
UNDEFERRED_FUNCTION_IMPORTS: dict[str, int] = {
    "benchmarks/bench_decode.py": 3,
    "benchmarks/bench_frames.py": 4,
    "engine/cli/demo.py": 1,
    "engine/frames/ray_decode.py": 3,
    "engine/judging/requests.py": 1,
    "engine/protocols/base.py": 3,
    "engine/report/html.py": 1,
    "engine/report/provenance.py": 1,
    "engine/report/rundir.py": 2,
    "engine/stages/caption_worker.py": 6,
    "engine/stages/decode.py": 7,
    "engine/sweep/config.py": 7,
    "engine/sweep/plan.py": 2,
    "engine/sweep/plan_tokens.py": 3,
    "engine/sweep/validation.py": 12,
}


def _without_line(where: str) -> str:
    path, _, rest = where.partition(" ")
    return f"{path.rsplit(':', 1)[0]} {rest.split(' (')[0]}"


def test_every_module_is_in_a_layer():
    unplaced = [str(p.relative_to(ROOT)) for p in _MODULES.values()
                if place_of(str(p.relative_to(ROOT)), LAYERS) is None]
    assert not unplaced, "modules no row of the layer table in docs/architecture.md names:" + _report(unplaced)


def test_the_table_names_only_its_own_layers():
    names = [layer.name for layer in LAYERS]
    assert len(names) == len(set(names)), names
    unknown = [f"{layer.name}: {n}" for layer in LAYERS for n in layer.may_import if n not in names]
    assert not unknown, "the layer table's 'may import' names layers it does not have:" + _report(unknown)
    upward = [f"{layer.name}: {n}" for i, layer in enumerate(LAYERS) for n in layer.may_import
              if names.index(n) > i]
    assert not upward, "a layer may import only layers below it (rows are bottom to top):" + _report(upward)


def test_every_import_follows_the_layer_table():
    broken = layer_violations(_IMPORTS, _MODULES, LAYERS, ROOT)
    new = [b for b in broken if _without_line(b) not in KNOWN_LAYER_BREAKS]
    gone = sorted(set(KNOWN_LAYER_BREAKS) - {_without_line(b) for b in broken})
    assert not new, "imports the layer table (docs/architecture.md) does not allow:" + _report(new)
    assert not gone, "no longer broken: delete from KNOWN_LAYER_BREAKS:" + _report(gone)


def test_the_table_keeps_the_engine_one_way():
    """The rules every version of the table keeps: kernels at the bottom, the product never importing
    benchmarks/, a protocol below the judging loop and the backends, the generic engine naming no benchmark."""
    allowed = {layer.name: layer.may_import for layer in LAYERS}
    placed = {p: place_of(p, LAYERS).layer for p in (
        "kernels/aggregate.py", "benchmarks/bench_judge.py", "cluster/submit.py", "adapters/base.py",
        "engine/protocols/base.py", "engine/protocols/toy/parsing.py", "engine/judging/loop.py",
        "engine/stages/caption.py", "engine/report/html.py", "engine/sweep/runner.py", "engine/cli/judge.py",
        "engine/staging.py", "engine/construct/base.py", "engine/datasets/registry.py", "engine/metrics/core.py",
        "engine/store/segments.py", "engine/frames/decode.py", "engine/inputs/rows.py")}
    assert allowed[placed["kernels/aggregate.py"]] == frozenset()
    product = {n for p, n in placed.items() if p.startswith(("engine/", "adapters/", "kernels/"))}
    assert not any(placed["benchmarks/bench_judge.py"] in allowed[n] for n in product)
    protocol = placed["engine/protocols/toy/parsing.py"]
    for above in ("adapters/base.py", "engine/judging/loop.py", "engine/stages/caption.py", "engine/report/html.py",
                  "engine/sweep/runner.py", "engine/cli/judge.py", "engine/staging.py"):
        assert placed[above] not in allowed[protocol], (protocol, above)
    for generic in ("engine/judging/loop.py", "engine/report/html.py", "engine/sweep/runner.py", "engine/staging.py",
                    "engine/construct/base.py", "engine/datasets/registry.py", "engine/metrics/core.py",
                    "engine/store/segments.py", "engine/frames/decode.py", "engine/inputs/rows.py",
                    "engine/cli/judge.py", "adapters/base.py"):
        assert protocol not in allowed[placed[generic]], generic
        assert placed["engine/protocols/base.py"] == placed[generic] or placed["engine/protocols/base.py"] in \
            allowed[placed[generic]] or placed[generic] in ("base", "data", "backends"), generic


def test_no_import_cycles():
    cycles = import_cycles(_IMPORTS, _MODULES)
    assert not cycles, "import cycles among engine/, adapters/, kernels/ modules:" + "".join(
        _report([imp.where() for imp in cycle]) + "\n" for cycle in cycles)


def test_no_private_name_is_imported_across_modules():
    found = private_imports(_IMPORTS, _MODULES)
    new = [f for f in found if _without_line(f) not in KNOWN_PRIVATE_IMPORTS]
    gone = sorted(KNOWN_PRIVATE_IMPORTS - {_without_line(f) for f in found})
    assert not new, "private names (_x) are used only in their module; make it public or move the code:" + _report(
        new)
    assert not gone, "no longer imported: delete from KNOWN_PRIVATE_IMPORTS:" + _report(gone)


def test_function_level_imports_say_why():
    """A function-level import of the project's own modules defers a heavy dependency (torch, vLLM, Ray, ...) and
    says so on its line (`# deferred: ...`); any other belongs at the top of the module."""
    found = undeferred_function_imports(_IMPORTS, _MODULES)
    over = [f"{path}: {len(found.get(path, []))} (allowed {UNDEFERRED_FUNCTION_IMPORTS.get(path, 0)})"
            + _report(found.get(path, [])) for path in sorted(set(found) | set(UNDEFERRED_FUNCTION_IMPORTS))
            if len(found.get(path, [])) > UNDEFERRED_FUNCTION_IMPORTS.get(path, 0)]
    assert not over, ("function-level imports of the project's modules without a `# deferred: <why>` comment "
                      "(move them to the top of the module, or say which heavy dependency they defer):" + "".join(over))


def test_the_checker_sees_the_project():
    """The scan really reads the project: a module-level import and one inside a function are both found."""
    seen = {(imp.source, imp.target) for imp in _IMPORTS}
    assert ("capeval.engine.replies.repair", "capeval.engine.replies.fences") in seen  # module level
    assert any(imp.in_function for imp in _IMPORTS)
    assert ("capeval", "capeval.engine.cli") in seen or ("capeval.__main__", "capeval.engine.cli") in seen
    assert len(_MODULES) > 100 and len(_IMPORTS) > 500


def test_the_table_parser_reads_rows_patterns_and_packages():
    layers = read_layers(f"""# x

{TABLE_HEADING}

| layer | modules | may import |
|---|---|---|
| low | `engine/errors.py`, `engine/store/` | — |
| pkg | `engine/protocols/<name>/` | low |
| ext | `engine/protocols/<name>/cli*` | low, pkg |

## next
| not | a | row |
""")
    assert [(la.name, la.patterns, la.may_import) for la in layers] == [
        ("low", ("engine/errors.py", "engine/store/"), frozenset()),
        ("pkg", ("engine/protocols/<name>/",), frozenset({"low"})),
        ("ext", ("engine/protocols/<name>/cli*",), frozenset({"low", "pkg"}))]
    assert place_of("engine/store/a/b.py", layers) == Place("low", None)
    assert place_of("engine/protocols/toy/parsing.py", layers) == Place("pkg", "toy")
    assert place_of("engine/protocols/toy/cli.py", layers) == Place("ext", "toy")
    assert place_of("engine/protocols/toy/cli/score.py", layers) == Place("ext", "toy")
    assert place_of("engine/protocols/base.py", layers) is None
    assert place_of("engine/errors_more.py", layers) is None


def test_the_checker_reports_breaks_cycles_private_names_and_undeferred_imports(tmp_path):
    files = {
        "engine/__init__.py": "",
        "engine/errors.py": "",
        "engine/judging/__init__.py": "",
        "engine/judging/loop.py": "X = 1\n",
        "engine/protocols/__init__.py": "",
        "engine/protocols/base.py": "",
        "engine/protocols/toy/__init__.py": (
            "def construction():\n    from capeval.engine.protocols.toy import construction  # deferred: runs judges\n"
            "def cli_commands():\n    from capeval.engine.protocols.toy import cli\n"),
        "engine/protocols/toy/construction.py": "from capeval.engine.judging import loop\n",
        "engine/protocols/toy/cli.py": "",
        # the upward import is inside a function, where Python would only run it late
        "engine/protocols/toy/parsing.py": "import json\n\n\ndef parse():\n    from capeval.engine.judging import loop\n",
        "engine/protocols/toy/prompts.py": "import importlib\nm = importlib.import_module('capeval.adapters.backend')\n",
        "engine/protocols/other/__init__.py": "from capeval.engine.protocols.toy import parsing\n",
        "engine/report/__init__.py": "",
        "engine/report/tables.py": "from capeval.engine.protocols import base\nfrom capeval.engine.protocols.toy import parsing\n",
        "engine/store/__init__.py": "",
        "engine/store/a.py": "from . import b\n_hidden = 1\n",
        "engine/store/b.py": "def f():\n    from capeval.engine.store.a import g  # deferred: numpy\n",
        "engine/store/c.py": "from capeval.engine import store\nfrom capeval.engine.store import a\n",  # into the cycle, not part of it
        "engine/store/d.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import capeval.benchmarks.bench\n",
        "engine/store/e.py": "from capeval.engine.store.a import _hidden\nfrom capeval.engine.store import _private\n",
        "engine/store/_private.py": "",
        "engine/report/f.py": "from capeval.engine.store import _private\n",
        "adapters/__init__.py": "",
        "adapters/backend.py": "",
        "benchmarks/__init__.py": "",
        "benchmarks/bench.py": "",
        "kernels/__init__.py": "",
        "kernels/k.py": "from capeval.engine.store.c import x\n",
        "kernels/_compiled.pyx": "",
        "kernels/m.py": "from capeval.kernels import _compiled\n",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    imports, modules = collect_imports(tmp_path, ("engine", "adapters", "kernels", "benchmarks"))
    assert sorted(layer_violations(imports, modules, LAYERS, tmp_path)) == [
        "engine/protocols/other/__init__.py:1 imports capeval.engine.protocols.toy.parsing (benchmark other -> "
        "benchmark toy)",
        "engine/protocols/toy/__init__.py:4 imports capeval.engine.protocols.toy.cli (protocols -> benchmark "
        "extensions)",
        "engine/protocols/toy/parsing.py:5 imports capeval.engine.judging.loop (protocols -> judging)",
        "engine/protocols/toy/prompts.py:2 imports capeval.adapters.backend (protocols -> backends)",
        "engine/report/tables.py:2 imports capeval.engine.protocols.toy.parsing (views -> protocols)",
        "engine/store/d.py:3 imports capeval.benchmarks.bench (data -> outside the product)",
        "kernels/k.py:1 imports capeval.engine.store.c (kernels -> data)"]
    cycles = import_cycles(imports, modules)
    assert [[imp.where() for imp in cycle] for cycle in cycles] == [
        ["engine/store/a.py:1 imports capeval.engine.store.b", "engine/store/b.py:2 imports capeval.engine.store.a"]]
    assert private_imports(imports, modules) == [
        "engine/report/f.py:1 imports the private module capeval.engine.store._private",
        "engine/store/e.py:1 imports _hidden from capeval.engine.store.a"]
    assert {p: [w for w in ws] for p, ws in undeferred_function_imports(imports, modules).items()} == {
        "engine/protocols/toy/__init__.py": ["engine/protocols/toy/__init__.py:4 imports capeval.engine.protocols.toy.cli"],
        "engine/protocols/toy/parsing.py": ["engine/protocols/toy/parsing.py:5 imports capeval.engine.judging.loop"]}
