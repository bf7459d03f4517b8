"""docs/vdc.md and docs/dream1k.md give runnable snippets (issue 28, item 6): every sweep file on the pages passes
`capeval sweep FILE --check` as written (saved in a checkout with ../shared beside it, the media folders they name
present), the no-download sweeps run end to end as written (slow), every `capeval` command on the pages uses options
its subcommand has, their Python one-liners compute what the pages say on tables of the shape capeval writes, and
every official prompt id the pages name exists in the official pack (the pages point to the pack instead of
repeating its texts)."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

import polars as pl
import pytest

from capeval.engine.cli import main as cli_main
from capeval.engine.exitcodes import OK

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
PAGES = {"vdc": ROOT / "docs" / "vdc.md", "dream1k": ROOT / "docs" / "dream1k.md"}
PACKS = {"vdc": SHARED / "protocols" / "vdc.toml", "dream1k": SHARED / "protocols" / "autodq.toml"}


def fenced(page: Path, language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", page.read_text(encoding="utf-8"), re.DOTALL | re.MULTILINE)


def sweep_snippets() -> list[tuple[str, int, str]]:
    return [(name, n, block) for name, page in PAGES.items() for n, block in enumerate(fenced(page, "toml"))]


def capeval_commands(page: Path) -> list[list[str]]:
    """Each `capeval ...` command of the page's bash blocks, continuation lines joined, as argv after `capeval`."""
    commands = []
    for block in fenced(page, "bash"):
        for line in block.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            if words[:1] == ["capeval"]:
                commands.append(words[1:])
    return commands


def test_each_page_has_a_sweep_per_tool():
    for name, page in PAGES.items():
        sweeps = [tomllib.loads(block) for block in fenced(page, "toml")]
        modes = {s["protocols"][0].get("params", {}).get("mode", "strict") for s in sweeps}
        assert {"official", "strict"} <= modes, (name, modes)
        assert all(s["protocols"][0]["name"] == name for s in sweeps), name
        kinds = {d["kind"] for s in sweeps for d in s["datasets"]}
        assert {name, f"{name}_synthetic"} <= kinds, (name, kinds)


@pytest.mark.skipif(not (SHARED / "data").is_dir(), reason="../shared is not beside the project")
@pytest.mark.parametrize("page,n,block", sweep_snippets(), ids=[f"{p}-{n}" for p, n, _ in sweep_snippets()])
def test_sweep_snippet_passes_check_as_written(tmp_path, capsys, page, n, block):
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    (tmp_path / "shared").symlink_to(SHARED)  # the page's paths are ../shared/... from the checkout
    for dataset in tomllib.loads(block)["datasets"]:
        if "media_root" in dataset:  # the videos the page tells the reader to download
            (checkout / dataset["media_root"]).mkdir(exist_ok=True)
    sweep = checkout / f"{page}_{n}.toml"
    sweep.write_text(block, encoding="utf-8")
    code = cli_main(["sweep", str(sweep), "--check"])
    out = capsys.readouterr()
    assert code == OK, f"docs/{page}.md sweep #{n} fails --check:\n{out.out}\n{out.err}"
    assert "valid" in out.out, out.out


def subcommand_usage(argv: list[str], capsys) -> tuple[list[str], str]:
    """The longest leading run of `argv` that is a capeval subcommand (`judge`, `dream1k clips`), and its help."""
    for k in range(min(3, len(argv)), 0, -1):
        words = argv[:k]
        if any(w.startswith("-") for w in words):
            continue
        try:
            cli_main([*words, "--help"])
        except SystemExit as exc:
            out = capsys.readouterr().out
            if exc.code == 0 and out.startswith(f"usage: capeval {' '.join(words)}"):
                return words, out
        capsys.readouterr()
    raise AssertionError(f"no capeval subcommand at the start of {argv}")


