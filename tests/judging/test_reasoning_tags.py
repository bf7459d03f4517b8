"""Reasoning output of thinking models (issue 21 item 5): the reasoning between tags (default <think>...</think>) is
stripped from judge replies before the protocol parses them and from captions before they are judged; the raw text
stays in the row and in the judgment cache; reasoning tokens are counted.

End to end through the production path: ReplayJudge (and OpenAIJudge against a loopback server) -> run_judging
(streaming loop, judgment cache) -> CapQuiz parser -> compute_metrics."""

from __future__ import annotations

import json
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import polars as pl
import pyarrow as pa
import pytest

from capeval.adapters.replay import ReplayJudge
from capeval.engine.judging.runner import run_judging
from capeval.engine.protocols.capquiz import CapQuizVerdict
from capeval.engine.protocols.capquiz.metrics import compute_metrics
from capeval.engine.registry import lookup
from capeval.engine.schemas import CAPTIONS, ITEMS, NO_VERDICT, VERDICTS, ParseStatus, conform

PACK_DIR = Path(os.environ.get("CAPEVAL_PACK_DIR", Path(__file__).resolve().parents[2].parent / "shared" / "protocols"))
OPTIONS = ["a red kite", "a blue umbrella", "a green bicycle", "a yellow boat", "a white dog"]
QUIZ = [  # correct letters: B, A, A (options in the given order)
    {"item_id": "v1-q1", "video_id": "v1", "annotation": "What does the girl carry?", "options": OPTIONS,
     "answer": "a blue umbrella", "category": "Entity"},
    {"item_id": "v1-q2", "video_id": "v1", "annotation": "Why does she open it?",
     "options": ["it starts to rain", "to greet a friend", "to dry it", "the sun is hot", "to sell it"],
     "answer": "A", "category": "Causal Reasoning"},
    {"item_id": "v1-q3", "video_id": "v1", "annotation": "Where is she?",
     "options": ["in a park", "in a garage", "on a truck", "at sea", "in a shop"], "answer": "in a park",
     "category": "Setting"},
]
CAPTION = "A girl walks through a park and opens a blue umbrella when it starts to rain."
# What a thinking model writes: a reasoning that weighs a wrong option as its "answer" before the real answer.
MISLEADING = "Let me look again. The kite is red... Answer: A\nNo wait, she carries an umbrella."


def _items():
    rows = [{**r, "task": "capquiz", "benchmark": "capquiz"} for r in QUIZ]
    return conform(pa.table({k: [r.get(k) for r in rows] for k in ITEMS.names}), ITEMS)


def _captions(text=CAPTION, **extra):
    cols = {"caption_key": ["k-v1"], "captioner": ["m"], "prompt_id": ["p"], "frame_spec": ["f"],
            "video_id": ["v1"], "text": [text]}
    return conform(pa.table(cols | {k: [v] for k, v in extra.items()}), CAPTIONS)


def _run(replies, tmp_path, judge=None, max_reasks=None, **params):
    p = lookup("protocol", "capquiz")
    judge = judge or ReplayJudge(replies)
    requests = p.build_requests(_items(), _captions(), judge=judge.name, judge_revision=judge.revision, **params)
    verdicts = run_judging(requests, judge, cache_dir=tmp_path / "cache", protocol=p, progress=False,
                           protocol_params=params, max_reasks=max_reasks)
    return judge, {r["item_id"]: r for r in verdicts.to_pylist()}, verdicts


THINKING_REPLIES = [
    {"item_id": "v1-q1", "step": "answer", "text": f"<think>\n{MISLEADING}\n</think>\n\nB"},
    # the opening tag was in the chat template: the reply starts inside the reasoning
    {"item_id": "v1-q2", "step": "answer", "text": "Rain or a friend? Answer: B. Hmm, it rains.\n</think>\nA"},
    # cut off while thinking: the reasoning names an option, but there is no answer
    {"item_id": "v1-q3", "step": "answer", "text": "<think>She is outdoors. Answer: A"},
]


