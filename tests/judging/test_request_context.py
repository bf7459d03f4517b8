"""RequestContext is the one reader and writer of a request row's `context` column: the text it writes is the text
rows had before it existed (request and cache keys, and stored request tables, depend on it), and what it reads back
is what was written."""

import pytest

from capeval.engine.judging.requests import attempt_sampling, to_judge_request
from capeval.engine.protocols.base import Rendered, RequestContext, make_row

# (rendered, the context text make_row wrote for it before RequestContext existed)
CASES = [
    (Rendered(task="t", step="s", user="u", fields={"caption": "é x", "n": 3}, parse={"correct": "B"}),
     '{"fields": {"caption": "é x", "n": 3}, "parse": {"correct": "B"}, "task": "p/t/s"}'),
    (Rendered(task="t", step="s", user="u", frames_path="/f.npy", images_digest="abc", temperature=None,
              send_seed=False),
     '{"fields": {}, "frames_path": "/f.npy", "images_digest": "abc", "parse": {}, "send_seed": false, '
     '"task": "p/t/s", "temperature": null}'),
    (Rendered(task="t", step="s", user="u", temperature=0.7, parse={"missing": "caption failed: x"}),
     '{"fields": {}, "parse": {"missing": "caption failed: x"}, "task": "p/t/s", "temperature": 0.7}'),
]


def _row(rendered: Rendered) -> dict:
    return make_row(rendered, {}, protocol="p", judge="j", judge_revision="r", seed=1, trial=0)


@pytest.mark.parametrize("rendered,text", CASES)
def test_context_text_is_unchanged_and_round_trips(rendered, text):
    row = _row(rendered)
    assert row["context"] == text
    ctx = RequestContext.decode(text)
    assert ctx.encode() == text
    assert RequestContext.decode(ctx.encode()) == ctx


def test_decoded_fields():
    plain = RequestContext.decode(CASES[0][1])
    assert (plain.task, plain.fields, plain.parse) == ("p/t/s", {"caption": "é x", "n": 3}, {"correct": "B"})
    assert plain.temperature == 0.0 and plain.send_seed and plain.frames_path is None and plain.missing is None
    framed = RequestContext.decode(CASES[1][1])
    assert (framed.frames_path, framed.images_digest, framed.temperature, framed.send_seed) == \
        ("/f.npy", "abc", None, False)
    assert RequestContext.decode(CASES[2][1]).missing == "caption failed: x"
    assert RequestContext.decode(None) == RequestContext() == RequestContext.decode("")


def test_the_judge_request_is_sent_as_the_context_says():
    row = _row(CASES[2][0])
    request = to_judge_request(row)
    assert (request.task, request.temperature, request.seed) == ("p/t/s", 0.7, 1)
    unseeded = _row(Rendered(task="t", step="s", user="u", fields={"n": 3}, temperature=None, send_seed=False))
    request = to_judge_request(unseeded)
    assert (request.temperature, request.seed, request.fields) == (None, None, {"n": "3"})
    assert attempt_sampling(unseeded, 0, RequestContext.decode(unseeded["context"]))[1:] == (None, None)
