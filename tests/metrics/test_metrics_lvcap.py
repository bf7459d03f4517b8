"""LVCap-Eval S_s and AutoDQ-style S_e against hand-computed values."""

import polars as pl
import pytest

from capeval.engine.protocols.lvcap.metrics import compute_metrics, duration_bucket

E, N, C = 1, 0, 2  # entailment, neutral, contradiction


def table(spec):
    rows = []
    for video, step, codes in spec:
        for k, code in enumerate(codes):
            rows.append(dict(item_id=video, task="t", video_id=video, captioner="m", prompt_id="p", frame_spec="f",
                             step=step, sub_index=k, verdict=code))
    return pl.DataFrame(rows, schema_overrides={"verdict": pl.Int8})


SPEC = [("a", "entail_p", [E, N]), ("a", "entail_r", [E, E, C, N]), ("a", "scene", [1, 0]),
        ("b", "entail_p", [E]), ("b", "entail_r", [N, -1]), ("b", "scene", [-1])]
ITEMS = pl.DataFrame({"video_id": ["a", "b"], "item_id": ["a", "b"], "category": [None, None],
                      "extra": ['{"duration": 30}', '{"duration": 400}']})


def get(frame, metric, bucket="all"):
    return frame.filter((pl.col("metric") == metric) & (pl.col("bucket") == bucket)).row(0, named=True)


def test_autodq_video_average_by_hand():
    out = compute_metrics(table(SPEC), items=ITEMS, n_resamples=100)
    # a: P=1/2, R=2/4; b: P=1/1, R=0/2 (the unjudged event counts as unmatched)
    p, r = (0.5 + 1.0) / 2, (0.5 + 0.0) / 2
    assert get(out, "event_precision")["value"] == pytest.approx(100 * p)
    assert get(out, "event_recall")["value"] == pytest.approx(100 * r)
    assert get(out, "S_e")["value"] == pytest.approx(100 * 2 * p * r / (p + r))
    assert get(out, "S_e")["n_no_verdict"] == 1 and get(out, "S_e")["n"] == 8
    assert get(out, "S_s")["value"] == pytest.approx(100 / 3)
    assert get(out, "S_e", "<2min")["value"] == pytest.approx(50.0)
    assert get(out, "S_s", "6-10min")["value"] is None  # b's one scene question has no verdict: no score (issue 16)


def test_pooled_and_paper_modes():
    pooled = compute_metrics(table(SPEC), items=ITEMS, n_resamples=0, event_average="pooled")
    assert get(pooled, "event_precision")["value"] == pytest.approx(100 * 2 / 3)
    assert get(pooled, "event_recall")["value"] == pytest.approx(100 * 2 / 6)
    assert set(pooled["mode"]) == {"strict/pooled"}
    paper = compute_metrics(table(SPEC), items=ITEMS, n_resamples=0, paper_compatible=True)
    assert get(paper, "event_recall")["value"] == pytest.approx(50.0)  # video b dropped as AutoDQ does
    assert get(paper, "S_s")["value"] == pytest.approx(50.0)
    assert get(paper, "S_e", "6-10min")["value"] is None and get(paper, "S_e", "6-10min")["n_no_verdict"] == 1


def test_ci_deterministic_with_seed_and_contains_value():
    spec = SPEC + [(v, "entail_p", [E, N, E]) for v in "cdefg"] + [(v, "entail_r", [N, E]) for v in "cdefg"]
    a = compute_metrics(table(spec), n_resamples=300, seed=5)
    assert a.equals(compute_metrics(table(spec), n_resamples=300, seed=5))
    row = get(a, "S_e", "unknown")
    assert row["ci_low"] <= row["value"] <= row["ci_high"]


def test_duration_buckets_default_to_the_papers():
    # the paper's buckets: 2-5, 6-10, 11-15, 16-20 minutes = [2, 5], (5, 10], (10, 15], (15, 20]
    assert duration_bucket(30) == "<2min" and duration_bucket(120) == "2-5min" and duration_bucket(300) == "2-5min"
    assert duration_bucket(301) == "6-10min" and duration_bucket(600) == "6-10min"
    assert duration_bucket(14.5 * 60) == "11-15min" and duration_bucket(20 * 60) == "16-20min"
    assert duration_bucket(20 * 60 + 1) == ">20min" and duration_bucket(None) == "unknown"


