"""VLLMCaptioner (frames as images, batch and streaming) and VLLMJudge (images) on vLLM's real CPU engine over a tiny
random-weight Idefics3 built here. (Video input per VLM family: tests/adapters/test_vllm_video_families.py.)

Frames are decoded from real encoded videos (capeval.engine.datasets.synthetic_videos + capeval.engine.frames.decode). The model's weights are
random, so the assertions are about the engine path: one response per request, in order, real token counts,
determinism under a seed, images reaching the model (they change the output), and structured JSON from a
multimodal judge request.
"""

from __future__ import annotations

import io
import json

import numpy as np
import pytest
from _fixtures_vllm import TINY_VLM_MAX_IMAGES

from capeval.adapters.base import CaptionRequest, JudgeRequest

pytestmark = pytest.mark.vllm

N_FRAMES = 4
PROMPT = "Describe the video in detail."


@pytest.fixture(scope="module")
def clips(tmp_path_factory) -> list[np.ndarray]:
    """Frames (uint8 T,H,W,3) of two different real H.264 clips."""
    from capeval.engine.datasets.synthetic_videos import make_video
    from capeval.engine.frames.decode import decode_frames
    from capeval.engine.frames.sampling import FrameSpec

    d = tmp_path_factory.mktemp("vlm-videos")
    out = []
    for seed in (3, 4):
        path = d / f"clip{seed}.mp4"
        make_video(path, codec="libx264", seconds=2, fps=12, size=(160, 120), seed=seed)
        out.append(decode_frames(path, FrameSpec.parse(f"uniform:{N_FRAMES}")).frames)
    return out


@pytest.fixture(scope="module")
def vlm_captioner(tiny_vlm_dir):
    from capeval.adapters.vllm_captioner import VLLMCaptioner

    from _fixtures_vllm import small_kv_cache

    with small_kv_cache() as kv:
        cap = VLLMCaptioner(str(tiny_vlm_dir), max_model_len=1024, max_frames=8, seed=0, **kv)
    yield cap
    cap.close()


def _req(key, frames, **kw) -> CaptionRequest:
    return CaptionRequest(key=key, prompt=kw.pop("prompt", PROMPT), frames=frames, max_tokens=kw.pop("max_tokens", 12),
                          **kw)  # fmt: skip


def test_frames_go_in_as_images_and_captions_come_back_in_order(vlm_captioner, clips):
    from capeval.adapters.base import Captioner
    from capeval.testing.random_vlm import TOKENS_PER_IMAGE
    from capeval.engine.registry import lookup

    assert lookup("captioner", "vllm") is type(vlm_captioner) and isinstance(vlm_captioner, Captioner)
    assert vlm_captioner.frame_input == "images"  # Idefics3's processor has no video processor
    reqs = [_req(f"c{i}", clips[i % 2], seed=i) for i in range(4)] + [_req("short", clips[0][:2])]
    out = vlm_captioner.caption(reqs)
    assert [r.key for r in out] == [r.key for r in reqs]
    for r in out:
        assert r.error is None, r.error
        assert r.text and r.n_tokens > 0
    # Every frame became TOKENS_PER_IMAGE placeholder tokens in the prompt: 2 fewer frames, 2 x that fewer tokens.
    assert out[0].prompt_tokens - out[4].prompt_tokens >= 2 * TOKENS_PER_IMAGE
    assert out[0].prompt_tokens == out[2].prompt_tokens  # same clip, same prompt


def test_same_seed_same_caption_and_pixels_matter(vlm_captioner, clips):
    reqs = [_req("a", clips[0], seed=7, temperature=1.0), _req("b", clips[0], seed=7, temperature=1.0)]
    a, b = vlm_captioner.caption(reqs)
    again = vlm_captioner.caption(reqs[:1])[0]
    assert a.text == b.text == again.text
    # Greedy captions of two different videos (same prompt, same token count) differ only through the pixels.
    g0, g1 = vlm_captioner.caption([_req("g0", clips[0], max_tokens=24), _req("g1", clips[1], max_tokens=24)])
    assert g0.prompt_tokens == g1.prompt_tokens
    assert g0.text != g1.text


def test_bad_frames_fail_alone(vlm_captioner, clips):
    bad = [
        _req("float", clips[0].astype(np.float32)),
        _req("empty", clips[0][:0]),
        _req("too_many", np.concatenate([clips[0]] * 3)),  # 12 frames > max_frames=8
    ]
    out = vlm_captioner.caption([bad[0], _req("ok", clips[1]), bad[1], bad[2]])
    assert [r.key for r in out] == ["float", "ok", "empty", "too_many"]
    assert out[1].error is None and out[1].text
    for r, word in zip((out[0], out[2], out[3]), ("uint8", "empty", "max_frames")):
        assert r.text is None and word in r.error


