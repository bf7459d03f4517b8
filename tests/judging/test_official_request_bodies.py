"""Official mode sends exactly what the official code sends (issue 26 item 12): the request bodies, captured at a real
HTTP server on 127.0.0.1, compared field by field with the official calls (shared/protocols/<name>.toml `sampling`,
shared/protocols/README.md "Official rules"), through the production path: protocol.build_requests -> run_judging
(the official judging policy, re-asks included) -> the OpenAI-compatible judge -> HTTP.

* CAPability (eval.py:90-109): model + [system, user]; no temperature, max_tokens or seed. A rejected reply is
  re-asked with the same body -- without a seed, a fresh sample, as the official retry round is.
* VidCapBench (eval.py:29-43): model + [user], both steps; nothing else.
* CapQuiz (paper: no settings stated) and LVCap's AutoDQ events (evaluate_dream_gpt.py:64-86): model + [user].
* VC-Inspector (inference.py: generate(max_new_tokens=1024), nothing else): model + [user with the 32 frames then
  the text] + max_tokens 1024.

The expected message texts are rendered here from the official packs with `str.format` (the pack README's recipe),
not by capeval's renderers."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import threading
import tomllib
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from capeval.adapters.openai_http import OpenAIJudge
from capeval.engine.judging.runner import run_judging
from capeval.engine.registry import lookup
from capeval.engine.schemas import CAPTIONS, FRAMES, ITEMS, ParseStatus, conform

PACK_DIR = Path(os.environ.get("CAPEVAL_PACK_DIR", Path(__file__).resolve().parents[2].parent / "shared" / "protocols"))
MODEL = "official-judge"
CAPTION = 'A girl in a "red" coat walks through a park and opens a blue umbrella when it starts to rain.'


def _pack(name: str) -> dict:
    path = PACK_DIR / f"{name}.toml"
    if not path.is_file():
        pytest.skip(f"{path} not present")
    return {p["id"]: p for p in tomllib.loads(path.read_text(encoding="utf-8"))["prompt"]}


class CaptureServer:
    """/v1/chat/completions on 127.0.0.1: records every JSON body, answers `reply(body, n)` (n: how many times this
    exact body came before)."""

    def __init__(self, reply):
        self.reply, self.bodies = reply, []
        self._seen: dict[str, int] = {}

    async def _chat(self, request):
        from aiohttp import web

        body = await request.json()
        self.bodies.append(body)
        key = json.dumps(body, sort_keys=True)
        n = self._seen.get(key, 0)
        self._seen[key] = n + 1
        text = self.reply(body, n)
        return web.json_response({"id": "x", "object": "chat.completion", "model": body.get("model"),
                                  "choices": [{"index": 0, "finish_reason": "stop",
                                               "message": {"role": "assistant", "content": text}}],
                                  "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}})

    def __enter__(self):
        from aiohttp import web

        app = web.Application(client_max_size=64 * 2**20)
        app.router.add_post("/v1/chat/completions", self._chat)
        ready = threading.Event()

        def main():
            self._loop = asyncio.new_event_loop()
            self._runner = web.AppRunner(app, access_log=None)
            self._loop.run_until_complete(self._runner.setup())
            site = web.TCPSite(self._runner, "127.0.0.1", 0)
            self._loop.run_until_complete(site.start())
            self.port = site._server.sockets[0].getsockname()[1]
            ready.set()
            self._loop.run_forever()
            self._loop.run_until_complete(self._runner.cleanup())
            self._loop.close()

        self._thread = threading.Thread(target=main, daemon=True)
        self._thread.start()
        assert ready.wait(30)
        return self

    def __exit__(self, *exc):
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=30)


def _judge_through(server: CaptureServer, protocol_name: str, items, captions, tmp_path, **params):
    protocol = lookup("protocol", protocol_name)
    judge = OpenAIJudge(model=MODEL, base_url=f"http://127.0.0.1:{server.port}/v1", api_key="test-key",
                        max_attempts=1)
    try:
        requests = protocol.build_requests(items, captions, judge=judge.name, judge_revision=judge.revision,
                                           **params)
        verdicts = run_judging(requests, judge, cache_dir=tmp_path / "cache", protocol=protocol,
                               protocol_params={k: v for k, v in params.items() if k != "frames"}, progress=False,
                               keep_intermediate=True)
    finally:
        judge.close()
    return verdicts.to_pylist()


def _text_body(user: str, system: str | None = None, **sampling) -> dict:
    """The official call: the model, the messages, and only the sampling fields the official code sets."""
    messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": user}]
    return {"model": MODEL, "messages": messages, **sampling}


def _assert_same_fields(got: dict, expected: dict) -> None:
    assert sorted(got) == sorted(expected), f"fields sent {sorted(got)}, the official call has {sorted(expected)}"
    for name in expected:
        assert got[name] == expected[name], name


def _items(rows: list[dict], benchmark: str) -> pa.Table:
    return conform(pa.table({k: [r.get(k) for r in rows] for k in ITEMS.names}
                            | {"benchmark": [benchmark] * len(rows)}), ITEMS)


def _captions(videos: list[str], text: str = CAPTION) -> pa.Table:
    n = len(videos)
    return conform(pa.table({"caption_key": [f"k-{v}" for v in videos], "captioner": ["m"] * n,
                             "prompt_id": ["p"] * n, "frame_spec": ["f"] * n, "video_id": videos,
                             "text": [text] * n}), CAPTIONS)


def test_capability_sends_the_two_messages_only_and_resends_a_rejected_ask_unchanged(tmp_path):
    pack = _pack("capability")["judge/scene"]
    scenes = ["city park", "beach", "kitchen", "forest", "stadium", "harbour"]  # > 5: the official rounds run
    expected = {s: _text_body(pack["user"].format(caption=CAPTION, scene=s), pack["role_system"]) for s in scenes}
    # round 1: the official validator rejects prose (6 missing > 5: a second round); round 2 is accepted
    with CaptureServer(lambda body, n: "It matches." if n == 0 else '{"scene": "x", "score": 1}') as server:
        verdicts = _judge_through(server, "capability",
                                  _items([{"task": "scene", "item_id": f"s{i}", "video_id": f"s{i}",
                                           "annotation": s, "media_type": "image"} for i, s in enumerate(scenes)],
                                         "capability"),
                                  _captions([f"s{i}" for i in range(len(scenes))]), tmp_path, mode="official",
                                  prompts=str(PACK_DIR / "capability.toml"))
    assert len(server.bodies) == 2 * len(scenes)
    by_user = {}
    for body in server.bodies:
        scene = next(s for s, e in expected.items() if e["messages"][1]["content"] == body["messages"][1]["content"])
        _assert_same_fields(body, expected[scene])
        by_user[scene] = by_user.get(scene, 0) + 1
    assert by_user == {s: 2 for s in scenes}  # each re-ask is the same call again, as the official retry round's
    assert [(v["verdict"], v["attempt"]) for v in verdicts] == [(1, 1)] * len(scenes)


def test_vidcapbench_sends_one_user_message_per_step_and_nothing_else(tmp_path):
    pack = _pack("vidcapbench")
    question, reference, answer = "What colour is the umbrella?", "Blue.", "The umbrella is blue."
    expected = [_text_body(pack["judge/answer"]["user"].format(caption=CAPTION, question=question)),
                _text_body(pack["judge/score"]["user"].format(question=question, answer=reference,
                                                              prediction=answer))]
    replies = {expected[0]["messages"][0]["content"]: answer, expected[1]["messages"][0]["content"]: "score: 2"}
    qa = tmp_path / "qa.jsonl"
    qa.write_text(json.dumps({"video_dir": "v1", "QA_pairs": [{"question": question, "answer": reference,
                                                               "sub_category": "color"}]}) + "\n")
    from capeval.engine.protocols.vidcapbench.release import load_vidcapbench

    with CaptureServer(lambda body, n: replies.get(body["messages"][-1]["content"], "?")) as server:
        verdicts = _judge_through(server, "vidcapbench", load_vidcapbench(qa), _captions(["v1"]), tmp_path,
                                  mode="official", prompts=str(PACK_DIR / "vidcapbench.toml"))
    assert len(server.bodies) == 2
    for body, official in zip(server.bodies, expected):
        _assert_same_fields(body, official)
    assert [v["verdict"] for v in verdicts if v["step"] == "score"] == [3]  # letter A (score 2)


def test_capquiz_sends_the_judge_prompt_and_no_sampling_parameter(tmp_path):
    pack = _pack("capquiz")["judge/mcq"]
    options = ["a red kite", "a blue umbrella", "a green bicycle", "a yellow boat", "a white dog"]
    question = "What does the girl carry?"
    with CaptureServer(lambda body, n: "B") as server:
        verdicts = _judge_through(server, "capquiz",
                                  _items([{"task": "capquiz", "item_id": "q1", "video_id": "v1",
                                           "annotation": question, "options": options, "answer": "a blue umbrella",
                                           "category": "Entity"}], "capquiz"),
                                  _captions(["v1"]), tmp_path, mode="official", prompts=str(PACK_DIR / "capquiz.toml"))
    assert len(server.bodies) == 1
    # the paper shows neither how options nor their letters are written: capeval's reading (docs/fidelity_qa.md)
    block = "\n".join(f"{k}. {o}" for k, o in zip("ABCDEF", [*options, "Cannot be determined"]))
    user = pack["user"].format(option_id_str="A, B, C, D, E, F", caption=CAPTION, question=question, options=block)
    _assert_same_fields(server.bodies[0], _text_body(user))
    assert [v["parse_status"] for v in verdicts] == [int(ParseStatus.OK)]


def test_lvcap_autodq_events_send_one_user_message_and_nothing_else(tmp_path):
    from capeval.engine.protocols.lvcap import dream1k

    pack = _pack("autodq")
    oracle = PACK_DIR / "autodq_oracle.jsonl"
    if not oracle.is_file():
        pytest.skip("autodq oracle not present")
    clip = json.loads(oracle.read_text(encoding="utf-8").splitlines()[0])["videos"][0]
    caption, reference = clip["prediction"], clip["response"]
    extracted = json.loads(clip["extract_replies"][-1])["events"]
    extract = pack["judge/extract_events"]["user"].format(caption=caption.lower().replace('"', "'"))
    recall = pack["judge/entailment"]["user"].format(description=caption.lower(), events=str(clip["events"]))
    precision = pack["judge/entailment"]["user"].format(description=reference.lower(), events=str(extracted))
    replies = {extract: clip["extract_replies"][-1], recall: clip["recall_replies"][-1],
               precision: clip["precision_replies"][-1]}
    items = dream1k.clip_items([(str(clip["vid"]), clip["events"], reference, clip["dataset"],
                                 {**clip["extra_info"], "dataset": clip["dataset"], "idx": clip["idx"]})])
    with CaptureServer(lambda body, n: replies.get(body["messages"][-1]["content"], "?")) as server:
        verdicts = _judge_through(server, "lvcap", items, _captions([str(clip["vid"])], caption), tmp_path,
                                  mode="official", prompts=str(PACK_DIR / "lvcap.toml"),
                                  event_prompts=str(PACK_DIR / "autodq.toml"), event_scoring="autodq")
    assert len(server.bodies) == 3
    assert sorted(b["messages"][-1]["content"] for b in server.bodies) == sorted(replies)
    for body in server.bodies:
        _assert_same_fields(body, _text_body(body["messages"][-1]["content"]))
    assert all(v["parse_status"] in (int(ParseStatus.OK), int(ParseStatus.REPAIRED)) for v in verdicts)


def test_vcinspector_sends_the_frames_the_text_and_max_tokens_1024_only(tmp_path):
    pack = _pack("vcinspector")["judge/score"]
    frames_path = tmp_path / "frames.npy"
    rng = np.random.default_rng(0)
    np.save(frames_path, rng.integers(0, 255, (32, 16, 16, 3), dtype=np.uint8))
    frames = conform(pa.table({"frames_key": ["fk"], "video_id": ["v1"], "frame_spec": ["linspace:32"],
                               "timestamps": [[float(i) for i in range(32)]], "height": [16], "width": [16],
                               "path": [str(frames_path)], "error": [None]}), FRAMES)
    with CaptureServer(lambda body, n: "4\nThe caption is mostly right.") as server:
        verdicts = _judge_through(server, "vcinspector",
                                  _items([{"task": "default", "item_id": "v1", "video_id": "v1"}], "vcinspector"),
                                  _captions(["v1"]), tmp_path, mode="official",
                                  prompts=str(PACK_DIR / "vcinspector.toml"), frames=frames)
    assert len(server.bodies) == 1
    body = server.bodies[0]
    assert sorted(body) == ["max_tokens", "messages", "model"]
    assert body["model"] == MODEL and body["max_tokens"] == 1024
    [message] = body["messages"]
    parts = message["content"]
    assert message["role"] == "user" and len(parts) == 33
    assert all(p["type"] == "image_url" for p in parts[:32])
    assert parts[32] == {"type": "text", "text": pack["user"].format(image_tags="<image>" * 32, caption=CAPTION)}
    assert [v["verdict"] for v in verdicts] == [3]  # code = score - 1


def test_lvcap_paper_events_and_scene_questions_send_one_user_message_and_nothing_else(tmp_path):
    """LVCap-Eval's own official flow (the paper states no sampling): Prompt2 then Prompt5 per clip, and Prompt4 once
    per video for its scene questions -- each a model and one user message, nothing else."""
    from capeval.engine.protocols.lvcap import dream1k

    _pack("lvcap")
    spec = importlib.util.spec_from_file_location(
        "_lvcap_metric_tests", Path(__file__).resolve().parents[1] / "metrics" / "test_metrics_lvcap.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    scene_items, scene_captions = module._scene_inputs()
    event_items = dream1k.clip_items([("e1", ["A dog runs.", "The dog jumps."], "A dog runs and jumps.", "demo",
                                       {"dataset": "demo", "idx": "DREAM/demo_1"})])
    items = pa.concat_tables([scene_items, conform(event_items, ITEMS)])
    captions = pa.concat_tables([scene_captions, _captions(["e1"], "A dog runs on a beach.")])

    def reply(body, n):
        user = body["messages"][-1]["content"]
        if "Model Output events:" in user:
            return '{"recall": 0.5, "precision": 1.0}'
        if "Input text:" in user:
            return '{"1": "a dog runs"}'
        if '"video_id": "v1"' in user:
            return '{"model": "m", "video_id": "v1", "scores": [1, 1], "total_score": 66.67}'
        return '{"model": "m", "video_id": "v2", "scores": [0], "total_score": 0.00}'

    with CaptureServer(reply) as server:
        verdicts = _judge_through(server, "lvcap", items, captions, tmp_path, mode="official",
                                  prompts=str(PACK_DIR / "lvcap.toml"))
    sent = sorted(b["messages"][-1]["content"][:40] for b in server.bodies)
    assert len(server.bodies) == 4, sent  # Prompt4 for v1 and v2, Prompt2 and Prompt5 for e1
    for body in server.bodies:
        _assert_same_fields(body, _text_body(body["messages"][-1]["content"]))
    assert all(v["parse_status"] in (int(ParseStatus.OK), int(ParseStatus.REPAIRED)) for v in verdicts), verdicts
