"""OpenAIJudge / OpenAICaptioner against the real loopback HTTP server (faults injected) and a real `vllm serve`."""

from __future__ import annotations

import json
import threading
from collections import Counter, defaultdict

import numpy as np
import pytest

from capeval.adapters.base import CaptionRequest, JudgeRequest
from capeval.adapters.openai_http import OpenAICaptioner, OpenAIJudge, retry_after_s, subsample_indices
from capeval.benchmarks.loopback_server import FaultConfig, LoopbackServer
from capeval.engine.registry import lookup

N = 160


def _plain_requests(n: int, tag: str) -> list[JudgeRequest]:
    return [JudgeRequest(key=f"{tag}-{i}", user=f"{tag} question {i}", seed=i) for i in range(n)]


@pytest.fixture(scope="module")
def faulty_run():
    """One batch through a server that faults 30% of attempts (429 / 500 / stall / garbage)."""
    faults = FaultConfig(rate=0.3, retry_after_s=1, stall_s=3.0, max_faults_per_request=3, seed=7)
    with LoopbackServer(faults) as server:
        with OpenAIJudge(model="loopback", base_url=server.base_url, structured="none", max_in_flight=16,
                         timeout_s=0.5, max_attempts=5, backoff_base_s=0.05, backoff_max_s=5.0) as judge:
            reqs = _plain_requests(N, "faulty")
            reqs.append(JudgeRequest(key="bad", user="please __BAD_REQUEST__"))
            out = judge.judge(reqs)
        stats = server.stats()
    return reqs, out, stats


def test_registered():
    assert lookup("judge", "openai") is OpenAIJudge
    assert lookup("captioner", "openai") is OpenAICaptioner


def test_every_request_answered_once_in_order(faulty_run):
    reqs, out, stats = faulty_run
    assert [r.key for r in out] == [r.key for r in reqs]
    for r, o in zip(reqs[:-1], out[:-1]):
        assert o.error is None, o.error
        assert o.text == "echo:" + r.user  # the answer to this request, not a neighbour's
    faults = Counter(o for _, _, o in stats["attempts"] if o not in ("ok", "400"))
    assert set(faults) == {"429", "500", "stall", "garbage"}, faults  # every fault kind was exercised
    assert 0.15 < sum(faults.values()) / len(stats["attempts"]) < 0.45
    # exactly one successful attempt per request on the server: nothing duplicated, nothing lost
    ok = Counter(k for k, _, o in stats["attempts"] if o == "ok")
    assert ok == Counter(r.user for r in reqs[:-1])


def test_retries_bounded_and_retry_after_honoured(faulty_run):
    reqs, out, stats = faulty_run
    by_key = defaultdict(list)
    for key, t, outcome in stats["attempts"]:
        by_key[key].append((t, outcome))
    assert max(len(v) for v in by_key.values()) <= 5  # max_attempts
    waits = []
    for seq in by_key.values():
        seq.sort()
        waits += [t2 - t1 for (t1, o1), (t2, _) in zip(seq, seq[1:]) if o1 == "429"]
    assert waits, "no 429 was retried"
    # arrival of the attempt after a 429 (answered at once) must come no sooner than Retry-After (1 s)
    assert min(waits) >= 0.95, waits
    assert all(o.latency_s > 0 for o in out)


def test_permanent_400_is_a_per_request_error(faulty_run):
    _, out, stats = faulty_run
    assert out[-1].text is None and "400" in out[-1].error
    assert sum(1 for k, _, o in stats["attempts"] if "__BAD_REQUEST__" in k) == 1  # never retried


