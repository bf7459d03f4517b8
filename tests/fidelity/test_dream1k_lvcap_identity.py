"""`dream1k` and LVCap-Eval's `event_scoring="autodq"` variant are one AutoDQ: on the same judge replies they send
the same request texts (system, user, sampling, per attempt), accept and reject the same replies, and report the
same DREAM-1K numbers -- every per-source, OVERALL and bucket value (subjects, shots, events, duration), with the
same counts and bootstrap intervals.

Replies: the autodq oracle cases (every discovered file), 200 real DREAM-1K clips with scripted replies that
exercise every official rule (fences, the entailment clean-up, re-asks, Failed clips in each step, empty event
lists, a failed caption: _dream1k_replay.scripted_clips), and DREAM-1K clips answered by the local judge (which
reaches each protocol's own stand-in answers)."""

from __future__ import annotations

import math

import polars as pl
import pytest

from capeval.adapters.replay import ReplayJudge
from capeval.engine.registry import lookup


def _load(name: str):
    """A module of this folder by path (tests/ is not a package, so no relative import)."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location(f"_dream1k_identity_{name}", Path(__file__).with_name(f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_conftest, H = _load("conftest"), _load("_dream1k_replay")
PACK_DIR = _conftest.PACK_DIR
CASES = _conftest.oracle_cases("autodq_oracle.jsonl")
LVCAP = {"mode": "official", "prompts": PACK_DIR / "lvcap.toml", "event_prompts": PACK_DIR / "autodq.toml",
         "event_scoring": "autodq"}
DREAM1K = {"mode": "official", "prompts": PACK_DIR / "autodq.toml"}
#: lvcap's AutoDQ metric -> dream1k's
METRIC = {"S_e": "F1", "event_recall": "recall", "event_precision": "precision", "S_e_pooled": "F1_pooled",
          "S_e_clip_mean": "F1_clip_mean"}
GROUP = ["captioner", "prompt_id", "frame_spec"]
#: the verdict columns that say what was accepted and why (keys and the protocol column differ by construction)
VERDICT_COLUMNS = ["item_id", "video_id", "caption_key", "step", "sub_index", "trial", "attempt", "verdict",
                   "parse_status", "detail", "raw_output", "error"]
pytestmark = pytest.mark.skipif(not H.DREAM.is_file(), reason="DREAM-1K not present")


def _both(items, captions, make_judge, tmp_path, n_resamples=0):
    out = {}
    for name, params in (("lvcap", LVCAP), ("dream1k", DREAM1K)):
        protocol = lookup("protocol", name)
        _, verdicts, sent = H.run(protocol, params, items, captions, make_judge(), tmp_path / name)
        out[name] = (verdicts, sent, H.metrics(protocol, verdicts, items, captions, params, n_resamples))
    # one duration bucket of 120 s holds every DREAM-1K clip, as lvcap's default "<2min" does
    out["dream1k_120s"] = H.metrics(lookup("protocol", "dream1k"), out["dream1k"][0], items, captions,
                                    {**DREAM1K, "duration_buckets": "120"}, n_resamples)
    return out


def _same(a, b) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return a == b or (math.isnan(a) and math.isnan(b))


def _assert_identical(out: dict) -> pl.DataFrame:
    (lv_v, lv_sent, lv_m), (d_v, d_sent, d_m) = out["lvcap"], out["dream1k"]
    # the same texts sent, attempt by attempt
    assert len(lv_sent) == len(d_sent)
    assert H.sent_texts(lv_sent) == H.sent_texts(d_sent)
    # the same replies accepted and rejected, with the same details (per clip: scores, hits, relationships)
    cols = [c for c in VERDICT_COLUMNS if c in lv_v.columns]
    assert cols == [c for c in VERDICT_COLUMNS if c in d_v.columns]
    order = ["item_id", "step", "sub_index", "trial"]
    assert lv_v.select(cols).sort(order).to_dicts() == d_v.select(cols).sort(order).to_dicts()
    # every AutoDQ number of lvcap has its dream1k twin, equal to the last bit
    lv_rows = lv_m.filter((pl.col("event_scoring") == "autodq") & pl.col("metric").is_in(list(METRIC)))
    assert lv_rows.height
    d_index = {(*(r[c] for c in GROUP), r["bucket"], r["metric"]): r for r in d_m.iter_rows(named=True)}
    compared, missing = 0, []
    for r in lv_rows.iter_rows(named=True):
        twin = d_index.get((*(r[c] for c in GROUP), r["bucket"], METRIC[r["metric"]]))
        if twin is None:
            missing.append((r["bucket"], r["metric"]))
            continue
        for k in ("value", "ci_low", "ci_high", "n", "n_no_verdict"):
            assert _same(r[k], twin[k]), (r["bucket"], r["metric"], k, r[k], twin[k])
        compared += 1
    # duration buckets: compared where both use the same edges; every other bucket must exist in both
    assert [m for m in missing if not m[0].startswith("duration:")] == [], missing
    # and dream1k reports no DREAM-1K bucket lvcap does not
    lv_keys = {(*(r[c] for c in GROUP), r["bucket"], METRIC[r["metric"]]) for r in lv_rows.iter_rows(named=True)}
    extra = [k for k, r in d_index.items() if k[-1] in METRIC.values() and not k[-2].startswith("duration:")
             and (k[-2] == "all" or k[-2].split(":")[0] == "source" or k[-2].startswith(("subjects", "shots",
                                                                                         "events")))
             and k not in lv_keys]
    assert extra == [], extra
    assert compared >= 3
    # duration: DREAM-1K's clips all last under 2 minutes, lvcap's first bucket; with one 120 s edge dream1k puts
    # them in one bucket too (both pool the sources); a clip without a duration is "unknown" in both
    same_bucket = {"duration:<2min": "duration:<=120s", "duration:unknown": "duration:unknown"}
    wide = {(*(r[c] for c in GROUP), r["bucket"], r["metric"]): r
            for r in out["dream1k_120s"].iter_rows(named=True)}
    lv_duration = lv_rows.filter(pl.col("bucket").str.starts_with("duration:"))
    assert lv_duration.height and set(lv_duration["bucket"]) <= set(same_bucket), set(lv_duration["bucket"])
    for r in lv_duration.iter_rows(named=True):
        twin = wide.get((*(r[c] for c in GROUP), same_bucket[r["bucket"]], METRIC[r["metric"]]))
        assert twin is not None, (r["bucket"], r["metric"])
        for k in ("value", "n", "n_no_verdict"):
            assert _same(r[k], twin[k]), (r["bucket"], r["metric"], k, r[k], twin[k])
    return lv_rows


@pytest.mark.parametrize("case", CASES, ids=[c["case_id"] for c in CASES])
def test_oracle_replies_give_identical_requests_and_numbers(case, tmp_path):
    out = _both(H.case_items(case), H.case_captions(case), lambda: ReplayJudge(H.case_replies(case)), tmp_path)
    _assert_identical(out)


def test_200_dream1k_clips_with_scripted_replies_give_identical_requests_and_numbers(tmp_path):
    items, captions, records, expect = H.scripted_clips(200)
    assert items.num_rows == 200
    out = _both(items, captions, lambda: ReplayJudge(records), tmp_path, n_resamples=200)
    rows = _assert_identical(out)
    # the script exercises what it claims: Failed clips in every step, re-asks, all five sources
    failed = expect["extract_failed"] | expect["recall_failed"] | expect["precision_failed"] | expect["caption_failed"]
    head = rows.filter((pl.col("bucket") == "all") & (pl.col("metric") == "S_e")).row(0, named=True)
    assert (head["n"], head["n_no_verdict"]) == (200 - len(failed), len(failed))
    assert all(expect[k] for k in ("extract_failed", "recall_failed", "precision_failed", "reasked",
                                   "empty_extraction"))
    sources = rows.filter(pl.col("bucket").str.starts_with("source:"))["bucket"].unique()
    assert sources.len() == 5
    assert head["ci_low"] is not None and head["ci_low"] < head["value"] < head["ci_high"]
    verdicts = out["dream1k"][0]
    judged = verdicts.filter(pl.col("step").is_in(["recall", "precision"]))
    assert set(judged.filter(pl.col("verdict") < 0)["item_id"]) == failed
    reasked = set(verdicts.filter(pl.col("attempt") > 0)["item_id"])
    assert reasked >= expect["reasked"] - failed


@pytest.mark.slow
def test_local_judge_answers_give_identical_requests_and_numbers(tmp_path):
    """The local judge answers each request through its protocol's stand-in (found by the request's task), so
    this also checks that dream1k's stand-in answers are lvcap's."""
    from capeval.adapters.local_judge import LocalJudge

    items, captions, _, _ = H.scripted_clips(30)
    judge = LocalJudge()
    out = _both(items, captions, lambda: judge, tmp_path)
    rows = _assert_identical(out)
    head = rows.filter((pl.col("bucket") == "all") & (pl.col("metric") == "S_e")).row(0, named=True)
    assert head["value"] is not None and head["n"] >= 25