def test_the_visible_verdict_wins_and_metrics_count_it(tmp_path):
    _, rows, verdicts = _run(THINKING_REPLIES, tmp_path, max_reasks=0)
    assert rows["v1-q1"]["verdict"] == CapQuizVerdict.CORRECT  # "B" after the reasoning, not the reasoning's "A"
    assert rows["v1-q2"]["verdict"] == CapQuizVerdict.CORRECT  # "A" after </think>, not the reasoning's "B"
    assert rows["v1-q3"]["verdict"] == NO_VERDICT and rows["v1-q3"]["parse_status"] == ParseStatus.FAILED
    assert "never closed" in rows["v1-q3"]["error"]  # a clear reason, never the reasoning's "A" as the answer
    for reply in THINKING_REPLIES:  # the raw reply stays in the row, reasoning included
        assert rows[reply["item_id"]]["raw_output"] == reply["text"]
    # no usage from the recording: estimated as whitespace words of the reasoning
    assert rows["v1-q1"]["reasoning_tokens"] == len(MISLEADING.split())
    assert rows["v1-q3"]["reasoning_tokens"] == 5
    out = compute_metrics(pl.from_arrow(verdicts), items=pl.from_arrow(_items()), n_resamples=0)
    overall = {r["metric"]: r for r in out.filter(pl.col("family") == "all").to_dicts()}
    assert overall["CapR"]["value"] == pytest.approx(200 / 3) and overall["CapR"]["n_no_verdict"] == 1
    assert overall["CapP"]["value"] == pytest.approx(100.0)


def test_replies_without_reasoning_are_parsed_and_stored_as_before(tmp_path):
    replies = [{"item_id": "v1-q1", "step": "answer", "text": "B"},
               {"item_id": "v1-q2", "step": "answer", "text": "A. it starts to rain"},
               {"item_id": "v1-q3", "step": "answer", "text": "C"}]
    _, rows, _ = _run(replies, tmp_path)
    assert [rows[r["item_id"]]["raw_output"] for r in replies] == [r["text"] for r in replies]
    assert [rows[r["item_id"]]["verdict"] for r in replies] == [CapQuizVerdict.CORRECT, CapQuizVerdict.CORRECT,
                                                               CapQuizVerdict.WRONG]
    assert all(r["reasoning_tokens"] is None for r in rows.values())


def test_the_cache_keeps_the_raw_reply_so_other_tags_reparse_without_asking(tmp_path):
    replies = [{**r, "text": r["text"].replace("<think>", "<reasoning>").replace("</think>", "</reasoning>")}
               for r in THINKING_REPLIES[:1]] + [{"item_id": "v1-q2", "step": "answer", "text": "A"},
                                                 {"item_id": "v1-q3", "step": "answer", "text": "A"}]
    judge, rows, _ = _run(replies, tmp_path, max_reasks=0)
    assert rows["v1-q1"]["verdict"] == NO_VERDICT  # <reasoning> is not the default tag: the whole reply is read
    asked = judge.calls
    judge.reasoning_tags = ["<reasoning>", "</reasoning>"]  # the judge's setting (OpenAI judges: a config param)
    judge, rows, _ = _run(replies, tmp_path, judge=judge, max_reasks=0)
    assert judge.calls == asked  # nothing asked again: the cached raw reply is parsed under the new tags
    assert rows["v1-q1"]["verdict"] == CapQuizVerdict.CORRECT
    assert rows["v1-q1"]["raw_output"] == replies[0]["text"]
    judge.reasoning_tags = "none"  # no stripping at all: the parser sees the whole reply
    _, rows, _ = _run(replies, tmp_path, judge=judge, max_reasks=0)
    assert rows["v1-q1"]["verdict"] == NO_VERDICT and rows["v1-q1"]["reasoning_tokens"] is None


def test_official_mode_parses_the_reply_without_its_reasoning(tmp_path):
    pack = PACK_DIR / "capquiz.toml"
    if not pack.is_file():
        pytest.skip(f"{pack} not present")
    _, rows, _ = _run(THINKING_REPLIES, tmp_path, mode="official", prompts=str(pack))
    assert rows["v1-q1"]["verdict"] == CapQuizVerdict.CORRECT
    assert rows["v1-q2"]["verdict"] == CapQuizVerdict.CORRECT
    assert rows["v1-q3"]["verdict"] == NO_VERDICT and "never closed" in rows["v1-q3"]["error"]


