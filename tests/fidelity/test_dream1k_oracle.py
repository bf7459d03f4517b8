"""The `dream1k` protocol in official mode against the official code's outcomes (tarsier @ 63de87a,
evaluate_dream_gpt.py), on every case of every autodq oracle file (conftest.py discovers them: held-out cases of
the same kind run unchanged).

Each case goes through the production path: items as the DREAM-1K loader builds them -> the registered `dream1k`
protocol's build_requests(mode="official", prompts = ../shared/protocols/autodq.toml) -> the replay judge serving
the case's scripted replies (successive calls of a step are attempts 0, 1, ...; the last reply repeats) ->
run_judging (every step) -> the protocol's compute_metrics as a sweep calls it. Compared with the oracle: per clip
(success, recall / precision scores, hit counts, the accepted relationship lists, the calls made; read from the
verdict rows and from the protocol's own per-clip table), per source,
OVERALL and the three bucket tables (subjects, shots, events), to 1e-6; and what was sent: each request's text
equals the official prompt rendered from the pack, with no system message and no sampling parameter."""

from __future__ import annotations

import json
import math
import tomllib

import polars as pl
import pytest

from capeval.adapters.replay import ReplayJudge
from capeval.engine.protocols.dream1k.metrics import clip_table
from capeval.engine.registry import lookup


