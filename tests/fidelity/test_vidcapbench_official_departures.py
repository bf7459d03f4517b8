"""VidCapBench official mode where the adversarial trials found it departing from the official eval.py (issue 19
item 10), through the production path of test_vidcapbench_oracle (QA file -> build_requests -> replay judge ->
run_judging -> compute_metrics). Each case is an oracle case (the first of vidcapbench_oracle.jsonl, all pairs
scored) changed in one way whose official outcome follows from the rules (shared/protocols/README.md, eval.py
lines cited there):

* a pair whose judge reply has no score digit gets correctness None and is skipped BEFORE the sub_category test
  (eval.py:168): its sub_category is never looked at, so an unknown one changes nothing;
* sub_categories are matched exactly (`in` a list of lower-case names, eval.py:170-179): "Color" or
  "object_motion" raise ValueError('Category Wrong');
* an answer-step reply with no content is stored as `pred` None and judged as "Predicted Answer: None" (eval.py:83,
  117); only a judge-step reply with no content stops the script (KeyError 'correctness');
* the script stops at the FIRST such pair in its order (caption lines, then QA lines, then pairs)."""

from __future__ import annotations

import copy
import importlib.util
from pathlib import Path

import polars as pl
import pytest


def _oracle_module():
    spec = importlib.util.spec_from_file_location("_vidcapbench_oracle_helpers",
                                                  Path(__file__).with_name("test_vidcapbench_oracle.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


ORACLE = _oracle_module()
#: The base: an oracle case the official script scored (status ok) with every pair counted.
BASE = next((c for c in ORACLE.CASES if c["official"]["status"] == "ok"
             and all(q["official_correctness"] is not None for q in c["qa"])), None)
pytestmark = pytest.mark.skipif(BASE is None, reason="needs an oracle case with every pair scored")
NO_DIGIT = "I cannot judge this."


def _official(case, tmp_path):
    params = {"mode": "official", "prompts": str(ORACLE.PACK_DIR / "vidcapbench.toml")}
    return ORACLE._run(case, tmp_path, **params)


def _figures_equal_base(metrics):
    ORACLE._check(BASE["official"], metrics, None, "official")


def _null_reasons(metrics) -> str:
    assert metrics["value"].is_null().all(), metrics.filter(pl.col("value").is_not_null())
    return " | ".join(metrics["reason"].unique().to_list())


def test_unscored_pair_with_unknown_sub_category_is_skipped_like_any_unscored_pair(tmp_path):
    case = copy.deepcopy(BASE)
    extra = {**case["qa"][0], "question_id": "extra", "sub_category": "not a sub_category", "judge_reply": NO_DIGIT,
             "official_correctness": None}
    case["qa"].append(extra)
    _, verdicts, metrics = _official(case, tmp_path)
    _figures_equal_base(metrics)  # the official script prints the base figures: the pair is never counted
    assert metrics["reason"].is_null().all()
    assert ORACLE._letters(case, verdicts)[-1] is None


@pytest.mark.parametrize("sub_category", ["Color", "object_motion", " color", "aesthetics"])
def test_sub_categories_are_matched_exactly(sub_category, tmp_path):
    case = copy.deepcopy(BASE)
    case["qa"][0]["sub_category"] = sub_category  # a scored pair
    _, _, metrics = _official(case, tmp_path)
    reasons = _null_reasons(metrics)
    assert "Category Wrong" in reasons and repr(sub_category) in reasons, reasons


def test_answer_with_no_content_is_judged_as_none(tmp_path):
    case = copy.deepcopy(BASE)
    case["qa"][0]["pred"] = None  # the answer step returned no content; its judge reply is kept
    requests, verdicts, metrics = _official(case, tmp_path)
    _figures_equal_base(metrics)
    assert ORACLE._letters(case, verdicts) == [q["official_correctness"] for q in BASE["qa"]]
    first = ORACLE.item_ids(case)[0]
    row = verdicts.filter(pl.col("item_id") == first).row(0, named=True)
    assert row["error"] is None and row["raw_output"] == case["qa"][0]["judge_reply"]


def test_answer_with_no_content_renders_predicted_answer_none(tmp_path):
    """The score step's prompt is the official template with `None` formatted in as the predicted answer."""
    import json
    import tomllib

    import pyarrow as pa

    from capeval.engine.protocols.vidcapbench.release import load_vidcapbench
    from capeval.engine.registry import lookup
    from capeval.engine.schemas import NO_VERDICT, ParseStatus

    pack = tomllib.loads((ORACLE.PACK_DIR / "vidcapbench.toml").read_text(encoding="utf-8"))
    template = {p["id"]: p["user"] for p in pack["prompt"]}["judge/score"]
    params = {"mode": "official", "prompts": str(ORACLE.PACK_DIR / "vidcapbench.toml")}
    items = load_vidcapbench(ORACLE._qa_file(BASE, tmp_path / "qa.jsonl"))
    protocol = lookup("protocol", "vidcapbench")
    answers = protocol.build_requests(items, ORACLE._captions(BASE), judge="replay", judge_revision="r", **params)
    n = answers.num_rows
    # what the judge loop writes for the first answer: a backend reply with no content (the replay's error text)
    verdicts = pa.table({
        "verdict": pa.array([NO_VERDICT] * n, pa.int8()),
        "parse_status": pa.array([int(ParseStatus.ERROR)] + [int(ParseStatus.OK)] * (n - 1), pa.int8()),
        "detail": [None] + [json.dumps({"answer": "Red."})] * (n - 1),
        "error": ["replay: recorded reply has no content"] + [None] * (n - 1)})
    scores = protocol.next_requests(answers, verdicts, judge="replay", judge_revision="r").to_pylist()
    first = answers.column("item_id")[0].as_py()
    row = next(r for r in scores if r["item_id"] == first)
    qa = dict(zip(ORACLE.item_ids(BASE), BASE["qa"]))[first]
    assert row["user"] == template.format(question=qa["question"], answer=qa["answer"], prediction=None)
    assert "Predicted Answer: None\n" in row["user"]
    assert "missing" not in json.loads(row["context"]).get("parse", {})


def test_judge_reply_with_no_content_still_stops_the_official_script(tmp_path):
    case = copy.deepcopy(BASE)
    case["qa"][2]["judge_reply"] = None
    _, _, metrics = _official(case, tmp_path)
    reasons = _null_reasons(metrics)
    assert "no content" in reasons and "KeyError" in reasons, reasons


@pytest.mark.parametrize("first", ["category", "no_content"])
def test_the_first_stopping_pair_in_official_order_names_the_error(first, tmp_path):
    case = copy.deepcopy(BASE)
    early, late = (case["qa"][0], case["qa"][-1])
    if first == "category":
        early["sub_category"], late["judge_reply"] = "Color", None
    else:
        early["judge_reply"], late["sub_category"] = None, "Color"
    _, _, metrics = _official(case, tmp_path)
    reasons = _null_reasons(metrics)
    assert ("Category Wrong" in reasons) == (first == "category"), reasons
    assert ("KeyError" in reasons) == (first == "no_content"), reasons


def test_a_request_failed_at_the_backend_is_not_called_an_official_crash(tmp_path, monkeypatch):
    """A timeout or HTTP error has no official counterpart (the script retries until it is answered)."""
    case = copy.deepcopy(BASE)
    lost = ORACLE.item_ids(case)[1]
    replies = [r for r in ORACLE._replies(case) if not (r["item_id"] == lost and r["step"] == "score")]
    monkeypatch.setattr(ORACLE, "_replies", lambda _case: replies)  # no reply recorded: a backend error
    _, _, metrics = _official(case, tmp_path)
    reasons = _null_reasons(metrics)
    assert "failed at the judge backend" in reasons and "KeyError" not in reasons, reasons