def test_a_caption_with_reasoning_is_judged_without_it_and_keeps_its_raw_text(tmp_path):
    from capeval.adapters.base import CaptionResponse
    from capeval.engine.reasoning import caption_row_fields, strip_caption

    raw = f"<think>\nThe first frames show a red kite, maybe. {MISLEADING}\n</think>\n\n{CAPTION}"
    reply = strip_caption(CaptionResponse("k-v1", raw, n_tokens=100))
    assert reply.text == CAPTION and reply.raw_text == raw and reply.error is None
    chars = len(raw.split("</think>")[0].replace("<think>", "").strip())
    assert reply.reasoning_tokens == round(100 * chars / (chars + len(CAPTION)))  # the reply's tokens, by characters
    assert reply.n_tokens == 100 - reply.reasoning_tokens  # n_tokens counts the caption alone (VidCapBench)
    captions = _captions(reply.text, **caption_row_fields(reply))
    assert captions.column("raw_text").to_pylist() == [raw] and captions.column("reasoning_tokens")[0].as_py() > 0
    p = lookup("protocol", "capquiz")
    judge = ReplayJudge([{"item_id": q["item_id"], "step": "answer", "text": "B"} for q in QUIZ])
    requests = p.build_requests(_items(), captions, judge=judge.name, judge_revision=judge.revision)
    users = requests.column("user").to_pylist()
    assert users and all(CAPTION in u and "kite, maybe" not in u and "<think>" not in u for u in users)
    verdicts = run_judging(requests, judge, cache_dir=tmp_path / "cache", protocol=p, progress=False)
    assert verdicts.num_rows == 3
    # a reply that is all reasoning is a failed caption, never an empty caption judged
    cut = strip_caption(CaptionResponse("k", "<think>The video shows", n_tokens=40))
    assert cut.text is None and "never closed" in cut.error and cut.raw_text == "<think>The video shows"
    # the server's own count wins, and a caption without reasoning is left as it is
    counted = strip_caption(CaptionResponse("k", "x</think>A caption.", n_tokens=50, reasoning_tokens=30))
    assert (counted.text, counted.reasoning_tokens, counted.n_tokens) == ("A caption.", 30, 20)
    plain = CaptionResponse("k", "A caption.", n_tokens=5)
    assert strip_caption(plain) is plain


def test_caption_and_verdict_tables_written_before_the_new_columns_still_read_back():
    old_captions = pa.table({"caption_key": ["k"], "captioner": ["m"], "prompt_id": ["p"], "frame_spec": ["f"],
                             "video_id": ["v"], "text": ["t"]})
    assert conform(old_captions, CAPTIONS).column("raw_text").to_pylist() == [None]
    old_verdicts = conform(pa.table({"request_key": ["r"], "protocol": ["capquiz"], "task": ["t"], "item_id": ["i"],
                                     "video_id": ["v"], "judge": ["j"], "verdict": pa.array([1], pa.int8()),
                                     "parse_status": pa.array([0], pa.int8())}), VERDICTS)
    assert old_verdicts.column("reasoning_tokens").to_pylist() == [None]


@pytest.mark.parametrize("text, visible, reasoning", [
    ("B", "B", None),
    ("<think>a</think>\n\nB", "B", "a"),
    ("a\n</think>\nB", "B", "a"),  # the opening tag was in the template
    ("<think>a", "", "a"),  # unclosed: the rest is reasoning
    ("A <think>x</think> B <think>y</think>", "A  B", "x\ny"),
    ("<think></think>B", "B", ""),
])
def test_split_reasoning_forms(text, visible, reasoning):
    from capeval.engine.reasoning import split_reasoning

    assert split_reasoning(text) == (visible, reasoning)
    assert split_reasoning(text, None) == (text, None)  # "none": nothing stripped


@pytest.mark.parametrize("value, tags", [(None, ("<think>", "</think>")), ("none", None), ([], None),
                                         ('["<r>", "</r>"]', ("<r>", "</r>")), (["<r>", "</r>"], ("<r>", "</r>"))])
def test_reasoning_tags_values(value, tags):
    from capeval.engine.reasoning import parse_tags

    assert parse_tags(value) == tags