def test_concurrency_bound_and_usage():
    with LoopbackServer(FaultConfig(rate=0.0, latency_s=0.02)) as server:
        with OpenAIJudge(model="m", base_url=server.base_url, structured="vllm", max_in_flight=8,
                         price_prompt_per_m=10.0, price_cached_per_m=1.0, price_completion_per_m=30.0) as judge:
            reqs = [JudgeRequest(key=f"c{i}", user=f"x {i} " * 20, choices=("yes", "no")) for i in range(200)]
            out = judge.judge(reqs)
        stats = server.stats()
    assert stats["max_in_flight"] <= 8
    assert stats["max_in_flight"] >= 6  # requests really overlapped up to (about) the bound
    assert {o.text for o in out} <= {"yes", "no"} and len({o.text for o in out}) == 2
    o = out[0]
    assert o.prompt_tokens > 0 and 0 < o.cached_prompt_tokens < o.prompt_tokens
    expected = ((o.prompt_tokens - o.cached_prompt_tokens) * 10 + o.cached_prompt_tokens * 1
                + o.completion_tokens * 30) / 1e6
    assert o.cost_usd == pytest.approx(expected)


def test_openai_json_schema_and_choice_modes():
    schema = {"type": "object", "properties": {"score": {"type": "integer", "enum": [1, 0, -1]},
                                               "reason": {"type": "string"}}, "required": ["score", "reason"]}
    with LoopbackServer() as server:
        with OpenAIJudge(model="m", base_url=server.base_url, structured="openai") as judge:
            out = judge.judge([JudgeRequest(key="a", user="q", json_schema=json.dumps(schema)),
                               JudgeRequest(key="b", user="q", choices=("A", "B", "C")),
                               JudgeRequest(key="c", user="q", json_schema="{not json")])
    assert json.loads(out[0].text)["score"] in (1, 0, -1)
    assert out[1].text in ("A", "B", "C")  # unwrapped from {"answer": ...}
    assert out[2].text is None and "invalid request" in out[2].error


def test_sync_judge_from_threads():
    with LoopbackServer() as server:
        with OpenAIJudge(model="m", base_url=server.base_url, structured="none") as judge:
            results = {}

            def work(t):
                results[t] = judge.judge(_plain_requests(20, f"t{t}"))

            threads = [threading.Thread(target=work, args=(t,)) for t in range(3)]
            for th in threads:
                th.start()
            for th in threads:
                th.join()
    for t in range(3):
        assert [o.text for o in results[t]] == [f"echo:t{t} question {i}" for i in range(20)]


@pytest.mark.parametrize("transport", ["auto", "aiohttp"])
def test_transports_answer_alike(transport):
    faults = FaultConfig(rate=0.2, kinds=("500", "garbage"), seed=5)
    with LoopbackServer(faults) as server:
        with OpenAIJudge(model="m", base_url=server.base_url, structured="none", transport=transport,
                         backoff_base_s=0.01, max_in_flight=8) as judge:
            out = judge.judge(_plain_requests(60, transport))
    assert [o.text for o in out] == [f"echo:{transport} question {i}" for i in range(60)]


def test_retry_after_parsing():
    assert retry_after_s({"retry-after": "2"}) == 2.0
    assert retry_after_s({"retry-after-ms": "250", "retry-after": "9"}) == 0.25
    assert retry_after_s({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}) == 0.0  # a date in the past
    assert retry_after_s({}) is None


def test_captioner_subsamples_frames_only_with_explicit_max_frames():
    assert subsample_indices(32, 4).tolist() == [0, 10, 21, 31]
    assert subsample_indices(480, None).tolist() == list(range(480))  # no silent cap
    frames = np.random.default_rng(0).integers(0, 255, size=(12, 32, 48, 3), dtype=np.uint8)
    stamps = tuple(float(i) for i in range(12))
    with LoopbackServer() as server:
        with OpenAICaptioner(model="cap", base_url=server.base_url, max_frames=4) as cap:
            out = cap.caption([CaptionRequest(key="v", prompt="Describe.", frames=frames, timestamps=stamps),
                               CaptionRequest(key="bad", prompt="x", frames=np.zeros((3, 4), np.uint8))])
        with OpenAICaptioner(model="cap", base_url=server.base_url) as cap:
            body, n_sent, note = cap._body(CaptionRequest(key="all", prompt="Describe.", frames=frames,
                                                          max_tokens=2048))
            full = cap.caption([CaptionRequest(key="all", prompt="Describe.", frames=frames, timestamps=stamps)])
    assert out[0].text == "echo:Describe."  # the prompt as written: timestamps only when the stage adds them
    assert "4 of 12" in out[0].note and out[0].frames_sent == 4
    assert out[1].text is None and "shape" in out[1].error
    # default: every frame of the frame spec is sent, and the body says so
    content = json.loads(body)["messages"][0]["content"]
    assert n_sent == 12 and note is None and sum(p["type"] == "image_url" for p in content) == 12
    assert full[0].frames_sent == 12 and full[0].note is None and full[0].text == "echo:Describe."
    assert json.loads(body)["max_tokens"] == 2048  # the request's caption length (set per captioner by the stage)


