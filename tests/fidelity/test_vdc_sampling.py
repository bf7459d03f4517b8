"""VDC official mode sends what the official process_vdc_result.py sends (rese1f/aurora@2bf68d5, lines 116-156):
per question an answer call, then a score call, each = [system, user] rendered from the pack
(shared/protocols/vdc.toml: `role_system`, `user.format(**fields)`), with SGLang's defaults made explicit --
temperature 1.0 SENT, max_tokens 256, no seed -- and nothing else; no re-ask. The request bodies are captured at an
OpenAI-compatible loopback server (tests/judging/test_official_request_bodies.py's CaptureServer) and compared field by
field with bodies built here from the pack with `str.format`, not by capeval's renderers.

Inputs are the first vdc oracle case's real QA sets and captions (braces, quotes, CJK, tabs, backslashes, newlines,
an empty caption); the server's answer-step replies keep leading and trailing whitespace, braces and quotes, which the
official score prompt carries raw."""

from __future__ import annotations

import importlib.util
import json
import re
import tomllib
from pathlib import Path

import pyarrow as pa
import pytest

from capeval.adapters.openai_http import OpenAIJudge
from capeval.engine.datasets.registry import load as load_dataset
from capeval.engine.judging.runner import run_judging
from capeval.engine.registry import lookup
from capeval.engine.schemas import CAPTIONS, conform

HERE = Path(__file__).resolve().parent
MODEL = "official-judge"


def _module(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_CONF = _module("_fidelity_conftest_vdc_sampling", HERE / "conftest.py")
CaptureServer = _module("_official_request_bodies_vdc", HERE.parent / "judging" / "test_official_request_bodies.py"
                        ).CaptureServer
CASES = _CONF.oracle_cases("vdc_oracle.jsonl")
PACK = _CONF.PACK_DIR / "vdc.toml"


def _pack() -> dict:
    if not PACK.is_file():
        pytest.fail(f"{PACK} not present (set CAPEVAL_PACK_DIR)")
    return {p["id"]: p for p in tomllib.loads(PACK.read_text(encoding="utf-8"))["prompt"]}


def _official_sampling(prompt: dict) -> dict:
    """The sampling fields the official call takes, read from the pack's `sampling` text (the score step's says
    "as judge/answer"): gen(max_tokens=256) and SGLang's default temperature 1.0; no seed exists in that API."""
    text = prompt["sampling"]
    tokens = re.search(r"max_tokens=(\d+)", text)
    temperature = re.search(r"temperature (\d+(?:\.\d+)?)", text)
    assert tokens and temperature, text
    assert "no seed" in text, text
    return {"max_tokens": int(tokens.group(1)), "temperature": float(temperature.group(1))}


def _answer_reply(n: int) -> str:
    """What the loopback judge answers to the n-th distinct answer prompt: raw text the score prompt must carry as is."""
    return f"  {{answer {n}}}: \"it's {n}\"\n"


def test_official_bodies_are_the_two_pack_messages_with_the_official_sampling(tmp_path):
    case = CASES[0]
    pack = _pack()
    answer_p, score_p = pack["judge/answer"], pack["judge/score"]
    sampling = _official_sampling(answer_p)
    assert sampling == {"max_tokens": 256, "temperature": 1.0}
    assert "as judge/answer" in score_p["sampling"]

    # the case's QA sets in the release layout, its captions (prompt ids naming their kinds)
    release = tmp_path / "release"
    release.mkdir()
    kinds: dict[str, list[str]] = {}
    seen = set()
    for v in case["videos"]:
        if v["in_qa_file"] and (v["kind"], v["video_id"]) not in seen:
            seen.add((v["kind"], v["video_id"]))
            kinds.setdefault(v["kind"], []).append(json.dumps(
                {v["video_id"]: [{"question": q["question"], "answer": q["answer"], "category": ""}
                                 for q in v["qa"]]}, ensure_ascii=False))
    for kind, lines in kinds.items():
        (release / f"{kind}.jsonl").write_text("".join(x + "\n" for x in lines), encoding="utf-8")
    items = load_dataset("vdc", {"path": str(release)}, base_dir=tmp_path, out_dir=tmp_path / "out").items
    videos = [v for v in case["videos"] if v["in_qa_file"]]
    n = len(videos)
    captions = conform(pa.table({"caption_key": [f"c{i}" for i in range(n)], "captioner": ["m"] * n,
                                 "prompt_id": [f"vdc_{v['kind']}" for v in videos], "frame_spec": ["f"] * n,
                                 "video_id": [v["video_id"] for v in videos],
                                 "text": [v["prediction"] for v in videos]}), CAPTIONS)

    # the official bodies: per question one answer call, and one score call carrying that call's raw reply
    answer_bodies, replies = {}, {}
    for v in videos:
        for q in v["qa"]:
            user = answer_p["user"].format(caption=v["prediction"], question=q["question"])
            body = {"model": MODEL, "messages": [{"role": "system", "content": answer_p["role_system"]},
                                                 {"role": "user", "content": user}], **sampling}
            key = json.dumps(body, sort_keys=True)
            answer_bodies[key] = answer_bodies.get(key, 0) + 1
            replies.setdefault(user, _answer_reply(len(replies)))
    score_bodies = {}
    for v in videos:
        for q in v["qa"]:
            prediction = replies[answer_p["user"].format(caption=v["prediction"], question=q["question"])]
            user = score_p["user"].format(question=q["question"], answer=q["answer"], prediction=prediction)
            body = {"model": MODEL, "messages": [{"role": "system", "content": score_p["role_system"]},
                                                 {"role": "user", "content": user}], **sampling}
            key = json.dumps(body, sort_keys=True)
            score_bodies[key] = score_bodies.get(key, 0) + 1
    n_questions = sum(len(v["qa"]) for v in videos)

    def reply(body, _n):
        user = body["messages"][-1]["content"]
        return replies.get(user, "{'pred': 'yes', 'score': 4}")

    protocol = lookup("protocol", "vdc")
    params = {"mode": "official", "prompts": str(PACK)}
    assert protocol.judging_policy(**params).max_reasks == 0  # no re-ask: the official code has none
    with CaptureServer(reply) as server:
        judge = OpenAIJudge(model=MODEL, base_url=f"http://127.0.0.1:{server.port}/v1", api_key="test-key",
                            max_attempts=1)
        try:
            requests = protocol.build_requests(items, captions, judge=judge.name, judge_revision=judge.revision,
                                               **params)
            verdicts = run_judging(requests, judge, cache_dir=tmp_path / "cache", protocol=protocol,
                                   protocol_params=params, progress=False, keep_intermediate=True)
        finally:
            judge.close()

    assert len(server.bodies) == 2 * n_questions  # every question: one answer call, one score call, no re-ask
    for body in server.bodies:
        assert sorted(body) == ["max_tokens", "messages", "model", "temperature"], sorted(body)  # no seed, no top_p
        assert body["temperature"] == 1.0 and body["max_tokens"] == 256
        assert [m["role"] for m in body["messages"]] == ["system", "user"]
    sent: dict[str, int] = {}
    for body in server.bodies:
        key = json.dumps(body, sort_keys=True)
        sent[key] = sent.get(key, 0) + 1
    assert sent == {**answer_bodies, **score_bodies}  # byte for byte, each as often as the official code sends it
    assert all(v["error"] is None for v in verdicts.to_pylist()), [v["error"] for v in verdicts.to_pylist()][:3]