def test_a_bad_reasoning_tags_value_names_the_field():
    from capeval.adapters.openai_http import HTTPConfig, HTTPConfigError, OpenAICaptioner, OpenAIJudge
    from capeval.engine.sweep.validation import param_value_problems

    for bad in (["<think>"], "think", ["<t>", "<t>"], [1, 2]):
        with pytest.raises(HTTPConfigError) as err:
            HTTPConfig(model="m", base_url="http://127.0.0.1:9/v1", reasoning_tags=bad)
        assert err.value.field == "reasoning_tags"
        for backend in (OpenAIJudge, OpenAICaptioner):  # a sweep's --check reports it with the field
            assert [f for f, _ in param_value_problems(backend, {"reasoning_tags": bad})] == ["reasoning_tags"]
    assert param_value_problems(OpenAIJudge, {"reasoning_tags": ["<reasoning>", "</reasoning>"]}) == []


class _ThinkingServer(BaseHTTPRequestHandler):
    """An OpenAI-compatible server with a reasoning parser: the reasoning comes apart, in `reasoning_content`, and
    usage counts its tokens (completion_tokens_details.reasoning_tokens)."""

    calls = 0

    def do_POST(self):  # noqa: N802 - http.server's name
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).calls += 1
        question = body["messages"][-1]["content"]
        answer = "B" if "girl carry" in question else "A"
        payload = json.dumps({"choices": [{"message": {"content": answer, "reasoning_content": MISLEADING},
                                           "finish_reason": "stop"}],
                              "usage": {"prompt_tokens": 50, "completion_tokens": 40,
                                        "completion_tokens_details": {"reasoning_tokens": 37}}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args):
        pass


def test_openai_judge_keeps_separate_reasoning_and_the_servers_token_count(tmp_path):
    from capeval.adapters.openai_http import OpenAIJudge

    server = ThreadingHTTPServer(("127.0.0.1", 0), _ThinkingServer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        judge = OpenAIJudge(model="m", base_url=f"http://127.0.0.1:{server.server_port}/v1", api_key="EMPTY",
                            structured="none", max_attempts=1)
        for run in range(2):  # the second run answers from the judgment cache
            _, rows, _ = _run([], tmp_path, judge=judge)
            assert _ThinkingServer.calls == 3, run
            assert rows["v1-q1"]["verdict"] == CapQuizVerdict.CORRECT and rows["v1-q2"]["verdict"] == 1
            # the raw reply holds the reasoning the server returned apart, between the default tags
            assert rows["v1-q1"]["raw_output"] == f"<think>\n{MISLEADING}\n</think>\n\nB"
            assert rows["v1-q1"]["reasoning_tokens"] == 37, run  # the server's count, kept by the cache
        judge.close()
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("message, usage, text, counted", [
    ({"content": "B", "reasoning_content": "hmm"}, {"completion_tokens_details": {"reasoning_tokens": 7}},
     "<think>\nhmm\n</think>\n\nB", 7),
    ({"content": "B", "reasoning": "hmm"}, {}, "<think>\nhmm\n</think>\n\nB", None),  # newer vLLM's field name
    ({"content": None, "reasoning_content": "hmm"}, {}, "<think>\nhmm", None),  # cut off while thinking
    ({"content": "B"}, {"completion_tokens_details": {"reasoning_tokens": "7"}}, "B", None),
    ({"content": "B"}, {"completion_tokens_details": {"reasoning_tokens": -3}}, "B", None),
    ({"content": "B"}, {"completion_tokens_details": None}, "B", None),
])
def test_a_completion_body_keeps_the_reasoning_in_the_raw_reply_and_reads_its_token_count(message, usage, text,
                                                                                          counted):
    from capeval.adapters.http_chat import Prices, parse_completion

    body = json.dumps({"choices": [{"message": message, "finish_reason": "stop"}], "usage": usage}).encode()
    result = parse_completion(body, None, Prices())
    assert (result.text, result.reasoning_tokens) == (text, counted)


def test_a_judgment_cache_made_before_reasoning_tokens_opens_and_keeps_its_answers(tmp_path):
    import sqlite3

    from capeval.engine.store.judgment_cache import CachedResponse, JudgmentCache

    db = sqlite3.connect(tmp_path / JudgmentCache.FILENAME)
    db.execute("CREATE TABLE judgments (request_key TEXT PRIMARY KEY, judge TEXT NOT NULL, text TEXT NOT NULL, "
               "prompt_tokens INTEGER NOT NULL DEFAULT 0, cached_prompt_tokens INTEGER NOT NULL DEFAULT 0, "
               "completion_tokens INTEGER NOT NULL DEFAULT 0, latency_s REAL NOT NULL DEFAULT 0, "
               "cost_usd REAL NOT NULL DEFAULT 0, created REAL NOT NULL) WITHOUT ROWID")
    db.execute("INSERT INTO judgments VALUES ('old', 'j', '<think>x</think>B', 1, 0, 2, 0.1, 0, 0)")
    db.commit()
    db.close()
    with JudgmentCache(tmp_path) as cache:
        cache.put_many([CachedResponse("new", "j", "B", reasoning_tokens=12)])
        found = cache.get_many(["old", "new"])
    assert (found["old"].text, found["old"].reasoning_tokens) == ("<think>x</think>B", None)
    assert found["new"].reasoning_tokens == 12


class _ThinkingCaptioner(BaseHTTPRequestHandler):
    """An OpenAI-compatible captioner that thinks aloud in its content; records the text of every prompt."""

    prompts: list = []

    def do_POST(self):  # noqa: N802 - http.server's name
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        content = body["messages"][-1]["content"]
        type(self).prompts.append(next(p["text"] for p in content if p["type"] == "text"))
        n = len(type(self).prompts)
        payload = json.dumps({"choices": [{"message": {"content": f"<think>\nSecret plan {n}: a red kite?\n</think>"
                                                                   f"\n\nA girl opens an umbrella ({n})."},
                                           "finish_reason": "stop"}],
                              "usage": {"prompt_tokens": 80, "completion_tokens": 30,
                                        "completion_tokens_details": {"reasoning_tokens": 20}}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args):
        pass


def test_the_caption_stage_strips_reasoning_from_captions_and_segment_contexts(tmp_path):
    import numpy as np

    from capeval.engine.stages.caption_worker import CaptionTask, CaptionWorker

    frames = tmp_path / "frames.npy"
    np.save(frames, np.full((4, 16, 16, 3), 128, np.uint8))
    server = ThreadingHTTPServer(("127.0.0.1", 0), _ThinkingCaptioner)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    worker = CaptionWorker("openai", {"model": "m", "base_url": f"http://127.0.0.1:{server.server_port}/v1",
                                      "api_key": "EMPTY", "max_attempts": 1})
    try:
        task = CaptionTask("k1", "v1", str(frames), (0.0, 1.0, 2.0, 3.0), "uniform:4", "p", "Describe the video.")
        segmental = CaptionTask("k2", "v2", str(frames), (0.0, 1.0, 2.0, 3.0), "uniform:4", "p", "Describe.",
                                segments=2)
        rows = {r["caption_key"]: r for r in worker.caption([task, segmental])}
    finally:
        worker.close()
        server.shutdown()
        server.server_close()
    plain = rows["k1"]
    assert plain["error"] is None and plain["text"] == "A girl opens an umbrella (1)."
    assert plain["raw_text"].startswith("<think>\nSecret plan 1") and plain["raw_text"].endswith(plain["text"])
    assert (plain["reasoning_tokens"], plain["n_tokens"]) == (20, 10)  # the server's count; the caption's own tokens
    seg = rows["k2"]
    assert seg["text"] == "Segment 1: A girl opens an umbrella (2).\nSegment 2: A girl opens an umbrella (3)."
    assert "Secret plan" in seg["raw_text"] and seg["reasoning_tokens"] == 40 and seg["n_tokens"] == 20
    # the second segment was asked with the first segment's caption as context, never its reasoning
    assert "umbrella (2)" in _ThinkingCaptioner.prompts[-1] and "Secret plan" not in _ThinkingCaptioner.prompts[-1]
    assert conform(pa.Table.from_pylist(list(rows.values()), schema=CAPTIONS), CAPTIONS).column(
        "reasoning_tokens").to_pylist() == [20, 40]