def _load(name: str):
    """A module of this folder by path (tests/ is not a package, so no relative import)."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location(f"_dream1k_oracle_{name}", Path(__file__).with_name(f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_conftest, H = _load("conftest"), _load("_dream1k_replay")
PACK_DIR = _conftest.PACK_DIR
CASES = _conftest.oracle_cases("autodq_oracle.jsonl")
PARAMS = {"mode": "official", "prompts": PACK_DIR / "autodq.toml"}
#: the official table's columns -> the dream1k protocol's metric names
METRIC = {"f1": "F1", "recall": "recall", "precision": "precision"}


def _nan_equal(a, b, tol=1e-6) -> bool:
    a = float("nan") if a == "nan" or a is None else float(a)
    b = float("nan") if b == "nan" or b is None else float(b)
    return (math.isnan(a) and math.isnan(b)) or abs(a - b) <= tol


def _bucket_tag(name: str, label: str) -> str:
    return f"{name}{label}" if label[0] in "<=>" else f"{name} {label}"


@pytest.fixture(scope="module")
def protocol():
    return lookup("protocol", "dream1k")


def _run(protocol, case, tmp_path):
    items, captions = H.case_items(case), H.case_captions(case)
    requests, verdicts, sent = H.run(protocol, PARAMS, items, captions, ReplayJudge(H.case_replies(case)),
                                     tmp_path / "cache")
    return items, captions, verdicts, sent


def _clips(verdicts: pl.DataFrame) -> dict[str, dict]:
    """Per clip, read from the verdict rows of the two entailment steps: success (both have a verdict), the scores,
    hits and event counts of their details, and the relationships as the accepted reply wrote them."""
    out: dict[str, dict] = {}
    for rec in verdicts.filter(pl.col("step").is_in(["recall", "precision"])).iter_rows(named=True):
        clip = out.setdefault(rec["item_id"], {})
        d = rec["step"][0]
        ok = rec["verdict"] is not None and rec["verdict"] >= 0 and bool(rec["detail"])
        clip[f"ok_{d}"] = ok
        if ok:
            detail = json.loads(rec["detail"])
            clip.update({f"score_{d}": float(detail["score"]), f"hits_{d}": int(detail["hits"]),
                         f"n_{d}": int(detail["n_events"]), f"relationships_{d}": detail["relationships"]})
    for clip in out.values():
        clip["success"] = bool(clip.get("ok_r")) and bool(clip.get("ok_p"))
    return out


def _vid_of(case, idx) -> str:
    return next(str(v["vid"]) for v in case["videos"] if v["idx"] == idx)


@pytest.mark.parametrize("case", CASES, ids=[c["case_id"] for c in CASES])
def test_dream1k_case_matches_official(protocol, case, tmp_path):
    items, captions, verdicts, sent = _run(protocol, case, tmp_path)
    assert protocol.judging_policy(**PARAMS).max_reasks == H.TRIES - 1  # the official max_retry: 10 tries a call

    # per clip
    clips = _clips(verdicts)
    assert set(clips) == {str(v["vid"]) for v in case["videos"]}
    for official in case["official_per_video"]:
        vid = _vid_of(case, official["idx"])
        clip = clips[vid]
        assert clip["success"] == official["success"], official["idx"]
        rows = verdicts.filter(pl.col("item_id") == vid)
        if not official["success"]:  # a Failed clip keeps its rows, at most one of them with a verdict
            assert rows.filter(pl.col("verdict") >= 0).height < 2, official["idx"]
            assert rows.filter(pl.col("verdict") < 0)["error"].drop_nulls().len() >= 1, official["idx"]
            continue
        assert clip["score_r"] == pytest.approx(official["score_r"], abs=1e-6), official["idx"]
        assert clip["score_p"] == pytest.approx(official["score_p"], abs=1e-6), official["idx"]
        assert f"hit: {clip['hits_r']} / {clip['n_r']}" == official["hit_num_recall"], official["idx"]
        assert f"hit: {clip['hits_p']} / {clip['n_p']}" == official["hit_num_precision"], official["idx"]
        assert [x.strip().lower() for x in clip["relationships_r"]] == \
            [x.strip().lower() for x in official["recall_verdicts"]], official["idx"]
        assert [x.strip().lower() for x in clip["relationships_p"]] == \
            [x.strip().lower() for x in official["precision_verdicts"]], official["idx"]
    # the per-clip table the protocol reports (`capeval dream1k clips`) says the same
    table = {r["item_id"]: r for r in clip_table(verdicts, pl.from_arrow(items)).iter_rows(named=True)}
    assert set(table) == set(clips)
    for official in case["official_per_video"]:
        row = table[_vid_of(case, official["idx"])]
        assert row["success"] == official["success"], official["idx"]
        if official["success"]:
            assert row["recall"] == pytest.approx(official["score_r"], abs=1e-6), official["idx"]
            assert row["precision"] == pytest.approx(official["score_p"], abs=1e-6), official["idx"]
            assert f"hit: {row['hits_r']} / {row['n_r']}" == official["hit_num_recall"], official["idx"]
            assert f"hit: {row['hits_p']} / {row['n_p']}" == official["hit_num_precision"], official["idx"]
        else:
            assert (row["recall"], row["precision"], row["f1"]) == (None, None, None), official["idx"]
    # the calls made per clip equal the official api_calls (successive tries of each step, up to 10); capeval sends
    # the recall call alongside the extraction, the official code after it, so when the extraction fails the
    # official calls are the extraction's alone
    for official in case["official_per_video"]:
        vid = _vid_of(case, official["idx"])
        extract = verdicts.filter((pl.col("item_id") == vid) & (pl.col("step") == "extract"))
        assert extract.height == 1, official["idx"]
        if extract["parse_status"][0] <= 1:
            calls = sum(1 for s in sent if s["item_id"] == vid)
        else:  # the official code made only extraction calls
            calls = sum(1 for s in sent if s["item_id"] == vid and s["step"] == "extract")
        assert calls == official["api_calls"], official["idx"]

    # per source / OVERALL / buckets, as a sweep computes them (percent)
    table = H.metrics(protocol, verdicts, items, captions, PARAMS)

    def row(bucket, metric):
        found = table.filter((pl.col("bucket") == bucket) & (pl.col("metric") == metric))
        assert found.height == 1, (bucket, metric, found.height)
        return found.row(0, named=True)

    def value(bucket, metric):
        v = row(bucket, metric)["value"]
        return float("nan") if v is None else v / 100.0

    for source, t in case["official_per_source"].items():
        for key, metric in METRIC.items():
            assert _nan_equal(value(f"source:{source}", metric), t[key]), (source, key)
        head = row(f"source:{source}", METRIC["f1"])
        assert (head["n"], head["n_no_verdict"]) == (t["success"], t["failed"]), source
        if "printed_rounded_3" in t:
            for key, shown in zip(("f1", "recall", "precision"), t["printed_rounded_3"]):
                assert _nan_equal(value(f"source:{source}", METRIC[key]), shown, tol=5e-4 + 1e-9), (source, key)
    o = case["official_overall"]
    for key, metric in METRIC.items():
        assert _nan_equal(value("all", metric), o[key]), ("OVERALL", key)
    head = row("all", METRIC["f1"])
    assert (head["n"], head["n_no_verdict"]) == (o["success"], o["failed"])
    # what the official table prints (3 decimals) is within half a unit of the third decimal of ours
    for ours, shown in zip((value("all", METRIC[k]) for k in ("f1", "recall", "precision")), o["printed_rounded_3"]):
        assert _nan_equal(ours, shown, tol=5e-4 + 1e-9)
    for name, t in case["official_buckets"].items():
        for i, label in enumerate(t["sub_buckets"]):
            tag = _bucket_tag(name, label)
            for key, column in (("f1", "F1"), ("recall", "Recall"), ("precision", "Precision")):
                assert _nan_equal(value(tag, METRIC[key]), t[column][i]), (tag, key)
            assert row(tag, METRIC["f1"])["n"] == t["Count"][i], tag


@pytest.mark.parametrize("case", CASES, ids=[c["case_id"] for c in CASES])
def test_dream1k_sends_the_official_requests(protocol, case, tmp_path):
    """Every request sent is the official one: the pack's template rendered as the official code renders it (the
    caption lower-cased with '"' -> "'" for the extraction; for recall the lower-cased caption and str() of the
    reference events; for precision the lower-cased reference and str() of the accepted extraction, or the other
    text as the one event when a list is empty), one user message, no sampling parameter, no seed."""
    _, _, verdicts, sent = _run(protocol, case, tmp_path)
    pack = {p["id"]: p for p in tomllib.loads((PACK_DIR / "autodq.toml").read_text(encoding="utf-8"))["prompt"]}
    extract_t, entail_t = pack["judge/extract_events"]["user"], pack["judge/entailment"]["user"]
    by_vid = {str(v["vid"]): v for v in case["videos"]}
    official = {_vid_of(case, o["idx"]): o for o in case["official_per_video"]}
    assert sent
    for s in sent:
        v = by_vid[s["item_id"]]
        assert s["system"] is None and s["max_tokens"] is None and s["temperature"] is None and s["seed"] is None, s
        assert s["choices"] is None and s["json_schema"] is None, s
        if s["step"] == "extract":
            expected = extract_t.format(caption=v["prediction"].lower().replace('"', "'"))
        elif s["step"] == "recall":
            events = v["events"] or [v["response"].lower().replace("\n", " ")]
            expected = entail_t.format(description=v["prediction"].lower(), events=str(events))
        else:
            assert s["step"] == "precision", s["step"]
            shown = official[s["item_id"]].get("precision_events")
            if shown is None:  # a Failed clip: the accepted extraction is in its extract row
                detail = json.loads(verdicts.filter((pl.col("item_id") == s["item_id"])
                                                    & (pl.col("step") == "extract"))["detail"][0])
                shown = detail["events"] or [v["prediction"].lower().replace("\n", " ")]
            expected = entail_t.format(description=v["response"].lower(), events=str(shown))
        assert s["user"] == expected, (s["item_id"], s["step"], s["attempt"])
    # a re-ask sends the same text again (the official loop repeats the same call)
    for (item, step), group in _by_call(sent).items():
        assert len({g["user"] for g in group}) == 1, (item, step)
        assert sorted(g["attempt"] for g in group) == list(range(len(group))), (item, step)


def _by_call(sent):
    out = {}
    for s in sent:
        out.setdefault((s["item_id"], s["step"]), []).append(s)
    return out
