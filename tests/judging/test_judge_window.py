"""The judge window is the judge's own `max_in_flight` (issue 30 item 0): a loopback OpenAI-compatible server counts
the requests it holds at once while each command runs through the real CLI -- `capeval judge`, `judge validate`,
`construct`, `bench judge` and a sweep -- with `max_in_flight` set in the judge's options (a window neither the
loop's old 64 nor the backend's default); the default window of a judge at a base_url is the documented 256; and a
window larger than the judge takes is an error naming the option (exit 2), never silently lowered."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from capeval.benchmarks.loopback_server import FaultConfig, LoopbackServer
from capeval.engine import exitcodes

REPO = Path(__file__).resolve().parents[2]
WINDOW = 96  # neither the loop's former 64 nor a backend's default
LATENCY_S = 0.4  # every answer waits, so the client's whole window is at the server at once


def _capeval(args: list[str], cwd: Path, timeout: int = 600, **env) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "OPENAI_API_KEY", "CAPEVAL_JUDGE_API_KEY")}
    return subprocess.run([sys.executable, "-m", "capeval.engine.cli", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env={**clean, "PYTHONPATH": os.environ.get("PYTHONPATH", ""), **env})


def _server() -> LoopbackServer:
    # the attempt log counts each distinct request once (`first_arrivals`): on a loaded machine an answer can take
    # longer than the median, and the drain's tail hedging then sends copies of it, which arrive again
    return LoopbackServer(FaultConfig(latency_s=LATENCY_S), mode="process")


def _capquiz_inputs(folder: Path, n: int) -> tuple[Path, Path]:
    items, captions = folder / "items.jsonl", folder / "captions.jsonl"
    items.write_text("".join(json.dumps({
        "item_id": f"v{v}/q", "video_id": f"v{v}", "task": "Attribute", "annotation": f"What colour is ball {v}?",
        "options": ["red", "blue", "green", "black", "white"], "answer": "red", "category": "Attribute"}) + "\n"
        for v in range(n)))
    captions.write_text("".join(json.dumps({"video_id": f"v{v}", "caption": f"Ball {v}: a red ball rolls."}) + "\n"
                                for v in range(n)))
    return items, captions


def _judge_argv(tmp: Path, server, n: int, *options: str) -> list[str]:
    items, captions = _capquiz_inputs(tmp, n)
    return ["judge", "--protocol", "capquiz", "--items", str(items), "--captions", str(captions), "--judge", "openai",
            "--judge-option", "model=loopback", "--judge-option", f"base_url={server.base_url}",
            "--judge-option", "structured=vllm", *options, "--cache", str(tmp / "cache"),
            "--out", str(tmp / "out" / "v.parquet"), "--no-progress", "--resamples", "0"]


def test_capeval_judge_keeps_the_judges_max_in_flight(tmp_path):
    with _server() as server:
        run = _capeval(_judge_argv(tmp_path, server, 3 * WINDOW, "--judge-option", f"max_in_flight={WINDOW}"),
                       tmp_path)
        stats = server.stats()
    assert run.returncode == 0, run.stderr[-3000:]
    assert len(stats["first_arrivals"]) == 3 * WINDOW <= stats["requests"]
    assert stats["max_in_flight"] == WINDOW


def test_a_judge_at_a_base_url_defaults_to_a_window_of_256(tmp_path):
    with _server() as server:
        run = _capeval(_judge_argv(tmp_path, server, 320), tmp_path)
        stats = server.stats()
    assert run.returncode == 0, run.stderr[-3000:]
    assert stats["max_in_flight"] == 256


def test_judge_validate_keeps_the_judges_max_in_flight(tmp_path, shared_data):
    root = shared_data / "capability"
    (tmp_path / "annotations").mkdir()
    lines = (root / "annotations" / "object_color.jsonl").read_text().splitlines()[: 2 * WINDOW]
    (tmp_path / "annotations" / "object_color.jsonl").write_text("\n".join(lines) + "\n")
    with _server() as server:
        run = _capeval(["judge", "validate", "--protocol", "capability", "--items", str(tmp_path / "annotations"),
                        "--captions", str(root / "captions" / "gpt-4o-0806"),
                        "--reference", str(root / "judgments" / "gpt-4o-0806"), "--judge", "openai",
                        "--judge-option", "model=loopback", "--judge-option", f"base_url={server.base_url}",
                        "--judge-option", f"max_in_flight={WINDOW}", "--max-reasks", "0",
                        "--cache", str(tmp_path / "cache"), "--no-progress", "--resamples", "10",
                        "--json", "--out", str(tmp_path / "report.json")], tmp_path)
        stats = server.stats()
    assert stats["requests"] >= 2 * WINDOW, run.stderr[-3000:]
    assert stats["max_in_flight"] == WINDOW, run.stderr[-3000:]


def _construct_inputs(folder: Path, n: int) -> Path:
    path = folder / "videos.jsonl"
    path.write_text("".join(json.dumps({"video_id": f"v{i}", "description": f"Video {i}: a red ball rolls left."})
                            + "\n" for i in range(n)))
    return path


def test_construct_keeps_the_judges_max_in_flight_and_refuses_a_wider_window(tmp_path):
    videos = _construct_inputs(tmp_path, 2 * WINDOW)
    with _server() as server:
        base = ["construct", "capquiz", "--input", str(videos), "--judge", "openai",
                "--judge-option", "model=loopback", "--judge-option", f"base_url={server.base_url}",
                "--judge-option", "structured=vllm", "--judge-option", f"max_in_flight={WINDOW}",
                "--trials", "0", "--dedup", "none", "--no-progress"]
        run = _capeval(base + ["--out", str(tmp_path / "quiz")], tmp_path)
        stats = server.stats()
        wider = _capeval(base + ["--out", str(tmp_path / "quiz2"), "--max-in-flight", str(4 * WINDOW)], tmp_path)
        after = server.stats()
    assert stats["requests"] >= 2 * WINDOW, run.stderr[-3000:]  # taxonomy: one request per video
    assert stats["max_in_flight"] == WINDOW, run.stderr[-3000:]
    assert wider.returncode == exitcodes.USAGE, wider.stderr[-3000:]
    assert f"max_in_flight={4 * WINDOW}" in wider.stderr and "Traceback" not in wider.stderr
    assert after["requests"] == stats["requests"]  # refused before anything was sent


def test_bench_judge_keeps_the_level_and_refuses_one_the_judge_cannot_take(tmp_path, shared_data):
    root = shared_data / "capability"
    base = ["bench", "judge", "--judge", "openai", "--judge-model", "loopback", "--protocol", "capability",
            "--items", str(root / "annotations" / "object_color.jsonl"),
            "--captions", str(root / "captions" / "gpt-4o-0806"), "--json", "--warmup", "0",
            "--judge-option", f"max_in_flight={WINDOW}"]
    with _server() as server:
        run = _capeval(base + ["--base-url", server.base_url, "--requests", str(2 * WINDOW), "--concurrency",
                               str(WINDOW)], tmp_path)
        stats = server.stats()
        wider = _capeval(base + ["--base-url", server.base_url, "--requests", str(2 * WINDOW), "--concurrency",
                                 str(2 * WINDOW)], tmp_path)
        after = server.stats()
    assert run.returncode == 0, run.stderr[-3000:]
    assert stats["max_in_flight"] == WINDOW
    assert wider.returncode == exitcodes.USAGE, wider.stderr[-3000:]
    assert f"max_in_flight={2 * WINDOW}" in wider.stderr and "Traceback" not in wider.stderr
    assert after["requests"] == stats["requests"]


def test_sweep_keeps_the_judges_max_in_flight(tmp_path):
    """Captions given (no captioning to wait for): the judge's requests are all ready at once."""
    _capquiz_inputs(tmp_path, 3 * WINDOW)
    ray_tmp = Path(tempfile.mkdtemp(prefix="rw", dir="/tmp"))  # short: Ray's socket paths have a length limit
    try:
        with _server() as server:
            sweep = tmp_path / "window.toml"
            sweep.write_text(f'''name = "window"
[[datasets]]
name = "data"
kind = "items"
path = "items.jsonl"

[[captions]]
path = "captions.jsonl"
captioner = "mine"

[[protocols]]
name = "capquiz"

[[judges]]
name = "openai"
params = {{ base_url = "{server.base_url}", model = "loopback", structured = "vllm", max_in_flight = {WINDOW} }}

[options]
n_resamples = 20
''')
            run = _capeval(["sweep", str(sweep), "--out", str(tmp_path / "out"), "--no-progress"], tmp_path,
                           RAY_TMPDIR=str(ray_tmp))
            stats = server.stats()
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
    assert run.returncode == 0, run.stderr[-3000:]
    assert len(stats["first_arrivals"]) == 3 * WINDOW <= stats["requests"]
    assert stats["max_in_flight"] == WINDOW