@pytest.mark.slow
@pytest.mark.parametrize("page", sorted(PAGES))
def test_no_download_sweep_runs_as_written(tmp_path, monkeypatch, page):
    """The page's sweep on the synthetic kind (local captioner, local judge) runs end to end and scores every
    item: the headline metrics of the protocol come out with no row left without a verdict."""
    (block,) = [b for b in fenced(PAGES[page], "toml") if f'kind = "{page}_synthetic"' in b]
    sweep = tmp_path / "sweep.toml"
    sweep.write_text(block, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    assert cli_main(["sweep", str(sweep), "--out", str(tmp_path / "run"), "--no-progress"]) == OK
    results = pl.read_parquet(tmp_path / "run" / "results.parquet")
    headline = {"vdc": {"Acc", "Score"}, "dream1k": {"F1", "precision", "recall"}}[page]
    assert headline <= set(results["metric"]), results
    assert results.filter(pl.col("metric").is_in(list(headline)))["value"].is_not_null().all(), results
    assert (results["n_no_verdict"].fill_null(0) == 0).all(), results


@pytest.mark.parametrize("page", sorted(PAGES))
def test_cli_snippets_use_options_their_subcommand_has(capsys, page):
    commands = capeval_commands(PAGES[page])
    assert any(argv[:1] == ["judge"] for argv in commands), f"docs/{page}.md shows no `capeval judge` command"
    for argv in commands:
        sub, usage = subcommand_usage(argv, capsys)
        for word in argv:
            if word.startswith("--"):
                flag = word.split("=", 1)[0]
                assert re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", usage), \
                    f"docs/{page}.md: `capeval {' '.join(sub)}` has no option {flag}"


def test_dream1k_clip_average_snippet_runs_on_a_clip_table(tmp_path):
    """The page's one-liner that averages `capeval dream1k clips --out` as VLMEvalKit does reads columns the clip
    table has, and computes F1 of the mean recall and mean precision over successful clips."""
    from capeval.engine.protocols.dream1k.metrics import CLIP_SCHEMA

    line = next(line for block in fenced(PAGES["dream1k"], "bash") for line in block.splitlines()
                if line.startswith("python -c"))
    assert {"recall", "precision", "success"} <= set(CLIP_SCHEMA)
    (tmp_path / "clips.csv").write_text("recall,precision,success\n0.5,1.0,true\n1.0,0.5,true\n,,false\n")
    out = subprocess.run(["bash", "-c", line], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["R", "0.7500", "P", "0.7500", "F1", "0.7500"], out.stdout
    (tmp_path / "clips.csv").write_text("recall,precision,success\n0.0,0.0,true\n")  # VLMEvalKit's F1 is 0 there
    out = subprocess.run(["bash", "-c", line], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.split()[-1] == "0.0000", (out.stdout, out.stderr)


def test_vdc_pooled_reading_snippet_runs_on_official_score_rows(tmp_path):
    """The page's VLMEvalKit-style pooling reads official-mode score rows as parsing.py writes them: per kind and
    overall, the case-insensitive share of 'yes' and the mean score; rows without a verdict are left out."""
    from capeval.engine.protocols.vdc.parsing import parse_score_official

    (block,) = fenced(PAGES["vdc"], "python")
    replies = [("detailed", "{'pred': 'yes', 'score': 4}"), ("detailed", "{'pred': 'Yes', 'score': 3}"),
               ("camera", "{'pred': 'no', 'score': 1}"), ("camera", "not a literal")]
    rows = []
    for task, reply in replies:
        verdict, _, detail = parse_score_official(reply)
        rows.append({"task": task, "step": "score", "verdict": verdict, "detail": detail if verdict >= 0 else None})
    rows.append({"task": "detailed", "step": "answer", "verdict": -1, "detail": '{"answer": "x"}'})
    pl.DataFrame(rows).write_parquet(tmp_path / "vdc_verdicts.parquet")
    out = subprocess.run([sys.executable, "-c", block], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    table = {task: [acc, score] for task, acc, score in
             re.findall(r"(\w+)\s+┆\s+([\d.]+)\s+┆\s+([\d.]+)", out.stdout)}
    assert table == {"detailed": ["1.0", "3.5"], "camera": ["0.0", "1.0"], "overall": ["0.67", "2.67"]}, out.stdout


@pytest.mark.skipif(not (SHARED / "protocols").is_dir(), reason="../shared is not beside the project")
@pytest.mark.parametrize("page", sorted(PAGES))
def test_official_prompt_ids_named_on_the_page_exist_in_the_pack(page):
    ids = {p["id"] for p in tomllib.loads(PACKS[page].read_text(encoding="utf-8"))["prompt"]}
    text = PAGES[page].read_text(encoding="utf-8")
    named = set(re.findall(r"`((?:judge|caption)/[a-z_]+(?:/\d\d)?)`", text))
    named |= set(re.findall(r'prompt = "((?:judge|caption)/[a-z_/0-9]+)"', text))
    assert named, f"docs/{page}.md names no official prompt id"
    assert named <= ids, f"docs/{page}.md names prompt ids the pack lacks: {sorted(named - ids)}"


def test_readme_links_both_pages():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for page in PAGES.values():
        assert f"(docs/{page.name})" in readme
