"""The `openai-batch` judge against a fake Batch API on loopback (fake_batch_server.py): batch lines carry the
streaming judge's bodies byte for byte; rounds split at the file limits; batches that finish out of order, partly
fail, expire or are cancelled; a run that is stopped (`wait = false`, a kill -9 before a batch's id was recorded, a
create that never succeeded) is finished by the next run without one request sent twice."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from _batch_data import requests_for
from _feeds import FixedFeed
from capeval.adapters.base import JudgeRequest
from capeval.adapters.batch_state import BatchesPending
from capeval.adapters.openai_batch import OpenAIBatchJudge
from capeval.adapters.openai_http import OpenAIJudge
from capeval.benchmarks.loopback_server import answer_for
from capeval.engine import exitcodes
from capeval.engine.judging.runner import run_judging

REPO = Path(__file__).resolve().parents[2]


def _judge(server, state_dir=None, **kw) -> OpenAIBatchJudge:
    params = dict(model="loopback", base_url=server.base_url, api_key="test-key", structured="vllm", poll_s=0.01,
                  poll_max_s=0.05, max_attempts=1)
    if state_dir is not None:
        params["state_dir"] = str(state_dir)
    return OpenAIBatchJudge(**{**params, **kw})


def _requests(n: int, *, tag: str = "q") -> list[JudgeRequest]:
    return [JudgeRequest(key=f"{tag}{i}", system="Answer with one letter.", user=f"{tag} question {i}?",
                         choices=("A", "B", "C", "D"), seed=i) for i in range(n)]


def _expected(judge: OpenAIBatchJudge, r: JudgeRequest) -> str:
    return answer_for(json.loads(judge.body(r)[0]))


def test_batch_lines_are_the_streaming_judges_bodies(batch_server, tmp_path):
    reqs = [JudgeRequest(key="choice", system="S", user="pick one", choices=("yes", "no")),
            JudgeRequest(key="schema", user="json please", json_schema=json.dumps(
                {"type": "object", "properties": {"score": {"type": "integer"}}, "required": ["score"]})),
            JudgeRequest(key="free", user="no temperature: the server's default", temperature=None, max_tokens=9),
            JudgeRequest(key="image", user="what is shown?", images=(b"\xff\xd8jpeg-bytes\xff\xd9",))]
    for structured in ("vllm", "openai"):
        stream = OpenAIJudge(model="loopback", base_url=batch_server.base_url, api_key="k", structured=structured)
        try:
            bodies = {r.key: stream.body(r)[0] for r in reqs}
        finally:
            stream.close()
        batch_server.world.files.clear()
        with _judge(batch_server, tmp_path / structured, structured=structured) as judge:
            judge.judge(reqs)
        uploaded = [data for meta, data in batch_server.world.files.values() if meta["purpose"] == "batch"]
        assert len(uploaded) == 1
        lines = uploaded[0].splitlines()
        assert len(lines) == len(reqs)
        for line, r in zip(lines, reqs):
            assert line == (b'{"custom_id":' + json.dumps(r.key).encode()
                            + b',"method":"POST","url":"/v1/chat/completions","body":' + bodies[r.key] + b"}")


def test_out_of_order_batches_answer_every_request_once(batch_server, tmp_path):
    batch_server.behaviour.order = "reverse"  # a batch completes only after every later one did
    reqs = _requests(10)
    with _judge(batch_server, tmp_path, max_file_requests=3) as judge:
        got = list(judge.stream(FixedFeed(reqs)))
        expected = {r.key: _expected(judge, r) for r in reqs}
    stats = batch_server.stats()
    assert [len(b["keys"]) for b in stats["batches"]] == [3, 3, 3, 1]
    assert stats["seen"] == {r.key: 1 for r in reqs}
    assert {g.key: g.text for g in got} == expected and all(g.error is None for g in got)
    # answers came back newest batch first
    first_batch_keys = stats["batches"][0]["keys"]
    assert [g.key for g in got[-3:]] == first_batch_keys
    assert [g.key for g in got[:1]] == stats["batches"][-1]["keys"]


def test_rounds_split_at_the_byte_limit_and_a_request_too_big_is_not_sent(batch_server, tmp_path):
    reqs = _requests(6) + [JudgeRequest(key="huge", user="x" * 5000, choices=("A", "B"))]
    with _judge(batch_server, tmp_path, max_file_bytes=700) as judge:
        got = {g.key: g for g in judge.judge(reqs)}
    uploaded = [data for meta, data in batch_server.world.files.values() if meta["purpose"] == "batch"]
    assert len(uploaded) > 1 and all(len(data) <= 700 for data in uploaded)
    assert got["huge"].text is None and "does not fit a batch file" in got["huge"].error
    assert "huge" not in batch_server.stats()["seen"]
    assert all(got[r.key].text in ("A", "B", "C", "D") for r in reqs[:6])


def _run(requests, judge, cache, protocol):
    return run_judging(requests, judge, cache_dir=cache, protocol=protocol, progress=False, return_summary=True)


@pytest.mark.parametrize("protocol", ["capquiz", "vidcapbench"])
def test_verdicts_equal_the_streaming_judges(protocol, batch_server, tmp_path):
    """The same requests through the streaming judge (loopback server) and through batches (fake Batch API, which
    answers every body as the loopback server does): equal verdict tables; VidCapBench's second step and the
    re-asks of malformed answers went out as later rounds."""
    from capeval.benchmarks.loopback_server import LoopbackServer

    requests = requests_for(tmp_path / "data", protocol, "loopback", "loopback")
    with LoopbackServer() as srv:
        stream = OpenAIJudge(model="loopback", base_url=srv.base_url, api_key="k", structured="vllm")
        v_stream, s_stream = _run(requests, stream, tmp_path / "stream-cache", protocol)
        stream.close()
    with _judge(batch_server) as judge:
        v_batch, s_batch = _run(requests, judge, tmp_path / "batch-cache", protocol)
    assert (tmp_path / "batch-cache" / "batches" / "batches.sqlite").is_file()  # the state beside the cache
    assert v_batch.drop_columns(["latency_s"]).equals(v_stream.drop_columns(["latency_s"]))
    assert s_batch.sent == s_stream.sent >= requests.num_rows
    seen = batch_server.stats()["seen"]
    assert set(seen.values()) == {1} and len(seen) == s_batch.sent
    if protocol == "vidcapbench":  # answers (and re-asks of malformed ones) first, scores in a later round
        assert len(batch_server.stats()["batches"]) >= 2


def test_partial_failure_is_finished_by_a_rerun_that_sends_only_the_failed(batch_server, tmp_path):
    batch_server.behaviour.fail_once = ("question 1?", "question 4?")
    reqs = _requests(6)
    with _judge(batch_server, tmp_path / "state") as judge:
        first = {g.key: g for g in judge.judge(reqs)}
    failed = {k for k, g in first.items() if g.text is None}
    assert failed == {"q1", "q4"} and all("internal error (injected)" in first[k].error for k in failed)
    with _judge(batch_server, tmp_path / "state") as judge:  # a new process: downloaded answers come from the state
        second = {g.key: g for g in judge.judge(reqs)}
        expected = {r.key: _expected(judge, r) for r in reqs}
    assert {k: g.text for k, g in second.items()} == expected
    batches = batch_server.stats()["batches"]
    assert len(batches) == 2 and sorted(batches[1]["keys"]) == ["q1", "q4"]


def test_expired_batch_is_finished_by_a_rerun_that_sends_only_its_unanswered(batch_server, tmp_path):
    batch_server.behaviour.expire = (1,)
    from capeval.engine.registry import lookup

    requests = requests_for(tmp_path / "data", "capquiz", "loopback", "loopback")
    with _judge(batch_server) as judge:
        v1, s1 = _run(requests, judge, tmp_path / "cache", lookup("protocol", "capquiz"))
    first = batch_server.stats()["batches"][0]
    assert first["status"] == "expired"
    unanswered = set(first["keys"][len(first["keys"]) // 2:])
    assert set(v1.filter(_is_error(v1)).column("request_key").to_pylist()) == unanswered
    assert all("batch_expired" in e for e in v1.filter(_is_error(v1)).column("error").to_pylist())
    with _judge(batch_server) as judge:
        v2, s2 = _run(requests, judge, tmp_path / "cache", "capquiz")
    after = batch_server.stats()["batches"]
    assert set(after[-1]["keys"]) >= unanswered and not set(after[-1]["keys"]) & set(first["keys"][:len(first["keys"]) // 2])
    assert set(batch_server.stats()["seen"].values()) == {1} or _reasks_only(batch_server, unanswered)
    assert v2.filter(_is_error(v2)).num_rows == 0


def _is_error(table):
    import pyarrow.compute as pc

    return pc.invert(pc.is_null(table.column("error")))


def _reasks_only(server, unanswered) -> bool:
    """Keys sent twice are exactly the unanswered ones (the rerun asks them again)."""
    return {k for k, n in server.stats()["seen"].items() if n > 1} <= unanswered


def test_cancelled_batch_is_finished_by_a_rerun(batch_server, tmp_path):
    batch_server.behaviour.order = "hold"
    reqs = _requests(4)
    with pytest.raises(BatchesPending):
        with _judge(batch_server, tmp_path, wait=False) as judge:
            judge.judge(reqs)
    from openai import OpenAI

    bid = batch_server.stats()["batches"][0]["id"]
    OpenAI(api_key="k", base_url=batch_server.base_url).batches.cancel(bid)  # the user cancels it in the dashboard
    with _judge(batch_server, tmp_path) as judge:
        first = {g.key: g for g in judge.judge(reqs)}
    unanswered = {k for k, g in first.items() if g.text is None}
    assert unanswered == {"q2", "q3"} and all("cancelled" in first[k].error for k in unanswered)
    batch_server.behaviour.order = "fifo"
    with _judge(batch_server, tmp_path) as judge:
        assert all(g.text for g in judge.judge(reqs))
    assert sorted(batch_server.stats()["batches"][-1]["keys"]) == ["q2", "q3"]


def test_no_wait_submits_and_a_later_run_collects_without_resending(batch_server, tmp_path):
    batch_server.behaviour.order = "hold"
    reqs = _requests(5)
    with _judge(batch_server, tmp_path, wait=False) as judge:
        with pytest.raises(BatchesPending) as err:
            judge.judge(reqs)
    assert err.value.exit_code == exitcodes.PENDING == 75 and "run the same command again" in str(err.value)
    batch_server.behaviour.order = "fifo"
    with _judge(batch_server, tmp_path) as judge:
        got = judge.judge(reqs)
    assert all(g.text for g in got)
    stats = batch_server.stats()
    assert len(stats["batches"]) == 1 and stats["uploads"] == 1 and set(stats["seen"].values()) == {1}


def test_a_file_uploaded_by_a_failed_create_is_reused(batch_server, tmp_path, monkeypatch):
    reqs = _requests(3)
    with _judge(batch_server, tmp_path) as judge:
        monkeypatch.setattr(batch_server, "_create", _refuse)
        got = judge.judge(reqs)
        assert all(g.text is None and "batch not submitted" in g.error for g in got)
        monkeypatch.undo()
    assert batch_server.stats()["uploads"] == 1 and not batch_server.stats()["batches"]
    with _judge(batch_server, tmp_path) as judge:
        assert all(g.text for g in judge.judge(reqs))
    assert batch_server.stats()["uploads"] == 1 and len(batch_server.stats()["batches"]) == 1


def _refuse(body):
    raise KeyError("no such file")  # the fake server answers 500: the create never succeeds


_KILLED_CLIENT = textwrap.dedent("""
    import sys
    sys.path[:0] = [{repo!r}, {tests!r}, {shared!r}]
    from test_batch_judge import _judge, _requests
    class Server: base_url = {url!r}
    _judge(Server, {state!r}, poll_s=5.0).judge(_requests(4))
