"""A protocol defined entirely in the test folder (tests/toy_protocol: its own pack, rendering, parsing, metrics,
headline and paired statistic) runs through `capeval sweep` -> results -> `capeval compare` -> `capeval report` with
no engine file naming it: it is found through the `capeval.protocols` entry point group, as a protocol installed
from another distribution would be (engine/registry.py, docs/architecture.md).

Real components: the capeval CLI in subprocesses (each starts its own local Ray on 127.0.0.1), generated H.264
videos, the local captioner, the OpenAI-compatible judge against a loopback HTTP server that answers each choice
request deterministically from a hash of its prompt (benchmarks/loopback_server.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest
from _sweeps import write_sweep
from _toy_plugin import toy_plugin_env

TESTS = Path(__file__).resolve().parents[1]
ENGINE = TESTS.parent / "engine"


@pytest.fixture(scope="module")
def toy_run(tmp_path_factory):
    from capeval.benchmarks.loopback_server import FaultConfig, LoopbackServer

    root = tmp_path_factory.mktemp("toy")
    env = toy_plugin_env(root)
    capeval = [sys.executable, "-m", "capeval.engine.cli"]
    with LoopbackServer(FaultConfig(latency_s=0.0)) as server:
        judge = {"name": "openai", "params": {"base_url": server.base_url, "model": "loopback",
                                              "api_key": "test-key", "structured": "vllm"}}
        sweep = write_sweep(root / "toy.toml", "toy-protocol", frames=("uniform:2",), n_videos=8, duration_s=1.0,
                            protocols=("toy_mention",), judges=[judge])
        out = root / "run"
        done = subprocess.run([*capeval, "sweep", str(sweep), "--out", str(out)], env=env, capture_output=True,
                              text=True, timeout=600)
        requests = server.stats()
    return {"root": root, "env": env, "capeval": capeval, "out": out, "sweep": done, "requests": requests}


def test_no_engine_file_names_the_toy_protocol():
    hits = [str(p) for p in ENGINE.rglob("*.py") if "toy_mention" in p.read_text() or "toy_protocol" in p.read_text()]
    assert hits == []


def test_sweep_judges_every_caption_with_the_toy_protocol(toy_run):
    assert toy_run["sweep"].returncode == 0, toy_run["sweep"].stderr[-3000:]
    results = pl.read_parquet(toy_run["out"] / "results.parquet")
    toy = results.filter(pl.col("protocol") == "toy_mention")
    assert set(toy["metric"].unique()) == {"mention_rate"}
    assert toy.height == 2  # one cell per prompt
    verdicts = pl.concat([pl.read_parquet(p) for p in (toy_run["out"] / "verdicts").glob("*.parquet")],
                         how="diagonal_relaxed")
    assert verdicts.height > 0 and set(verdicts["verdict"].unique().to_list()) <= {0, 1}
    # the headline equals the metric recomputed from the stored verdicts (YES / all rows, in percent)
    for row in toy.iter_rows(named=True):
        cell = verdicts.filter(pl.col("prompt_id") == row["prompt_id"])
        assert row["value"] == pytest.approx(100.0 * (cell["verdict"] == 1).sum() / cell.height)
    # every request reached the judge once (no cache hit on a fresh run): the loopback server counted them
    assert toy_run["requests"]["requests"] >= verdicts.height


def test_compare_uses_the_toy_paired_statistic(toy_run):
    r = subprocess.run([*toy_run["capeval"], "compare", str(toy_run["out"]), "--json", "--resamples", "200"],
                       env=toy_run["env"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    toy = [x for x in json.loads(r.stdout)["comparisons"] if x.get("protocol") == "toy_mention"]
    assert len(toy) == 1 and toy[0]["metric"] == "mention_rate"  # the two prompts: one one-factor pair
    results = pl.read_parquet(toy_run["out"] / "results.parquet").filter(pl.col("protocol") == "toy_mention")
    value = dict(zip(results["prompt_id"], results["value"]))
    pair = toy[0]
    assert pair["differs"] == "prompt_id" and pair["n_videos"] == 8
    assert (pair["a_value"], pair["b_value"]) == pytest.approx((value[pair["a"]], value[pair["b"]]))
    assert pair["diff"] == pytest.approx(value[pair["a"]] - value[pair["b"]])


def test_report_shows_the_toy_headline(toy_run):
    html = toy_run["root"] / "report.html"
    r = subprocess.run([*toy_run["capeval"], "report", str(toy_run["out"]), "--out", str(html)],
                       env=toy_run["env"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    text = html.read_text()
    assert "toy_mention" in text and "mention_rate" in text


def test_provenance_names_everything_behind_each_number(toy_run):
    """`capeval show --provenance`: per system, the protocol's version and mode, the judge prompt pack's digest (the
    toy's own pack, declared by the protocol), the caption prompt, frame spec, judge revision and capeval's revision."""
    from capeval.engine.packs import load_pack

    r = subprocess.run([*toy_run["capeval"], "show", str(toy_run["out"]), "--provenance", "--json"],
                       env=toy_run["env"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    records = json.loads(r.stdout)
    assert sorted(rec["system"]["prompt_id"] for rec in records) == ["brief", "capquiz_standard"]
    toy_pack = load_pack(TESTS / "toy_protocol" / "pack.toml")
    for rec in records:
        assert rec["protocol"]["name"] == "toy_mention" and rec["protocol"]["version"] == "1"
        assert rec["protocol"]["mode"] == "strict"
        assert rec["protocol"]["pack_digests"] == {"prompts": {"path": str(toy_pack.path), "digest": toy_pack.digest}}
        assert rec["frames"]["spec"] == "uniform:2" and rec["caption_prompt"]["digest"]
        assert rec["judge"]["model"] == "loopback" and rec["judge"]["validation"] == {"status": "unvalidated"}
        assert "test-key" not in json.dumps(rec)  # the credential the sweep file holds is never shown
        assert rec["capeval"]["git_revision"]
    text = subprocess.run([*toy_run["capeval"], "show", str(toy_run["out"]), "--provenance", "--system",
                           "prompt_id=brief"], env=toy_run["env"], capture_output=True, text=True, timeout=300)
    assert text.returncode == 0 and "prompt_id=brief" in text.stdout and "capquiz_standard" not in text.stdout


def _toy_verdicts(toy_run) -> Path:
    """One of the run's verdict files that holds toy_mention rows."""
    for path in sorted((toy_run["out"] / "verdicts").glob("*.parquet")):
        if pl.read_parquet(path).filter(pl.col("protocol") == "toy_mention").height:
            return path
    raise AssertionError("no toy_mention verdicts in the run")


def test_the_toy_brings_its_own_command(toy_run):
    """`capeval toy rate` exists because the toy protocol registers it (JudgeProtocol.cli_commands)."""
    path = _toy_verdicts(toy_run)
    r = subprocess.run([*toy_run["capeval"], "toy", "rate", "--verdicts", str(path)], env=toy_run["env"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    verdicts = pl.read_parquet(path)
    for prompt in verdicts["prompt_id"].unique().to_list():
        rows = verdicts.filter(pl.col("prompt_id") == prompt)
        yes = int((rows["verdict"] == 1).sum())
        assert f"{prompt}: {100.0 * yes / rows.height:.1f}% ({yes} of {rows.height})" in r.stdout
    help_text = subprocess.run([*toy_run["capeval"], "--help"], env=toy_run["env"], capture_output=True, text=True,
                               timeout=300).stdout
    assert "the toy protocol's tools" in help_text
    missing = subprocess.run([*toy_run["capeval"], "toy", "rate", "--verdicts", str(toy_run["root"] / "none.parquet")],
                             env=toy_run["env"], capture_output=True, text=True, timeout=300)
    assert missing.returncode == 2 and "not found" in missing.stderr


def test_the_report_shows_the_toy_section(toy_run):
    """The report asks each protocol of the run for its sections (JudgeProtocol.report_sections)."""
    html = toy_run["root"] / "report-sections.html"
    r = subprocess.run([*toy_run["capeval"], "report", str(toy_run["out"]), "--out", str(html)],
                       env=toy_run["env"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    text = html.read_text()
    section = text[text.index('<section id="toy-mentions"><h2>Toy mentions</h2>'):]
    section = section[:section.index("</section>")]
    results = pl.read_parquet(toy_run["out"] / "results.parquet").filter(pl.col("protocol") == "toy_mention")
    for row in results.iter_rows(named=True):
        assert f"<td>{row['prompt_id']}</td><td class='num'>{row['value']:.1f}</td>" in section


def test_score_takes_the_entry_point_protocol(toy_run):
    """`capeval score --protocol toy_mention`: the protocol list comes from the registry, the metrics from the
    protocol object."""
    path = _toy_verdicts(toy_run)
    out = toy_run["root"] / "score.csv"
    r = subprocess.run([*toy_run["capeval"], "score", "--protocol", "toy_mention", "--verdicts", str(path), "--out",
                        str(out), "--resamples", "50"], env=toy_run["env"], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    scored = pl.read_csv(out)
    verdicts = pl.read_parquet(path)
    for row in scored.filter(pl.col("metric") == "mention_rate").iter_rows(named=True):
        cell = verdicts.filter(pl.col("prompt_id") == row["prompt_id"])
        assert row["value"] == pytest.approx(100.0 * (cell["verdict"] == 1).sum() / cell.height)
    assert scored.filter(pl.col("metric") == "mention_rate").height >= 1


def test_the_local_judge_answers_toy_requests_with_the_toys_stand_in(tmp_path):
    """The local judge finds the toy protocol through the registry by the task's protocol name and replies with its
    stand-in answer, which the toy's parser reads."""
    env = toy_plugin_env(tmp_path)
    script = """
import json
import pyarrow as pa
from capeval.adapters.local_judge import LocalJudge
from capeval.engine.judging.requests import to_judge_request
from capeval.engine.registry import lookup
protocol = lookup("protocol", "toy_mention")
items = pa.Table.from_pylist([
    {"item_id": "a", "video_id": "v1", "task": "color", "answer": "bicycle"},
    {"item_id": "b", "video_id": "v1", "task": "color", "answer": "volcano"}])
captions = pa.Table.from_pylist([{"video_id": "v1", "caption_key": "k", "captioner": "c", "prompt_id": "p",
                                  "frame_spec": "uniform:2", "text": "A man rides a red bicycle down a hill."}])
rows = protocol.build_requests(items, captions, judge="local", judge_revision="r").to_pylist()
replies = LocalJudge().judge([to_judge_request(r) for r in rows])
print(json.dumps({r["item_id"]: [x.text, protocol.parse(r, x.text)[0]] for r, x in zip(rows, replies)}))
"""
    r = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert json.loads(r.stdout.strip().splitlines()[-1]) == {"a": ["yes", 1], "b": ["no", 0]}
