"""CapQuiz judging through the production path: options in the given order (shuffled only on request, by judge
seed), answer forms that parse, items without a caption counted in N (either mode), the official pack's judge prompt,
and metrics grouped by judge / seed / trial."""

from __future__ import annotations

import json
import os
from pathlib import Path

import polars as pl
import pyarrow as pa
import pytest

from capeval.adapters.replay import ReplayJudge
from capeval.engine.judging.runner import run_judging
from capeval.engine.protocols.capquiz import CapQuizVerdict
from capeval.engine.protocols.capquiz.metrics import compute_metrics
from capeval.engine.registry import lookup
from capeval.engine.schemas import CAPTIONS, ITEMS, NO_VERDICT, ParseStatus, conform

PACK_DIR = Path(os.environ.get("CAPEVAL_PACK_DIR", Path(__file__).resolve().parents[2].parent / "shared" / "protocols"))
OPTIONS = ["a red kite", "a blue umbrella", "a green bicycle", "a yellow boat", "a white dog"]
QUIZ = [
    {"task": "capquiz", "item_id": "v1-q1", "video_id": "v1", "annotation": "What does the girl carry?",
     "options": OPTIONS, "answer": "a blue umbrella", "category": "Entity"},
    {"task": "capquiz", "item_id": "v1-q2", "video_id": "v1", "annotation": "Why does she open it?",
     "options": ["it starts to rain", "to greet a friend", "to dry it", "the sun is hot", "to sell it"],
     "answer": "A", "category": "Causal Reasoning"},
    {"task": "capquiz", "item_id": "v2-q1", "video_id": "v2", "annotation": "Where is the boat?",
     "options": ["on a lake", "in a garage", "on a truck", "at sea", "in a shop"], "answer": "on a lake",
     "category": "Setting"},
]
CAPTION = "A girl walks through a park and opens a blue umbrella when it starts to rain."


def _items(rows=QUIZ):
    return conform(pa.table({k: [r.get(k) for r in rows] for k in ITEMS.names} | {"benchmark": ["capquiz"] * len(rows)}),
                   ITEMS)


def _captions(videos=("v1",)):
    n = len(videos)
    return conform(pa.table({"caption_key": [f"k-{v}" for v in videos], "captioner": ["m"] * n, "prompt_id": ["p"] * n,
                             "frame_spec": ["f"] * n, "video_id": list(videos), "text": [CAPTION] * n}), CAPTIONS)


def _requests(**params):
    p = lookup("protocol", "capquiz")
    return p, p.build_requests(_items(), _captions(), judge="replay", judge_revision="r", **params).to_pylist()


def test_options_keep_the_given_order_and_shuffle_only_on_request_by_judge_seed():
    _, reqs = _requests(seeds=(0, 1))
    first = next(r for r in reqs if r["item_id"] == "v1-q1" and r["trial"] == 0)
    lines = [f"{k}. {o}" for k, o in zip("ABCDE", OPTIONS)] + ["F. Cannot be determined"]
    assert "\n".join(lines) in first["user"]
    assert json.loads(first["context"])["parse"]["correct"] == "B"
    # same order for every seed without shuffle
    assert len({r["user"] for r in reqs if r["item_id"] == "v1-q1"}) == 1
    _, shuffled = _requests(seeds=tuple(range(6)), shuffle="true")
    orders = {tuple(json.loads(r["context"])["parse"]["order"]) for r in shuffled if r["item_id"] == "v1-q1"}
    assert len(orders) > 1  # seeds give different orders
    _, again = _requests(seeds=tuple(range(6)), shuffle=True)
    assert [r["user"] for r in again] == [r["user"] for r in shuffled]  # and the same ones on every run
    for r in shuffled:  # the correct letter follows its option, "Cannot be determined" stays last
        ctx = json.loads(r["context"])["parse"]
        if "missing" in ctx:  # v2 has no caption
            continue
        assert ctx["shown"][-1] == "Cannot be determined"
        letter = ctx["correct"]
        assert f"{letter}. {ctx['shown']['ABCDEF'.index(letter)]}" in r["user"]


