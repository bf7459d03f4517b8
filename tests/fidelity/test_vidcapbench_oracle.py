"""VidCapBench conformance: every oracle case of the official eval.py (vidcapbench_oracle.jsonl) through the
production path -- the released QA-file layout -> load_vidcapbench -> build_requests -> replay judge (answer step =
`pred`, judge step = `judge_reply`) -> run_judging -> compute_metrics -- in official mode (= `official`, 1e-6) and
in strict mode (= `json_field_parser`: the same aggregation fed with the reply's JSON `score` field)."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import polars as pl
import pyarrow as pa
import pytest

from capeval.adapters.replay import ReplayJudge
from capeval.engine.protocols.vidcapbench.release import load_vidcapbench
from capeval.engine.judging.runner import run_judging
from capeval.engine.protocols.vidcapbench.metrics import compute_metrics
from capeval.engine.registry import lookup
from capeval.engine.schemas import CAPTIONS, conform


def _fidelity_conftest():
    """tests/fidelity/conftest.py by path (tests/ is not a package, so no relative import)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("_fidelity_conftest", Path(__file__).with_name("conftest.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


PACK_DIR, oracle_cases = _fidelity_conftest().PACK_DIR, _fidelity_conftest().oracle_cases

CASES = oracle_cases("vidcapbench_oracle.jsonl")
LETTER_OF_CODE = {3: "A", 2: "B", 1: "C", 0: "D"}
SECTIONS = ("overall", "aesthetics", "content", "motion", "physics")
METRIC_OF = {"accuracy": "Acc", "precision": "Pre", "coverage": "Cov", "conciseness": "Con"}


def item_ids(case: dict) -> list[str]:
    """The item id of each QA pair of the case, in order: "<video_dir>#<position in its video's QA_pairs>"."""
    seen: dict[str, int] = {}
    out = []
    for qa in case["qa"]:
        k = seen.get(qa["video_dir"], 0)
        seen[qa["video_dir"]] = k + 1
        out.append(f"{qa['video_dir']}#{k}")
    return out


def _qa_file(case: dict, path: Path) -> Path:
    """The case's QA pairs written in the released layout (one line per video_dir with its QA_pairs, no ids: the
    official script needs none, and duplicated questions stay distinct pairs)."""
    by_video: dict[str, list] = {}
    for qa in case["qa"]:
        by_video.setdefault(qa["video_dir"], []).append(
            {"question": qa["question"], "answer": qa["answer"], "sub_category": qa["sub_category"]})
    path.write_text("".join(json.dumps({"video_dir": v, "QA_pairs": p}) + "\n" for v, p in by_video.items()))
    return path


def _captions(case: dict) -> pa.Table:
    caps = case["captions"]
    table = pa.table({"caption_key": [f"cap-{c['video_dir']}" for c in caps], "captioner": ["oracle"] * len(caps),
                      "prompt_id": ["p"] * len(caps), "frame_spec": ["f"] * len(caps),
                      "video_id": [c["video_dir"] for c in caps], "text": [c["caption"] for c in caps],
                      # the captioner's own count (whitespace words) differs from the given T5 counts on purpose
                      "n_tokens": pa.array([len(c["caption"].split()) for c in caps], pa.int32())})
    return conform(table, CAPTIONS).append_column("t5_tokens", pa.array([c["t5_tokens"] for c in caps], pa.int32()))


def _replies(case: dict) -> list[dict]:
    out = []
    for qa, item in zip(case["qa"], item_ids(case)):
        out += [{"item_id": item, "step": "answer", "attempt": 0, "text": qa["pred"]},
                {"item_id": item, "step": "score", "attempt": 0, "text": qa["judge_reply"]}]
    return out


def _run(case: dict, tmp_path: Path, **params):
    items = load_vidcapbench(_qa_file(case, tmp_path / "qa.jsonl"))
    captions = _captions(case)
    judge = ReplayJudge(_replies(case))
    protocol = lookup("protocol", "vidcapbench")
    requests = protocol.build_requests(items, captions, judge=judge.name, judge_revision=judge.revision, **params)
    verdicts = run_judging(requests, judge, cache_dir=tmp_path / f"cache-{params.get('mode')}", protocol=protocol,
                           protocol_params=params, progress=False)  # the run's params select the judging policy
    metrics = compute_metrics(pl.from_arrow(verdicts), items=pl.from_arrow(items), captions=pl.from_arrow(captions),
                              n_resamples=0, **params)
    return requests, pl.from_arrow(verdicts), metrics


def _value(metrics: pl.DataFrame, section: str, metric: str) -> dict:
    dim = "all" if section == "overall" else section
    rows = metrics.filter((pl.col("dimension") == dim) & (pl.col("metric") == metric)
                          & (pl.col("consistency") == "all"))
    assert rows.height == 1, rows
    return rows.row(0, named=True)


def _letters(case: dict, verdicts: pl.DataFrame) -> list[str | None]:
    by_item = {r["item_id"]: r["verdict"] for r in verdicts.iter_rows(named=True)}
    return [LETTER_OF_CODE.get(by_item.get(item)) for item in item_ids(case)]  # a pair never judged: None


def _assert_zero_denominator(metrics: pl.DataFrame, row: dict) -> None:
    """Acc, Cov and Con divide by A+B+C+D (`n`); Pre by A+B+D, which is zero when Cov (= (A+B+D)/n) is 0 or n is."""
    if row["metric"] != "Pre":
        assert row["n"] == 0, row
        return
    cov = metrics.filter((pl.col("dimension") == row["dimension"]) & (pl.col("metric") == "Cov")
                         & (pl.col("consistency") == row["consistency"]))
    assert cov.height == 1 and (cov["n"][0] == 0 or cov["value"][0] == 0), (row, cov)


def _check(expected: dict, metrics: pl.DataFrame, verdicts: pl.DataFrame, mode: str) -> None:
    if expected["status"] == "error":
        # The official script crashes here; capeval gives null metrics that say why, never a traceback.
        if mode == "official":
            nulls = metrics.filter(pl.col("value").is_null())
            assert nulls.height > 0 and nulls["reason"].is_not_null().all(), metrics
            kind = expected["error"].split(":")[0]
            reasons = " | ".join(nulls["reason"].unique().to_list())
            assert {"ZeroDivisionError": "ZeroDivisionError", "KeyError": "no content",
                    "ValueError": "Category Wrong"}.get(kind, "") in reasons, reasons
            if kind == "ZeroDivisionError":  # each such null is a metric whose own denominator is zero
                for row in nulls.filter(pl.col("reason").str.contains("ZeroDivision")).iter_rows(named=True):
                    _assert_zero_denominator(metrics, row)
        return
    for section in SECTIONS:
        exp = expected[section]
        for key, metric in METRIC_OF.items():
            row = _value(metrics, section, metric)
            assert row["value"] == pytest.approx(exp[key], abs=1e-6), (section, metric, row)
            assert row["n"] == exp["A"] + exp["B"] + exp["C"] + exp["D"], (section, metric)
        assert _value(metrics, section, "Con")["avg_tokens"] == pytest.approx(expected["avg_token_num"], abs=1e-9)
        assert _value(metrics, section, "Con")["tokens_source"].startswith("t5_tokens")


@pytest.mark.parametrize("case", CASES, ids=[c["case_id"] for c in CASES])
def test_official_mode_reproduces_the_official_script(case, tmp_path):
    params = {"mode": "official", "prompts": str(PACK_DIR / "vidcapbench.toml")}
    requests, verdicts, metrics = _run(case, tmp_path, **params)
    assert set(metrics["mode"]) == {"official"}
    if "correctness_letters" in case["official"]:
        assert _letters(case, verdicts) == case["official"]["correctness_letters"]
    for qa, letter in zip(case["qa"], _letters(case, verdicts)):  # per pair, where the official chain got that far
        if qa["official_correctness"] is not None:
            assert letter == qa["official_correctness"], qa
    _check(case["official"], metrics, verdicts, "official")


@pytest.mark.parametrize("case", CASES, ids=[c["case_id"] for c in CASES])
def test_strict_mode_reads_the_json_score_field(case, tmp_path):
    requests, verdicts, metrics = _run(case, tmp_path, mode="strict")
    assert set(metrics["mode"]) == {"strict"}
    for qa, item in zip(case["qa"], item_ids(case)):
        row = verdicts.filter(pl.col("item_id") == item).row(0, named=True)
        expected = None if qa["json_field_score"] is None else qa["json_field_score"] + 1
        assert (None if row["verdict"] < 0 else row["verdict"]) == expected, (qa["question_id"], row)
    # json_field_parser leaves unscored pairs out, as the official aggregation does: paper denominators match it
    (tmp_path / "paper").mkdir()
    _, _, paper = _run(case, tmp_path / "paper", mode="strict", paper_compatible=True)
    _check(case["json_field_parser"], paper, verdicts, "strict")
    if case["json_field_parser"]["status"] == "ok":
        # by default strict mode keeps them in Acc and Cov as unanswered questions (Pre unchanged)
        overall = case["json_field_parser"]["overall"]
        counted = overall["A"] + overall["B"] + overall["C"] + overall["D"]
        n_nv = sum(qa["json_field_score"] is None for qa in case["qa"])
        acc = _value(metrics, "overall", "Acc")
        assert acc["n_no_verdict"] == n_nv
        assert acc["value"] == pytest.approx(overall["accuracy"] * counted / (counted + n_nv), abs=1e-6)
        assert _value(metrics, "overall", "Pre")["value"] == pytest.approx(overall["precision"], abs=1e-6)


@pytest.mark.parametrize("case", CASES[:1], ids=[c["case_id"] for c in CASES[:1]])
def test_official_requests_are_the_official_messages(case, tmp_path):
    """The rendered requests equal the official templates filled with the raw fields, one user message each, no
    JSON schema, no temperature, and the same content for every judge seed."""
    pack = tomllib.loads((PACK_DIR / "vidcapbench.toml").read_text(encoding="utf-8"))
    template = {p["id"]: p["user"] for p in pack["prompt"]}
    params = {"mode": "official", "prompts": str(PACK_DIR / "vidcapbench.toml")}
    items = load_vidcapbench(_qa_file(case, tmp_path / "qa.jsonl"))
    protocol = lookup("protocol", "vidcapbench")
    judge = ReplayJudge(_replies(case))
    reqs = protocol.build_requests(items, _captions(case), judge=judge.name, judge_revision=judge.revision,
                                   seeds=(0, 1), **params).to_pylist()
    caption_of = {c["video_dir"]: c["caption"] for c in case["captions"]}
    qa_of = dict(zip(item_ids(case), case["qa"]))
    for r in reqs:
        qa = qa_of[r["item_id"]]
        assert r["system"] is None and r["json_schema"] is None and r["choices"] is None
        assert r["user"] == template["judge/answer"].format(caption=caption_of[qa["video_dir"]],
                                                            question=qa["question"])
        assert json.loads(r["context"])["temperature"] is None
    by_trial = {t: sorted(r["user"] for r in reqs if r["trial"] == t) for t in (0, 1)}
    assert by_trial[0] == by_trial[1]
    # the score step: official template with the answer step's reply inserted unparsed
    verdicts = run_judging(protocol.build_requests(items, _captions(case), judge=judge.name,
                                                   judge_revision=judge.revision, **params),
                           judge, cache_dir=tmp_path / "c", protocol=protocol, protocol_params=params, progress=False,
                           keep_intermediate=True)
    assert verdicts.num_rows == 2 * len(case["qa"])
    strict = protocol.build_requests(items, _captions(case), judge=judge.name, judge_revision=judge.revision)
    assert not set(strict.column("request_key").to_pylist()) & {r["request_key"] for r in reqs}