""")


@pytest.mark.parametrize("when", ["before the create answered", "after the id was recorded"])
def test_kill_9_of_the_client_sends_nothing_twice(batch_server, tmp_path, when):
    """The client is killed while its batch is being created (the server registered it, the client has not heard
    back) or while it polls; the rerun adopts the provider's batch (found by its input file) or polls the recorded
    one, and every request is put in a batch exactly once."""
    batch_server.behaviour.order = "hold"
    batch_server.behaviour.create_delay_s = 30.0 if when.startswith("before") else 0.0
    state = tmp_path / "state"
    code = _KILLED_CLIENT.format(repo=str(REPO), tests=str(Path(__file__).parent),
                                 shared=str(Path(__file__).parents[1]), url=batch_server.base_url, state=str(state))
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=REPO, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while not batch_server.stats()["batches"]:
            assert proc.poll() is None and time.monotonic() < deadline, "the client made no batch"
            time.sleep(0.05)
        if when.startswith("after"):
            time.sleep(1.0)  # recorded, now polling every 5 s
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    batch_server.behaviour.order, batch_server.behaviour.create_delay_s = "fifo", 0.0
    with _judge(batch_server, state) as judge:
        got = judge.judge(_requests(4))
        expected = [_expected(judge, r) for r in _requests(4)]
    assert [g.text for g in got] == expected
    stats = batch_server.stats()
    assert len(stats["batches"]) == 1 and stats["uploads"] == 1 and stats["seen"] == {f"q{i}": 1 for i in range(4)}


# -- issue 26 item 2: a rejected answer leaves the state; duplicates fail loudly; an unknown status is given up ------
def test_a_200_body_without_choices_is_not_kept_and_a_rerun_sends_it_again(batch_server, tmp_path):
    batch_server.behaviour.broken_once = {"question 1?": "empty"}  # `choices: []` the first time
    reqs = _requests(4)
    with _judge(batch_server, tmp_path / "state") as judge:
        first = {g.key: g for g in judge.judge(reqs)}
    assert first["q1"].text is None and "without choices" in first["q1"].error
    assert all(first[k].text for k in ("q0", "q2", "q3"))
    with _judge(batch_server, tmp_path / "state") as judge:
        second = {g.key: g for g in judge.judge(reqs)}
        expected = {r.key: _expected(judge, r) for r in reqs}
    assert {k: g.text for k, g in second.items()} == expected
    assert batch_server.stats()["seen"] == {"q0": 1, "q1": 2, "q2": 1, "q3": 1}  # only the rejected one, again


def test_a_reply_over_the_size_cap_leaves_the_state_and_a_rerun_sends_it_again(batch_server, tmp_path):
    batch_server.behaviour.broken_once = {"What colour are the balls?": "oversize"}
    batch_server.behaviour.oversize_chars = 5000
    requests = requests_for(tmp_path / "data", "capquiz", "loopback", "loopback")
    runs = []
    for _ in range(2):
        with _judge(batch_server) as judge:
            judge.max_reply_chars = 1000  # the judge loop's reply-size cap for this judge
            runs.append(_run(requests, judge, tmp_path / "cache", "capquiz")[0])
    errors = runs[0].filter(_is_error(runs[0])).column("error").to_pylist()
    assert len(errors) == 1 and "reply too large" in errors[0]
    assert runs[1].filter(_is_error(runs[1])).num_rows == 0  # asked again, answered, not served from the state
    assert sorted(batch_server.stats()["seen"].values())[-1] == 2 and list(batch_server.stats()["seen"].values()).count(2) == 1


def test_a_custom_id_answered_twice_fails_loudly_and_a_rerun_sends_it_again(batch_server, tmp_path, caplog):
    batch_server.behaviour.broken_once = {"question 2?": "duplicate"}  # two output lines, different answers
    reqs = _requests(4)
    with caplog.at_level("WARNING", logger="capeval.adapters.batch_rounds"):
        with _judge(batch_server, tmp_path / "state") as judge:
            first = {g.key: g for g in judge.judge(reqs)}
    assert first["q2"].text is None and "answered by 2 lines" in first["q2"].error
    assert any("more than one line" in r.getMessage() for r in caplog.records)
    with _judge(batch_server, tmp_path / "state") as judge:
        second = {g.key: g for g in judge.judge(reqs)}
        expected = {r.key: _expected(judge, r) for r in reqs}
    assert {k: g.text for k, g in second.items()} == expected
    assert batch_server.stats()["seen"]["q2"] == 2


def test_a_batch_with_an_unknown_status_is_given_up_with_a_reason(batch_server, tmp_path):
    import threading

    batch_server.behaviour.status = "paused_for_review"  # no such Batch API status
    reqs = _requests(3)
    got: dict = {}

    def first_run():
        with _judge(batch_server, tmp_path / "state", max_unknown_polls=4) as judge:
            got.update({g.key: g for g in judge.judge(reqs)})

    runner = threading.Thread(target=first_run, daemon=True)
    runner.start()
    runner.join(timeout=60)
    assert not runner.is_alive(), "a batch with an unknown status was polled for a minute"
    assert all(g.text is None and "'paused_for_review', unknown to capeval, at 4 polls" in g.error
               for g in got.values()), got
    assert batch_server.stats()["batches"][0]["status"] == "cancelled"  # given up: asked to stop, not left running
    batch_server.behaviour.status = None
    with _judge(batch_server, tmp_path / "state") as judge:
        assert all(g.text for g in judge.judge(reqs))
    assert batch_server.stats()["seen"] == {f"q{i}": 2 for i in range(3)}
