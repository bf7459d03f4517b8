"""A benchmark has one address: no benchmark's name appears in the product folders outside its own package
(engine/protocols/<name>/), except the lines of ALLOWED, each with its reason. The check is the grep that
docs/architecture.md ("Add a benchmark in one package") gives; ALLOWED only shrinks."""

from __future__ import annotations

import re
from pathlib import Path

import polars as pl
import pytest

ROOT = Path(__file__).resolve().parents[1]
PRODUCT_FOLDERS = ("engine", "adapters", "kernels", "benchmarks", "cluster")
#: the benchmark names (today's packages, and those the next issue adds); "capability" as a word matches too, so
#: generic text says "capabilities" or rewords (a backend's capabilities are JudgeCapabilities)
BENCHMARK_NAMES = re.compile(
    r"capquiz|lvcap|capability|vidcapbench|vcinspector|vc-inspector|dream1k|dream-1k|\bvdc\b|autodq", re.IGNORECASE)
#: a benchmark package: the one place its name belongs
OWN_PACKAGE = re.compile(r"^engine/protocols/[^/]+/")
#: files that are not text
BINARY_SUFFIXES = {".pyc", ".parquet", ".mp4", ".png", ".jpg", ".so"}

#: path -> (how many matching lines it may still have, why). A path whose count drops must be lowered here.
ALLOWED: dict[str, tuple[int, str]] = {
    "engine/cli/demo.toml": (3, "the demo's sweep file names the protocol and the built-in prompt it runs (data)"),
    "engine/judging/rounds.py": (1, "the official not-asked text is stored in verdict rows; they stay byte-identical"),
    "engine/root/testing/random_models.py": (1, "capeval.testing's default corpus: two shared data files by path"),
    **{path: (1, "a usage line runs the example sweep file examples/capquiz_vllm_gpu.toml, named by its path")
       for path in ("cluster/README.md", "cluster/ray-cluster.yaml", "cluster/rayjob.yaml",
                    "cluster/slurm_sweep.sbatch", "cluster/submit.py", "engine/cli/submit.py")},
    # performance workloads on one benchmark's real release or protocol (outside the product: the workload is the
    # point of the measurement, and benchmarks/ may import protocols)
    "benchmarks/bench_adaptive.py": (7, "the adaptive sweep's workload: a multiple-choice protocol's paired statistic"),
    "benchmarks/bench_caption.py": (1, "imports the synthetic videos' size from the kind that generates them"),
    "benchmarks/bench_judge.py": (11, "the vLLM workload: a real release's judge prompts"),
    "benchmarks/bench_streaming.py": (12, "the streaming workload: a real release's requests"),
    "benchmarks/bench_sweep.py": (5, "the sweep workload: the demo's protocol, prompt and dataset kind"),
    "benchmarks/vllm_ceiling.py": (1, "the judge workload, as bench_judge's: a real release's judge prompts"),
    "benchmarks/local_judge_agreement.py": (12, "measures the local judge against one release's published verdicts"),
    "benchmarks/micro/conftest.py": (7, "micro-benchmarks of the request path on a real release's rows"),
    "benchmarks/micro/test_micro_request_path.py": (13, "micro-benchmarks of the request path on a real release's rows"),
}
#: (path prefixes, how many matching lines they may still have together, why): files whose owners are moving them
#: now; the budget only goes down, and goes when they are done (a file may move between the prefixes meanwhile).
PENDING: list[tuple[tuple[str, ...], int, str]] = []


def product_files(root: Path) -> list[Path]:
    return sorted(p for folder in PRODUCT_FOLDERS for p in (root / folder).rglob("*")
                  if p.is_file() and "__pycache__" not in p.parts and p.suffix not in BINARY_SUFFIXES)


def benchmark_mentions(root: Path) -> dict[str, list[str]]:
    """{path: ["line: text", ...]} of every line naming a benchmark outside its own package."""
    found: dict[str, list[str]] = {}
    for path in product_files(root):
        rel = path.relative_to(root).as_posix()
        if OWN_PACKAGE.match(rel):
            continue
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except UnicodeDecodeError:
            continue
        hits = [f"{n}: {line.strip()}" for n, line in enumerate(lines, 1) if BENCHMARK_NAMES.search(line)]
        if hits:
            found[rel] = hits
    return found


def test_no_benchmark_is_named_outside_its_package():
    found = benchmark_mentions(ROOT)
    pending = {path: hits for path, hits in found.items() if any(path.startswith(p) for ps, _, _ in PENDING for p in ps)}
    over = [f"{path} ({len(hits)} lines, allowed {ALLOWED.get(path, (0, ''))[0]}):\n    " + "\n    ".join(hits)
            for path, hits in found.items() if path not in pending and len(hits) > ALLOWED.get(path, (0, ""))[0]]
    for prefixes, budget, _ in PENDING:
        hits = [f"{path}:{hit}" for path, lines in pending.items() if path.startswith(prefixes) for hit in lines]
        if len(hits) > budget:
            over.append(f"{' + '.join(prefixes)} ({len(hits)} lines, pending budget {budget}):\n    "
                        + "\n    ".join(hits))
    assert not over, ("a benchmark's name outside its package (engine/protocols/<name>/): move the code there, "
                      "reach it through the registry or a protocol hook, or word the comment generically:\n"
                      + "\n".join(over))