def test_duration_bucket_edges_are_a_param():
    out = compute_metrics(table(SPEC), items=ITEMS, n_resamples=0, duration_buckets="0,1,10")
    assert get(out, "S_e", "0-1min")["value"] == pytest.approx(50.0)  # a: 30 s
    assert get(out, "S_e", "2-10min")["value"] == pytest.approx(0.0)  # b: 400 s, in (1, 10]; P = 1, R = 0
    with pytest.raises(ValueError, match="duration_buckets"):
        compute_metrics(table(SPEC), items=ITEMS, n_resamples=0, duration_buckets="5,2")


def test_keep_intermediate_rows_never_change_a_metric():
    """extract rows (kept with --keep-intermediate) carry no verdict and are not scene answers."""
    extra = pl.DataFrame([dict(item_id=v, task="events", video_id=v, captioner="m", prompt_id="p", frame_spec="f",
                               step="extract", sub_index=0, verdict=-1) for v in "ab"],
                         schema_overrides={"verdict": pl.Int8})
    base = compute_metrics(table(SPEC), items=ITEMS, n_resamples=50, seed=3)
    kept = compute_metrics(pl.concat([table(SPEC), extra]), items=ITEMS, n_resamples=50, seed=3)
    assert base.equals(kept)


# -- official scene QA (Prompt4: one call per video) -----------------------------------------------------------------
import json  # noqa: E402
import tomllib  # noqa: E402
from pathlib import Path  # noqa: E402

import pyarrow as pa  # noqa: E402

from capeval.adapters.replay import ReplayJudge  # noqa: E402
from capeval.engine.judging.runner import run_judging  # noqa: E402
from capeval.engine.protocols.lvcap import PROTOCOL  # noqa: E402
from capeval.engine.schemas import CAPTIONS, ITEMS as ITEMS_SCHEMA, conform  # noqa: E402

PACK_DIR = Path(__file__).resolve().parents[2].parent / "shared" / "protocols"


def _scene_inputs():
    rows = []
    for vid, duration, spec in (("v1", 200, [(1, "yes"), (1, "no"), (2, "yes")]), ("v2", 700, [(1, "no"), (1, "yes")])):
        for k, (scene, ans) in enumerate(spec):
            rows.append({"benchmark": "lvcap", "task": "scene", "item_id": f"{vid}/q{k}", "video_id": vid,
                         "annotation": f"Question {k} about {vid}?", "answer": ans,
                         "extra": json.dumps({"scene": scene, "scene_description": f"Scene {scene} of {vid}.",
                                              "duration": duration})})
    items = conform(pa.Table.from_pylist(rows), ITEMS_SCHEMA)
    caps = conform(pa.table({"caption_key": ["c1", "c2"], "captioner": ["m", "m"], "prompt_id": ["p", "p"],
                             "frame_spec": ["f", "f"], "video_id": ["v1", "v2"],
                             "text": ["A long {caption} of v1.", "Caption of v2."]}), CAPTIONS)
    return items, caps