def _jpegs(frames: np.ndarray) -> tuple[bytes, ...]:
    from PIL import Image

    out = []
    for f in frames:
        buf = io.BytesIO()
        Image.fromarray(f).save(buf, format="JPEG", quality=90)
        out.append(buf.getvalue())
    return tuple(out)


def test_vcinspector_judge_with_images_returns_a_score(vllm_vlm_judge, clips):
    """A VC-Inspector request (its own system prompt, schema and JSON parser) through VLLMJudge with frames."""
    from capeval.engine.protocols.vcinspector import parsing, prompts
    from capeval.engine.schemas import ParseStatus

    assert N_FRAMES == TINY_VLM_MAX_IMAGES
    user = "Caption:\nA red circle moves left.\n\nRate this caption against the video frames."
    # max_tokens as VC-Inspector renders it (256): room for the schema's 400-character explanation.
    reqs = [JudgeRequest(key=f"v{i}", user=user, system=prompts.SYSTEM, json_schema=prompts.SCORE_SCHEMA,
                         images=_jpegs(clips[i % 2]), max_tokens=256, seed=i) for i in range(3)]  # fmt: skip
    reqs.append(JudgeRequest(key="too_many", user=user, images=_jpegs(np.concatenate([clips[0]] * 2)),
                             json_schema=prompts.SCORE_SCHEMA))  # fmt: skip
    out = vllm_vlm_judge.judge(reqs)  # the suite's shared multimodal engine (tests/_fixtures_vllm.py)
    assert [r.key for r in out] == [r.key for r in reqs]
    for r in out[:3]:
        assert r.error is None, r.error
        assert r.prompt_tokens > 4 * N_FRAMES and r.completion_tokens > 0
        # xgrammar lets raw control bytes into JSON strings (random weights emit them): JSON, not strict JSON.
        obj = json.loads(r.text, strict=False)
        assert isinstance(obj["score"], int) and 1 <= obj["score"] <= 5 and isinstance(obj["explanation"], str)
        code, status, _ = parsing.parse({}, r.text)  # the protocol's own parser turns it into a verdict
        assert status != ParseStatus.FAILED and code == obj["score"] - 1
    assert out[3].text is None and out[3].error  # 8 images over the engine's limit of 4: this request only


def test_streaming_a_short_caption_does_not_wait_for_a_long_one(vlm_captioner, clips):
    """acaption feeds the running engine: a 2-token caption asked together with a long one comes back first (the
    old batch call returned both only when the longest was done), and a bad request fails alone, as a response."""
    import asyncio

    from capeval.adapters.base import StreamingCaptioner

    assert isinstance(vlm_captioner, StreamingCaptioner) and vlm_captioner.max_in_flight == 256
    order: list[str] = []

    async def one(r):
        resp = await vlm_captioner.acaption(r)
        order.append(r.key)
        return resp

    async def go():
        return await asyncio.gather(one(_req("long", clips[0], max_tokens=64)),
                                    one(_req("short", clips[1], max_tokens=2)), one(_req("bad", clips[0][:0])))

    long, short, bad = asyncio.run(go())
    assert bad.text is None and "empty" in bad.error
    assert short.error is None and short.n_tokens <= 2
    assert long.error is None and long.n_tokens > 8  # (greedy on fixed random weights: 64 tokens, no early EOS)
    assert order.index("short") < order.index("long") and short.latency_s < long.latency_s


def test_a_failing_observer_does_not_stop_the_engine_thread(vlm_captioner, clips):
    """Callbacks run on the one thread that drives the engine: one that raises must neither lose its response nor
    stop that thread (every later request would wait forever)."""
    import asyncio

    def observer(request, output):
        raise RuntimeError("observer bug")

    async def two():
        first = await asyncio.wait_for(vlm_captioner.acaption(_req("o1", clips[0], max_tokens=2)), timeout=120)
        second = await asyncio.wait_for(vlm_captioner.acaption(_req("o2", clips[1], max_tokens=2)), timeout=120)
        return first, second

    vlm_captioner.on_output = observer
    try:
        first, second = asyncio.run(two())
    finally:
        vlm_captioner.on_output = None
    assert first.error is None and first.text is not None and second.error is None