@pytest.mark.parametrize("reply,code", [
    ("B", CapQuizVerdict.CORRECT), ("B.", CapQuizVerdict.CORRECT), ("B. a blue umbrella", CapQuizVerdict.CORRECT),
    ("(b) a blue umbrella", CapQuizVerdict.CORRECT), ("a blue umbrella", CapQuizVerdict.CORRECT),
    ("A Blue Umbrella.", CapQuizVerdict.CORRECT), ("Answer: B", CapQuizVerdict.CORRECT),
    ("C", CapQuizVerdict.WRONG), ("a white dog", CapQuizVerdict.WRONG),
    ("F", CapQuizVerdict.CANNOT_DETERMINE), ("Cannot be determined", CapQuizVerdict.CANNOT_DETERMINE),
    ("F. Cannot be determined", CapQuizVerdict.CANNOT_DETERMINE),
])
def test_answer_forms_that_parse(reply, code):
    p, reqs = _requests()
    req = next(r for r in reqs if r["item_id"] == "v1-q1")
    got, status, detail = p.parse(req, reply)
    assert got == code and status in (ParseStatus.OK, ParseStatus.REPAIRED)
    assert json.loads(detail)["letter"] in "ABCDEF"


@pytest.mark.parametrize("reply", ["", None, "G", "B and C", "B. a white dog", "maybe a kite or a dog", "red"])
def test_answer_forms_that_fail(reply):
    p, reqs = _requests()
    req = next(r for r in reqs if r["item_id"] == "v1-q1")
    assert p.parse(req, reply)[:2] == (NO_VERDICT, ParseStatus.FAILED)


def test_items_without_a_caption_count_in_n_in_strict_mode(tmp_path):
    p, reqs = _requests()
    missing = [r for r in reqs if r["item_id"] == "v2-q1"]
    assert len(missing) == 1 and json.loads(missing[0]["context"])["parse"]["missing"]
    replies = [{"item_id": "v1-q1", "step": "answer", "text": "B"}, {"item_id": "v1-q2", "step": "answer", "text": "F"}]
    judge = ReplayJudge(replies)
    requests = p.build_requests(_items(), _captions(), judge=judge.name, judge_revision=judge.revision)
    verdicts = pl.from_arrow(run_judging(requests, judge, cache_dir=tmp_path / "c", protocol=p, progress=False))
    assert verdicts.filter(pl.col("item_id") == "v2-q1")["parse_status"].to_list() == [int(ParseStatus.MISSING)]
    out = compute_metrics(verdicts, items=pl.from_arrow(_items()), n_resamples=0)
    overall = out.filter((pl.col("metric") == "CapR") & (pl.col("family") == "all")).row(0, named=True)
    assert overall["value"] == pytest.approx(100 / 3) and overall["n_no_verdict"] == 1  # TP=1 of N=3
    official = p.build_requests(_items(), _captions(), judge="replay", judge_revision="r", mode="official",
                                prompts=str(PACK_DIR / "capquiz.toml"))
    # the paper's N is every question: official mode keeps the uncaptioned one too (issue 26 item 14)
    [row] = [r for r in official.to_pylist() if r["item_id"] == "v2-q1"]
    assert json.loads(row["context"])["parse"]["missing"]


def test_official_mode_renders_the_papers_judge_prompt():
    pack_path = PACK_DIR / "capquiz.toml"
    if not pack_path.is_file():
        pytest.skip(f"{pack_path} not present")
    import tomllib

    template = next(p["user"] for p in tomllib.loads(pack_path.read_text(encoding="utf-8"))["prompt"]
                    if p["id"] == "judge/mcq")
    _, reqs = _requests(mode="official", prompts=str(pack_path))
    req = next(r for r in reqs if r["item_id"] == "v1-q1")
    options = "\n".join(f"{k}. {o}" for k, o in zip("ABCDEF", OPTIONS + ["Cannot be determined"]))
    assert req["user"] == template.format(caption=CAPTION, question=QUIZ[0]["annotation"], options=options,
                                          option_id_str="A, B, C, D, E, F")
    assert req["system"] is None and req["choices"] is None
    assert json.loads(req["context"])["temperature"] is None
    _, strict = _requests()
    assert {r["request_key"] for r in reqs}.isdisjoint(r["request_key"] for r in strict)
    assert lookup("protocol", "capquiz").judging_policy(mode="official").max_reasks == 0
