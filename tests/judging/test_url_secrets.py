"""Issue 26 item 6: a key inside a URL never reaches disk or the terminal. `base_url` may carry credentials as userinfo
(`http://user:KEY@host`) or as a query parameter (`?api-key=KEY`); `capeval judge` against the loopback server, with
each form, writes run.json, verdicts and caches, and every file under the test's folder and every printed line is
searched for the key. `capeval construct ... --judge-option api_key=KEY` writes construct.json without it;
`capeval submit` refuses a sweep whose URL holds a key, writing nothing; the batch judge's state names its endpoint
without the key."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest

from capeval.benchmarks.loopback_server import FaultConfig, LoopbackServer
from capeval.engine import secrets as S
from capeval.engine.secrets import REDACTED

REPO = Path(__file__).resolve().parents[2]


def _env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "OPENAI_API_KEY", "CAPEVAL_JUDGE_API_KEY")}
    return {**env, "PYTHONPATH": os.environ.get("PYTHONPATH", ""), **extra}


def _capeval(args: list[str], cwd: Path, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "capeval.engine.cli", *args], cwd=cwd, env=_env(), capture_output=True,
                          text=True, timeout=timeout)


def files_holding(folder: Path, needle: str) -> list[str]:
    raw = needle.encode()
    return [str(p) for p in folder.rglob("*") if p.is_file() and not p.is_symlink() and raw in p.read_bytes()]


@pytest.fixture()
def key() -> str:
    return "sk-capeval-url-" + secrets.token_hex(16)


# -- the rules ------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("url, expected", [
    ("http://user:SECRETKEY1@h:8000/v1", f"http://{REDACTED}@h:8000/v1"),
    ("https://SECRETKEY1@h/v1", f"https://{REDACTED}@h/v1"),
    ("https://h/v1?api-key=SECRETKEY1", f"https://h/v1?api-key={REDACTED}"),
    ("https://h/v1?api-version=2024-06-01&api_key=SECRETKEY1", f"https://h/v1?api-version=2024-06-01&api_key={REDACTED}"),
    ("https://h/v1?key=SECRETKEY1&x=1", f"https://h/v1?key={REDACTED}&x=1"),
    ("https://h/o?token=SECRETKEY1#access_token=SECRETKEY2", f"https://h/o?token={REDACTED}#access_token={REDACTED}"),
    ("https://b.blob/c/v.mp4?sv=2024&sig=SECRET%2BKEY1", f"https://b.blob/c/v.mp4?sv=2024&sig={REDACTED}"),
    ("https://s3/b/k?X-Amz-Signature=SECRETKEY1&X-Amz-Expires=60", f"https://s3/b/k?X-Amz-Signature={REDACTED}&X-Amz-Expires=60"),
])
def test_url_credentials_are_blanked(url, expected):
    assert S.redact_url(url) == expected


@pytest.mark.parametrize("url", ["http://127.0.0.1:8000/v1", "https://h/v1?api-version=2024-06-01",
                                 "https://h/v1?max_tokens=5&key_field=id", "https://h/path/token/x"])
def test_urls_without_credentials_are_unchanged(url):
    assert S.redact_url(url) == url == S.redact_text(url)


def test_every_writer_blanks_a_url_key_in_objects_argv_and_messages():
    k1, k2 = "sk-url-one-" + secrets.token_hex(6), "sk-url-two-" + secrets.token_hex(6)
    a, b = f"http://me:{k1}@127.0.0.1:9/v1", f"https://h/v1?api-key={k2}"
    argv = ["capeval", "judge", "--base-url", a, "--judge-option", f"base_url={b}"]
    assert not any(k in arg for arg in S.redact_argv(argv) for k in (k1, k2))
    out = json.dumps(S.redact({"judge": {"params": {"base_url": a}}, "urls": [b]}))
    assert k1 not in out and k2 not in out and "127.0.0.1:9/v1" in out
    msg = S.redact_message(f"api_key: could not reach {a} nor {b}")
    assert k1 not in msg and k2 not in msg and msg.startswith("api_key: could not")  # the pair rule is not applied
    # each value blanked is remembered: the bare key elsewhere in the same process is blanked too
    assert S.redact_text(f"401 for {k1} and {k2}") == f"401 for {REDACTED} and {REDACTED}"


# -- end to end -----------------------------------------------------------------------------------------------------
def _judge_inputs(folder: Path) -> tuple[Path, Path]:
    items, captions = folder / "items.jsonl", folder / "captions.jsonl"
    items.write_text("".join(json.dumps({
        "item_id": f"v{v}/q", "video_id": f"v{v}", "task": "Attribute", "annotation": "What colour is the ball?",
        "options": ["red", "blue", "green", "black", "white"], "answer": "red", "category": "Attribute"}) + "\n"
        for v in range(2)))
    captions.write_text("".join(json.dumps({"video_id": f"v{v}", "caption": f"Ball {v}: a red ball rolls."}) + "\n"
                                for v in range(2)))
    return items, captions


@pytest.mark.parametrize("form", ["userinfo", "query"])
def test_judge_cli_writes_and_prints_no_key_from_base_url(tmp_path, key, form):
    items, captions = _judge_inputs(tmp_path)
    with LoopbackServer() as server:
        host = server.base_url.split("://", 1)[1]
        url = f"http://capeval:{key}@{host}" if form == "userinfo" else f"{server.base_url}?api-key={key}"
        argv = ["judge", "--protocol", "capquiz", "--items", str(items), "--captions", str(captions),
                "--judge", "openai", "--judge-option", "model=loopback", "--judge-option", f"base_url={url}",
                "--judge-option", "structured=vllm", "--cache", str(tmp_path / "cache"),
                "--out", str(tmp_path / "out" / "v.parquet"), "--no-progress", "--resamples", "0"]
        done = _capeval(argv, tmp_path)
        bad = _capeval(["judge", "--protocol", "capquiz", "--items", str(items), "--captions", str(captions),
                        "--judge", "openai", "--judge-option", "model=loopback", "--judge-option",
                        f"base_url=ftp://capeval:{key}@{host}", "--out", str(tmp_path / "bad.parquet")], tmp_path)
    assert (tmp_path / "out" / "run.json").is_file(), done.stderr[-3000:]
    assert bad.returncode == 2 and "base_url" in bad.stderr, bad.stderr[-2000:]  # the URL is named, its key is not
    assert files_holding(tmp_path, key) == []
    for proc in (done, bad):
        assert key not in proc.stdout + proc.stderr
    record = json.loads((tmp_path / "out" / "run.json").read_text())["runs"][-1]
    assert any(REDACTED in arg for arg in record["argv"])


def test_construct_record_is_redacted_like_run_json(tmp_path, key):
    sys.path.insert(0, str(REPO / "tests" / "construct"))
    from _capquiz_inputs import generation_replies, make_videos

    videos, truths = make_videos(tmp_path / "videos", n=1)
    replies = tmp_path / "replies.jsonl"
    replies.write_text("".join(json.dumps(r) + "\n" for r in generation_replies(truths)))
    with LoopbackServer(FaultConfig(api_key=key)) as server:
        done = _capeval(["construct", "capquiz", "--input", str(videos), "--out", str(tmp_path / "quiz"),
                         "--judge", "openai", "--judge-option", f"openai:base_url={server.base_url}",
                         "--judge-option", "openai:model=loopback", "--judge-option", "openai:structured=vllm",
                         "--judge-option", f"openai:api_key={key}", "--step-judge", "generate=replay",
                         "--judge-option", f"replay:replies={replies}", "--no-progress"], tmp_path)
        assert server.stats()["requests"] > 0, done.stderr[-3000:]  # the key was used: the server answers no other
    assert (tmp_path / "quiz" / "construct.json").is_file(), done.stderr[-3000:]
    assert files_holding(tmp_path, key) == []
    assert key not in done.stdout + done.stderr


def test_submit_refuses_a_url_holding_a_key_and_writes_nothing(tmp_path, key):
    from _sweeps import sweep_toml

    sweep = tmp_path / "url_sweep.toml"
    sweep.write_text(sweep_toml("urlsecret", n_videos=1, prompts=("brief",), frames=("uniform:2",), judges=[{
        "name": "openai", "params": {"model": "m", "base_url": f"https://judge.example/v1?api-key={key}",
                                     "structured": "vllm"}}], options={"n_resamples": 0}))
    submit = _capeval(["submit", str(sweep), "--dry-run"], tmp_path)
    assert submit.returncode == 2, submit.stderr[-2000:]
    assert "URL holding a credential" in submit.stderr and "api_key_env" in submit.stderr
    assert files_holding(tmp_path, key) == [str(sweep)]  # only the user's own sweep file
    assert key not in submit.stdout + submit.stderr


def test_batch_state_names_its_endpoint_without_the_key(tmp_path, key):
    from capeval.adapters.openai_batch import OpenAIBatchJudge

    with OpenAIBatchJudge(model="m", base_url=f"http://capeval:{key}@127.0.0.1:9/v1?api-key={key}",
                          api_key_env=None, state_dir=str(tmp_path)) as judge:
        assert key not in judge.provider and key not in judge.where()
        judge.state.begin(judge.provider, "sha", [("k", "b")])
    assert files_holding(tmp_path, key) == []


def test_a_refused_judge_option_message_clips_the_url_after_blanking_its_key(tmp_path):
    """The usage error that lists what was given clips long values: the key is blanked first, so no prefix of it
    is printed either."""
    key = "sk-" + "k" * 120  # longer than the clip: a prefix would show
    items, captions = _judge_inputs(tmp_path)
    done = _capeval(["judge", "--protocol", "capquiz", "--items", str(items), "--captions", str(captions),
                     "--judge", "openai", "--judge-model", "m",
                     "--base-url", f"ftp://capeval:{key}@127.0.0.1:9/v1", "--out", str(tmp_path / "v.parquet")],
                    tmp_path)
    assert done.returncode == 2 and "--base-url" in done.stderr, done.stderr[-2000:]
    assert "sk-kkkkk" not in done.stdout + done.stderr


def test_sweep_check_names_a_bad_url_without_its_key(tmp_path, key):
    from _sweeps import sweep_toml

    sweep = tmp_path / "bad_url.toml"
    sweep.write_text(sweep_toml("badurl", n_videos=1, prompts=("brief",), frames=("uniform:2",), judges=[{
        "name": "openai", "params": {"model": "m", "base_url": f"ftp://capeval:{key}@judge.example/v1",
                                     "structured": "vllm"}}], options={"n_resamples": 0}))
    check = _capeval(["sweep", str(sweep), "--check"], tmp_path)
    assert check.returncode == 2 and "base_url" in check.stderr + check.stdout, check.stderr[-2000:]
    assert key not in check.stdout + check.stderr