def test_the_allow_list_only_shrinks():
    found = benchmark_mentions(ROOT)
    stale = [f"{path}: {len(found.get(path, []))} lines, listed {n}" for path, (n, _) in ALLOWED.items()
             if len(found.get(path, [])) < n]
    assert not stale, "fewer mentions than ALLOWED says: lower (or delete) these entries:\n" + "\n".join(stale)
    assert all(reason for _, reason in ALLOWED.values())


def test_the_check_is_the_documented_grep():
    """docs/architecture.md's grep and this test search the same names, folders and exclusion."""
    doc = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    grep = re.search(r'git grep -niE "([^"]+)" \\\n\s+-- ([^|]+)\| grep -vE "([^"]+)"', doc)
    assert grep, "docs/architecture.md lost the one-address grep"
    assert grep.group(1) == BENCHMARK_NAMES.pattern
    assert tuple(grep.group(2).split()) == PRODUCT_FOLDERS
    assert grep.group(3) == OWN_PACKAGE.pattern


def test_the_check_sees_a_mention_and_skips_the_own_package(tmp_path):
    """The scan finds a name in generic code (any case, any text file) and leaves the benchmark's package alone;
    'capabilities' (a backend's) is not the benchmark."""
    files = {
        "engine/report/x.py": "# as CAPability does\nok = 1\n",
        "cluster/run.yaml": "entrypoint: capeval sweep examples/lvcap.toml\n",
        "adapters/y.py": "# the backend's capabilities\n",
        "engine/protocols/vdc/__init__.py": "name = 'vdc'\n",
        "engine/protocols/lvcap/dream1k.py": "'''DREAM-1K clips for AutoDQ'''\n",
        "kernels/z.py": "advdc = 1  # vdcs: not the name\n",
    }
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    assert benchmark_mentions(tmp_path) == {"engine/report/x.py": ["1: # as CAPability does"],
                                            "cluster/run.yaml": ["1: entrypoint: capeval sweep examples/lvcap.toml"]}


def test_align_reads_the_score_offset_from_the_protocols_declaration():
    """`capeval align` turns verdict codes into scores with the protocol's verdict_score_offset (a 1-5 scorer's
    codes are 0-4), not by its name; several or unregistered protocols read the codes as they are."""
    from capeval.engine.cli.align import verdict_score_offset
    from capeval.engine.registry import lookup, names

    offsets = {name: lookup("protocol", name).verdict_score_offset for name in names("protocol")}
    assert offsets["vcinspector"] == 1 and {n for n, o in offsets.items() if o} == {"vcinspector"}
    for name, offset in offsets.items():
        assert verdict_score_offset(pl.DataFrame({"protocol": [name, name], "verdict": [0, 1]})) == offset
    assert verdict_score_offset(pl.DataFrame({"protocol": ["vcinspector", "capquiz"], "verdict": [0, 1]})) == 0
    assert verdict_score_offset(pl.DataFrame({"protocol": ["not-registered"], "verdict": [0]})) == 0
    assert verdict_score_offset(pl.DataFrame({"verdict": [0]})) == 0


def test_benchmark_caption_prompts_come_from_their_protocols(monkeypatch):
    """The caption prompts named after a benchmark are its protocol's declaration (JudgeProtocol.caption_prompts):
    get_prompt and `capeval list prompts` find them there, the generic BUILTIN holds none, and a protocol's prompt
    that reuses an id with another text is refused."""
    from capeval.engine import prompts_library
    from capeval.engine.registry import lookup, names

    declared = {p.id: p for name in names("protocol") for p in lookup("protocol", name).caption_prompts}
    assert {"capquiz_standard", "lvcap_segment", "vidcapbench_vript", "capability_video"} <= set(declared)
    assert not set(declared) & set(prompts_library.BUILTIN)
    assert prompts_library.get_prompt("lvcap_segment") is declared["lvcap_segment"]
    assert prompts_library.get_prompt("lvcap_segment").segmental
    assert set(prompts_library.builtin_prompts()) == set(prompts_library.BUILTIN) | set(declared)
    clash = prompts_library.CaptionPrompt("detailed", "Another text.", "test")
    monkeypatch.setattr(type(lookup("protocol", "capquiz")), "caption_prompts", (clash,))
    with pytest.raises(prompts_library.PromptError, match="'detailed' of protocol 'capquiz' is already defined"):
        prompts_library.builtin_prompts()