def test_captioner_sends_an_image_once_with_the_system_message():
    still = np.full((1, 20, 30, 3), 200, np.uint8)
    with OpenAICaptioner(model="cap", base_url="http://127.0.0.1:9/v1") as cap:
        body, n_sent, note = cap._body(CaptionRequest(key="img", prompt="Describe the image.", frames=still,
                                                      timestamps=(0.0,), media_type="image", system="Be precise."))
    msg = json.loads(body)["messages"]
    assert msg[0] == {"role": "system", "content": "Be precise."}
    assert [p["type"] for p in msg[1]["content"]] == ["image_url", "text"]
    assert msg[1]["content"][1]["text"] == "Describe the image."  # no frame timestamps for a still image
    assert n_sent == 1 and note is None


def test_captioner_flags_truncated_captions():
    frames = np.zeros((2, 16, 16, 3), np.uint8)
    long_prompt = "Describe every object, colour and motion in detail. " * 4
    with LoopbackServer() as server:  # the loopback cuts replies longer than max_tokens with finish_reason "length"
        with OpenAICaptioner(model="cap", base_url=server.base_url, max_tokens=8) as short, \
                OpenAICaptioner(model="cap", base_url=server.base_url) as roomy:
            cut = short.caption([CaptionRequest(key="v", prompt=long_prompt, frames=frames)])[0]
            whole = roomy.caption([CaptionRequest(key="v", prompt=long_prompt, frames=frames)])[0]
    assert cut.truncated and cut.n_tokens == 8 and len(cut.text) == 32
    assert not whole.truncated and whole.text == "echo:" + long_prompt


def test_request_body_layout():
    """Images before the text, no temperature when the request has none, structured fields per mode."""
    with OpenAIJudge(model="m", base_url="http://127.0.0.1:9/v1", structured="vllm") as judge:
        img = JudgeRequest(key="i", user="Caption: x", system="sys", images=(b"\xff\xd8jpeg",), temperature=None,
                           choices=("yes", "no"), seed=5)
        body, unwrap = judge.body(img)
        plain, _ = judge.body(JudgeRequest(key="p", user="q", temperature=0.0))
    msg = json.loads(body)
    assert unwrap is None and "temperature" not in msg and msg["seed"] == 5
    assert msg["structured_outputs"] == {"choice": ["yes", "no"]}
    assert msg["messages"][0] == {"role": "system", "content": "sys"}
    assert [p["type"] for p in msg["messages"][1]["content"]] == ["image_url", "text"]
    assert msg["messages"][1]["content"][0]["image_url"]["url"].startswith("data:image/jpeg;base64,")
    assert json.loads(plain)["temperature"] == 0.0


def test_unknown_option_names_the_valid_ones():
    with pytest.raises(ValueError, match="max_images.*valid.*max_frames"):
        OpenAICaptioner(model="m", base_url="http://127.0.0.1:9/v1", max_images=4)


@pytest.mark.vllm
def test_openai_judge_against_vllm_serve(vllm_server):
    """The real `vllm serve` (engineer D1's session fixture): choice-constrained answers come back valid."""
    with OpenAIJudge(model=vllm_server.model, base_url=vllm_server.base_url, structured="vllm", max_in_flight=4, timeout_s=120) as judge:
        reqs = [JudgeRequest(key=f"v{i}", user=f"Is the sky blue? {i}", choices=("yes", "no"), max_tokens=4, seed=i)
                for i in range(4)]
        out = judge.judge(reqs)
    assert all(o.error is None for o in out), [o.error for o in out]
    assert all(o.text in ("yes", "no") for o in out)
    assert all(o.prompt_tokens > 0 and o.completion_tokens > 0 for o in out)
