"""No file capeval writes holds an API key (issue 19 item 3): `capeval judge`, a sweep and its HTML report, all
through the real CLI against the loopback OpenAI-compatible server that accepts only that key; then every file
under the test's folder (outputs, judgment caches, run records, report), the sweep's Ray session folder (its logs)
and every line the commands printed are searched for the key. A refused key (401) must not show in the error
either, and `capeval submit` refuses a sweep that holds the key without writing it anywhere."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from _sweeps import sweep_toml
from capeval.benchmarks.loopback_server import FaultConfig, LoopbackServer

REPO = Path(__file__).resolve().parents[2]


def _env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "OPENAI_API_KEY", "CAPEVAL_JUDGE_API_KEY")}
    return {**env, "PYTHONPATH": os.environ.get("PYTHONPATH", ""), **extra}


def _capeval(args: list[str], cwd: Path, timeout: int = 600, **env) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "capeval.engine.cli", *args], cwd=cwd, env=_env(**env), capture_output=True,
                          text=True, timeout=timeout)


def files_holding(folder: Path, needle: str) -> list[str]:
    """Every file under `folder` whose bytes contain `needle` (as UTF-8)."""
    raw = needle.encode()
    return [str(p) for p in folder.rglob("*") if p.is_file() and not p.is_symlink() and raw in p.read_bytes()]


def _judge_inputs(folder: Path) -> tuple[Path, Path]:
    items, captions = folder / "items.jsonl", folder / "captions.jsonl"
    items.write_text("".join(json.dumps({
        "item_id": f"v{v}/q", "video_id": f"v{v}", "task": "Attribute", "annotation": "What colour is the ball?",
        "options": ["red", "blue", "green", "black", "white"], "answer": "red", "category": "Attribute"}) + "\n"
        for v in range(3)))
    captions.write_text("".join(json.dumps({"video_id": f"v{v}", "caption": f"Ball {v}: a red ball rolls."}) + "\n"
                                for v in range(3)))
    return items, captions


@pytest.fixture()
def key() -> str:
    return "sk-capeval-test-" + secrets.token_hex(16)  # unique: found only where this test put it


def test_judge_cli_writes_no_key_and_a_refused_key_is_not_echoed(tmp_path, key):
    items, captions = _judge_inputs(tmp_path)
    printed = []
    with LoopbackServer(FaultConfig(api_key=key)) as server:
        argv = ["judge", "--protocol", "capquiz", "--items", str(items), "--captions", str(captions),
                "--judge", "openai", "--judge-option", "model=loopback", "--judge-option", f"base_url={server.base_url}",
                "--judge-option", "structured=vllm", "--judge-option", f"api_key={key}",
                "--cache", str(tmp_path / "cache"), "--out", str(tmp_path / "out" / "v.parquet"), "--no-progress",
                "--resamples", "0"]
        ok = _capeval(argv, tmp_path)
        printed.append(ok.stdout + ok.stderr)
        assert ok.returncode == 0, ok.stderr[-3000:]
        assert server.stats()["requests"] >= 3  # the key was used: the server answers no other
        wrong = "sk-capeval-wrong-" + secrets.token_hex(16)
        refused = _capeval([a.replace(key, wrong) for a in argv[:-5]] + [
            "--cache", str(tmp_path / "cache2"), "--out", str(tmp_path / "out2" / "v.parquet"), "--no-progress",
            "--resamples", "0"], tmp_path)
        printed.append(refused.stdout + refused.stderr)
        assert refused.returncode != 0 and "401" in refused.stderr, refused.stderr[-3000:]
    assert (tmp_path / "out" / "run.json").is_file() and list((tmp_path / "cache").rglob("*"))
    assert files_holding(tmp_path, key) == [] and files_holding(tmp_path, wrong) == []
    assert not any(key in text or wrong in text for text in printed)


@pytest.mark.slow
def test_sweep_report_and_submit_write_no_key(tmp_path, key):
    ray_tmp = Path(tempfile.mkdtemp(prefix="rk", dir="/tmp"))  # short: Ray's socket paths have a length limit
    try:
        with LoopbackServer(FaultConfig(api_key=key)) as server:
            sweep = tmp_path / "secret_sweep.toml"
            sweep.write_text(sweep_toml("secrets", n_videos=2, prompts=("brief",), frames=("uniform:2",), judges=[{
                "name": "openai", "params": {"model": "loopback", "base_url": server.base_url, "api_key": key,
                                             "structured": "vllm"}}], options={"n_resamples": 20}))
            run = _capeval(["sweep", str(sweep), "--out", str(tmp_path / "out")], tmp_path, RAY_TMPDIR=str(ray_tmp))
            assert run.returncode == 0, run.stderr[-3000:]
        report = _capeval(["report", str(tmp_path / "out")], tmp_path)
        assert report.returncode == 0, report.stderr[-2000:]
        submit = _capeval(["submit", str(sweep), "--dry-run"], tmp_path)
        assert submit.returncode == 2 and "api_key_env" in submit.stderr
        assert (tmp_path / "out" / "report.html").is_file() and (tmp_path / "out" / "run.json").is_file()
        assert list(ray_tmp.rglob("*.log")) or list(ray_tmp.rglob("*.out"))  # the Ray session's logs were searched
        holding = files_holding(tmp_path, key) + files_holding(ray_tmp, key)
        assert holding == [str(sweep)]  # only the user's own sweep file
        for proc in (run, report, submit):
            assert key not in proc.stdout + proc.stderr
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)


def test_the_search_finds_a_key_written_unredacted(tmp_path, key):
    """The check itself: a run record written without capeval.engine.secrets.redact (as before commit a178889) is found."""
    from capeval.engine import runrecord

    out = tmp_path / "out"
    runrecord.append_run_record(out, command="judge", config={"judge": {"api_key": key}})
    assert files_holding(tmp_path, key) == []
    (out / "run.json").write_text(json.dumps({"runs": [{"config": {"judge": {"api_key": key}}}]}))
    assert files_holding(tmp_path, key) == [str(out / "run.json")]


def test_api_key_env_is_read_where_the_judge_runs_and_never_keyed(monkeypatch, key):
    """api_key_env names the variable; the loopback server accepts only its value; the revision and the config's
    record hold the name only; an unset variable is an error naming the field, never a fallback to another key."""
    from capeval.adapters.base import JudgeRequest
    from capeval.adapters.openai_http import HTTPConfigError, OpenAIJudge
    from capeval.engine.secrets import redact_text

    monkeypatch.setenv("CAPEVAL_TEST_JUDGE_KEY", key)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-some-other-key-000")
    with LoopbackServer(FaultConfig(api_key=key)) as server:
        with OpenAIJudge(model="loopback", base_url=server.base_url, api_key_env="CAPEVAL_TEST_JUDGE_KEY",
                         structured="vllm") as judge:
            [reply] = judge.judge([JudgeRequest(key="k", user="Is it red?", choices=("yes", "no"), max_tokens=4)])
            assert reply.error is None and reply.text in ("yes", "no")
            assert key not in judge.revision and key not in repr(judge.config)
        monkeypatch.delenv("CAPEVAL_TEST_JUDGE_KEY")
        with pytest.raises(HTTPConfigError, match="api_key_env: environment variable CAPEVAL_TEST_JUDGE_KEY"):
            OpenAIJudge(model="loopback", base_url=server.base_url, api_key_env="CAPEVAL_TEST_JUDGE_KEY")
    assert redact_text(f"sent {key}") == "sent ***REDACTED***"  # remembered once resolved
