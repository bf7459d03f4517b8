"""AutoDQ (DREAM-1K's event score, LVCap-Eval's S_e) in official mode against the official code's outcomes.

Every case of autodq_oracle.jsonl (real DREAM-1K clips, scripted replies) goes through the production path: items
built by the DREAM-1K loader -> LVCapProtocol.build_requests(mode="official", official packs read from
../shared/protocols) -> the replay judge -> capeval.engine.judging.runner.run_judging -> compute_metrics. Compared: per clip
(success, recall/precision scores, hit counts, the accepted verdict lists, the judged caption events), per source,
OVERALL and the three bucket tables, to 1e-6."""

from __future__ import annotations

import json
import math

import polars as pl
import pyarrow as pa
import pytest

from capeval.adapters.replay import ReplayJudge
from capeval.engine.protocols.lvcap import dream1k
from capeval.engine.judging.runner import run_judging
from capeval.engine.protocols.lvcap import PROTOCOL
from capeval.engine.protocols.lvcap.autodq_metrics import clip_info, clip_scores, summarize
from capeval.engine.protocols.lvcap.metrics import GROUP_COLUMNS, compute_metrics
from capeval.engine.schemas import CAPTIONS, conform



def _fidelity_conftest():
    """tests/fidelity/conftest.py by path (tests/ is not a package, so no relative import)."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location("_fidelity_conftest_autodq", Path(__file__).with_name("conftest.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


PACK_DIR, oracle_cases = _fidelity_conftest().PACK_DIR, _fidelity_conftest().oracle_cases

CASES = oracle_cases("autodq_oracle.jsonl")
TRIES = 10  # the official max_retry
KINDS = {"extract": "extract_replies", "recall": "recall_replies", "precision": "precision_replies"}


def _nan_equal(a, b, tol=1e-6) -> bool:
    a = float("nan") if a == "nan" or a is None else float(a)
    b = float("nan") if b == "nan" or b is None else float(b)
    return (math.isnan(a) and math.isnan(b)) or abs(a - b) <= tol


def _items(case):
    clips = [(str(v["vid"]), v["events"], v["response"], v["dataset"],
              {**v["extra_info"], "dataset": v["dataset"], "idx": v["idx"]}) for v in case["videos"]]
    return dream1k.clip_items(clips)


def _captions(case):
    vids = [str(v["vid"]) for v in case["videos"]]
    return conform(pa.table({"caption_key": [f"cap-{v}" for v in vids], "captioner": ["model"] * len(vids),
                             "prompt_id": ["describe"] * len(vids), "frame_spec": ["uniform:8"] * len(vids),
                             "video_id": vids, "text": [v["prediction"] for v in case["videos"]]}), CAPTIONS)


def _replies(case) -> list[dict]:
    """Successive calls of one kind are attempts 0, 1, 2, ...; the last scripted reply repeats for any further call."""
    out = []
    for v in case["videos"]:
        for step, key in KINDS.items():
            replies = v[key]
            for attempt in range(TRIES):
                out.append({"item_id": str(v["vid"]), "step": step, "attempt": attempt,
                            "text": replies[min(attempt, len(replies) - 1)]})
    return out


def _run(case, tmp_path, keep_intermediate=False):
    judge = ReplayJudge(_replies(case))
    params = {"mode": "official", "prompts": PACK_DIR / "lvcap.toml", "event_prompts": PACK_DIR / "autodq.toml",
              "event_scoring": "autodq"}
    requests = PROTOCOL.build_requests(_items(case), _captions(case), judge=judge.name,
                                       judge_revision=judge.revision, **params)
    policy = PROTOCOL.judging_policy(**params)
    assert (policy.max_reasks, policy.reask_temperature, policy.mode) == (TRIES - 1, None, "official")
    verdicts = run_judging(requests, judge, cache_dir=tmp_path / "cache", protocol=PROTOCOL, protocol_params=params,
                           progress=False, keep_intermediate=keep_intermediate)
    return requests, pl.from_arrow(verdicts), params


@pytest.mark.parametrize("case", CASES, ids=[c["case_id"] for c in CASES])
def test_autodq_case_matches_official(case, tmp_path):
    requests, verdicts, params = _run(case, tmp_path, keep_intermediate=True)
    items = pl.from_arrow(_items(case))
    by_vid = {str(v["vid"]): v for v in case["videos"]}

    # per clip
    clips = {c["item_id"]: c for c in clip_scores(verdicts.with_columns(
        [pl.col(c).cast(pl.String) for c in GROUP_COLUMNS]), GROUP_COLUMNS).to_dicts()}
    assert len(clips) == len(case["videos"])
    for official in case["official_per_video"]:
        vid = next(k for k, v in by_vid.items() if v["idx"] == official["idx"])
        clip = clips[vid]
        assert clip["success"] == official["success"], official["idx"]
        if not official["success"]:
            continue
        assert clip["score_r"] == pytest.approx(official["score_r"], abs=1e-6)
        assert clip["score_p"] == pytest.approx(official["score_p"], abs=1e-6)
        assert f"hit: {clip['hits_r']} / {clip['n_r']}" == official["hit_num_recall"]
        assert f"hit: {clip['hits_p']} / {clip['n_p']}" == official["hit_num_precision"]
        rows = verdicts.filter(pl.col("item_id") == vid)
        recall = json.loads(rows.filter(pl.col("step") == "recall")["detail"][0])
        precision = json.loads(rows.filter(pl.col("step") == "precision")["detail"][0])
        assert [x.strip().lower() for x in recall["relationships"]] == \
            [x.strip().lower() for x in official["recall_verdicts"]]
        assert [x.strip().lower() for x in precision["relationships"]] == \
            [x.strip().lower() for x in official["precision_verdicts"]]
    # the calls made per clip equal the official api_calls (successive tries of each step, up to 10), for every
    # clip whose extraction was accepted (capeval sends the recall call alongside the extraction, the official code
    # after it)
    for official in case["official_per_video"]:
        vid = next(k for k, v in by_vid.items() if v["idx"] == official["idx"])
        rows = verdicts.filter(pl.col("item_id") == vid)
        calls = {s: (a + 1 if a is not None else 0) for s, a in zip(rows["step"], rows["attempt"])}
        if calls.get("extract", 0) and rows.filter(pl.col("step") == "extract")["parse_status"][0] <= 1:
            assert sum(calls.values()) == official["api_calls"], (official["idx"], calls)
    # a failed clip keeps its rows, without a verdict
    failed = [k for k, c in clips.items() if not c["success"]]
    for vid in failed:
        assert verdicts.filter((pl.col("item_id") == vid) & (pl.col("verdict") >= 0)).height < 2

    # per source / OVERALL / buckets, through compute_metrics (percent) and the summary (fractions)
    metrics = compute_metrics(verdicts, items=items, n_resamples=0, **params)
    assert set(metrics["mode"]) == {"official"}

    def value(bucket, metric):
        row = metrics.filter((pl.col("bucket") == bucket) & (pl.col("metric") == metric))
        assert row.height == 1, (bucket, metric)
        v = row["value"][0]
        return float("nan") if v is None else v / 100.0

    for source, t in case["official_per_source"].items():
        assert _nan_equal(value(f"source:{source}", "S_e"), t["f1"]), source
        assert _nan_equal(value(f"source:{source}", "event_recall"), t["recall"]), source
        assert _nan_equal(value(f"source:{source}", "event_precision"), t["precision"]), source
        row = metrics.filter((pl.col("bucket") == f"source:{source}") & (pl.col("metric") == "S_e")).row(0, named=True)
        assert (row["n"], row["n_no_verdict"]) == (t["success"], t["failed"])
    o = case["official_overall"]
    assert _nan_equal(value("all", "S_e"), o["f1"])
    assert _nan_equal(value("all", "event_recall"), o["recall"])
    assert _nan_equal(value("all", "event_precision"), o["precision"])
    head = metrics.filter((pl.col("bucket") == "all") & (pl.col("metric") == "S_e")).row(0, named=True)
    assert (head["n"], head["n_no_verdict"]) == (o["success"], o["failed"])
    # what the official table prints (rounded to 3 decimals) is within half a unit of the third decimal of ours
    printed = zip((value("all", "S_e"), value("all", "event_recall"), value("all", "event_precision")),
                  o["printed_rounded_3"])
    assert all(_nan_equal(ours, shown, tol=5e-4 + 1e-9) for ours, shown in printed)

    summary = summarize(clip_scores(verdicts.with_columns([pl.col(c).cast(pl.String) for c in GROUP_COLUMNS]),
                                    GROUP_COLUMNS), clip_info(items))
    for name, table in case["official_buckets"].items():
        for i, label in enumerate(table["sub_buckets"]):
            got = summary["buckets"][name][label]
            assert got["count"] == table["Count"][i], (name, label)
            assert _nan_equal(got["recall"], table["Recall"][i]), (name, label)
            assert _nan_equal(got["precision"], table["Precision"][i]), (name, label)
            assert _nan_equal(got["f1"], table["F1"][i]), (name, label)
            tag = f"{name}{label}" if label[0] in "<=>" else f"{name} {label}"
            assert _nan_equal(value(tag, "S_e"), table["F1"][i]), tag


@pytest.mark.parametrize("case", CASES, ids=[c["case_id"] for c in CASES])
def test_precision_prompt_lists_the_extracted_events(case, tmp_path):
    """The precision call shows the reference (lower-cased) and str() of the accepted extraction, as the official
    code renders it (or [caption] when the extraction is empty)."""
    import tomllib

    _, verdicts, _ = _run(case, tmp_path, keep_intermediate=True)
    template = {p["id"]: p for p in tomllib.loads((PACK_DIR / "autodq.toml").read_text())["prompt"]}
    entail = template["judge/entailment"]["user"]
    for official in case["official_per_video"]:
        if not official["success"]:
            continue
        v = next(v for v in case["videos"] if v["idx"] == official["idx"])
        rows = verdicts.filter((pl.col("item_id") == str(v["vid"])) & (pl.col("step") == "precision"))
        assert rows.height == 1
        events = official["precision_events"]
        # the events judged are the accepted extraction, or the substituted caption when it was empty
        detail = json.loads(verdicts.filter((pl.col("item_id") == str(v["vid"])) & (pl.col("step") == "extract"))
                            ["detail"][0])
        shown = detail["events"] if detail["events"] else [v["prediction"].lower().replace("\n", " ")]
        assert shown == events
        expected = entail.format(description=v["response"].lower(), events=str(shown))
        cache_user = _request_user(tmp_path, rows["request_key"][0], case, v)
        assert cache_user == expected


def _request_user(tmp_path, key, case, video):
    """The rendered user message of the precision request `key` (rebuilt through next_requests)."""
    judge = ReplayJudge(_replies(case))
    params = {"mode": "official", "prompts": PACK_DIR / "lvcap.toml", "event_prompts": PACK_DIR / "autodq.toml",
              "event_scoring": "autodq"}
    requests = PROTOCOL.build_requests(_items(case), _captions(case), judge=judge.name,
                                       judge_revision=judge.revision, **params)
    verdicts = run_judging(requests, judge, cache_dir=tmp_path / "cache2", protocol=PROTOCOL, protocol_params=params,
                           progress=False, keep_intermediate=True)
    first = verdicts.slice(0, requests.num_rows)  # the first step's rows come first, in request order
    assert first["request_key"].to_pylist() == requests["request_key"].to_pylist()
    nxt = PROTOCOL.next_requests(requests, first, judge=judge.name, judge_revision=judge.revision)
    for r in nxt.to_pylist():
        if r["request_key"] == key:
            return r["user"]
    raise AssertionError(f"precision request {key} not rebuilt for {video['idx']}")