@pytest.mark.skipif(not (PACK_DIR / "lvcap.toml").is_file(), reason="shared packs not present")
def test_official_scene_qa_is_prompt4_per_video_with_the_scene_descriptions(tmp_path):
    items, caps = _scene_inputs()
    params = {"mode": "official", "prompts": PACK_DIR / "lvcap.toml", "event_prompts": PACK_DIR / "autodq.toml"}
    reqs = PROTOCOL.build_requests(items, caps, judge="replay", judge_revision="r", **params).to_pylist()
    assert [r["step"] for r in reqs] == ["scene_qa", "scene_qa"]  # one call per video
    prompt4 = {p["id"]: p["user"] for p in tomllib.loads((PACK_DIR / "lvcap.toml").read_text())["prompt"]}
    v1 = next(r for r in reqs if r["video_id"] == "v1")
    instructions, attached = v1["user"][:len(prompt4["judge/scene_qa"].format())], \
        v1["user"][len(prompt4["judge/scene_qa"].format()):]
    assert instructions == prompt4["judge/scene_qa"].format() and v1["system"] is None
    assert "Scene 1 of v1." in attached and "Scene 2 of v1." in attached and "A long {caption} of v1." in attached
    qa = json.loads(attached.split("QA set:\n", 1)[1].split("\n\nModel description:", 1)[0])
    assert [len(s["questions"]) for s in qa["scenes"]] == [2, 1]
    assert qa["scenes"][0]["questions"][1]["correct_answer"] == "No"
    replies = [{"item_id": "v1", "step": "scene_qa", "attempt": 0, "text": "Here: {\"scores\": [5, 1]}"},
               {"item_id": "v1", "step": "scene_qa", "attempt": 1,
                "text": '{"model": "m", "video_id": "v1", "scores": [1, 1], "total_score": 66.67}'},
               {"item_id": "v2", "step": "scene_qa", "attempt": 0,
                "text": '{"model": "m", "video_id": "v2", "scores": [0], "total_score": 0.00}'}]
    judge = ReplayJudge(replies)
    reqs = PROTOCOL.build_requests(items, caps, judge=judge.name, judge_revision=judge.revision, **params)
    v = pl.from_arrow(run_judging(reqs, judge, cache_dir=tmp_path, protocol=PROTOCOL, protocol_params=params,
                                  progress=False))
    # v1's first reply claims 5 correct of 2 questions: rejected, asked again
    assert v.filter(pl.col("video_id") == "v1")["attempt"].to_list() == [1]
    out = compute_metrics(v, items=pl.from_arrow(items), n_resamples=0, **params)
    assert get(out, "S_s")["value"] == pytest.approx(100 * (2 / 3 + 0 / 2) / 2)  # mean of per-video scores
    assert get(out, "S_s_pooled")["value"] == pytest.approx(100 * 2 / 5)
    assert get(out, "S_s", "duration:2-5min")["value"] == pytest.approx(100 * 2 / 3)
    assert get(out, "S_s", "duration:11-15min")["value"] == pytest.approx(0.0)
    assert set(out["mode"]) == {"official"}


def test_strict_scene_prompt_shows_the_scene_description():
    items, caps = _scene_inputs()
    reqs = PROTOCOL.build_requests(items, caps, judge="j", judge_revision="r").to_pylist()
    assert len(reqs) == 5 and {r["step"] for r in reqs} == {"answer"}
    q = next(r for r in reqs if r["item_id"] == "v1/q2")
    assert "Scene 2 of v1." in q["user"] and "Question 2 about v1?" in q["user"] and q["choices"] == ["yes", "no"]


def test_official_paper_event_scoring_runs_on_capevals_own_pack_with_the_local_judge(tmp_path):
    """`--mode official --prompts engine/protocols/lvcap/pack.toml`: the paper's event flow (Prompt2 layout, then
    Prompt5 layout) in capeval's words, answered by the local judge on the first try."""
    import pyarrow as pa

    from capeval.adapters.local_judge import LocalJudge
    from capeval.engine.judging.runner import run_judging
    from capeval.engine.packs import builtin_pack_path
    from capeval.engine.protocols.lvcap import PROTOCOL
    from capeval.engine.schemas import CAPTIONS, ITEMS, conform

    items = conform(pa.Table.from_pylist([{
        "benchmark": "lvcap", "task": "events", "item_id": "v1", "video_id": "v1", "category": "Movie",
        "annotation": json.dumps(["A man opens a door.", "A dog barks loudly."]), "answer": "ref"}]), ITEMS)
    caps = conform(pa.table({"caption_key": ["c"], "captioner": ["m"], "prompt_id": ["p"], "frame_spec": ["f"],
                             "video_id": ["v1"], "text": ["A man opens a door, and a dog barks loudly."]}), CAPTIONS)
    params = {"mode": "official", "prompts": builtin_pack_path("lvcap")}
    judge = LocalJudge()
    reqs = PROTOCOL.build_requests(items, caps, judge=judge.name, judge_revision=judge.revision, **params)
    v = pl.from_arrow(run_judging(reqs, judge, cache_dir=tmp_path, protocol=PROTOCOL, protocol_params=params,
                                  progress=False, keep_intermediate=True))
    assert v.select("step", "parse_status", "attempt").to_dicts() == [
        {"step": "extract", "parse_status": 0, "attempt": 0}, {"step": "event_match", "parse_status": 0, "attempt": 0}]
    m = compute_metrics(v, items=pl.from_arrow(items), n_resamples=0, **params)
    head = m.filter((pl.col("bucket") == "all") & (pl.col("metric") == "S_e")).row(0, named=True)
    assert head["value"] == pytest.approx(100.0) and head["event_scoring"] == "paper"
