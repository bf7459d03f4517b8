"""VDC conformance: every case of every vdc oracle file (vdc*oracle*.jsonl; the official
rese1f/aurora@2bf68d5 post_eval/process_vdc_result.py, run once per kind on scripted replies) through the production
path, in official mode:

the case's QA pairs written in the release layout (one `<kind>.jsonl` per kind, one {video_id: [QA pairs]} object
per line, an id listed on several lines of the real file written on as many lines) -> the `vdc` dataset kind -> the
case's captions (one per video, its prompt id naming its kind) -> capeval.engine.api.judge with the replay judge
(answer step = the scripted `answer_reply`, score step = the raw `judge_reply`) -> the protocol's metrics.

Compared with the official outcome: per video (status counted / dropped_zero / skipped_error / not_in_qa_file,
tp_score, tp_acc), per kind (tp_score, tp_acc, n_counted, or the official ZeroDivisionError as a null with its
reason), the across-kinds VDCscore where the case has it, and lmms-eval's port (per video and per kind, or the error
that aborts its run). The same run also goes through an ITEMS table file and through `capeval judge`.

The case's `python` field names the interpreter of the official run: `ast.literal_eval` accepts a reply that starts
with a space or a tab only from Python 3.10 (bpo-41887; capeval requires >= 3.11). A case recorded under an
interpreter that read such a reply differently from this one cannot be compared on the videos that hold one; those
videos and the aggregates they enter are reported as not comparable (a warning), every other figure is compared."""

from __future__ import annotations

import ast
import json
import math
import sys
import warnings
from pathlib import Path

import polars as pl
import pyarrow as pa
import pytest

from capeval.engine.api import judge as api_judge
from capeval.engine.datasets.registry import load as load_dataset
from capeval.engine.registry import lookup
from capeval.engine.schemas import CAPTIONS, conform


def _fidelity_conftest():
    """tests/fidelity/conftest.py by path (tests/ is not a package, so no relative import)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("_fidelity_conftest_vdc", Path(__file__).with_name("conftest.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_CONF = _fidelity_conftest()
PACK_DIR, oracle_cases = _CONF.PACK_DIR, _CONF.oracle_cases
#: the released QA files (read for the earlier lines of an id listed twice; the case holds the last one's pairs)
RELEASE_DIR = _CONF.ROOT.parent / "shared" / "data" / "vdc"

CASES = oracle_cases("vdc_oracle.jsonl")
KINDS = ("short", "detailed", "background", "main_object", "camera")
TOL = 1e-9


# -- the case as files -------------------------------------------------------------------------------------------

def _release(case: dict, folder: Path) -> Path:
    """One `<kind>.jsonl` per kind of the case (only those): each video of the QA file once, with its pairs; a video
    whose id sits on several lines of the real file is written on as many lines (the earlier ones from the real
    file, or a decoy with other questions when it is absent), the case's pairs last. The videos are written in the
    REVERSE of the case's run order: the QA file's order is not the caption log's (the official means add the kept
    videos in the caption log's order, which the captions table keeps)."""
    folder.mkdir(parents=True, exist_ok=True)
    lines: dict[str, list[str]] = {k: [] for k in KINDS}
    written: set[tuple[str, str]] = set()
    for video in reversed(case["videos"]):
        kind, vid = video["kind"], video["video_id"]
        if not video["in_qa_file"] or (kind, vid) in written:
            continue
        written.add((kind, vid))
        for earlier in video["qa_file_lines"][:-1]:
            lines[kind].append(_earlier_line(kind, vid, earlier, video))
        lines[kind].append(json.dumps({vid: [{"question": q["question"], "answer": q["answer"], "category": ""}
                                             for q in video["qa"]]}, ensure_ascii=False))
    for kind in _kinds_of(case):
        (folder / f"{kind}.jsonl").write_text("".join(line + "\n" for line in lines[kind]), encoding="utf-8")
    return folder


def _earlier_line(kind: str, vid: str, line_no: int, video: dict) -> str:
    path = RELEASE_DIR / f"{kind}.jsonl"
    if path.is_file():
        lines = path.read_text(encoding="utf-8").splitlines()
        if line_no < len(lines) and list(json.loads(lines[line_no])) == [vid]:
            return lines[line_no]
    return json.dumps({vid: [{"question": f"{q['question']} (an earlier line)", "answer": q["answer"],
                              "category": ""} for q in video["qa"]]}, ensure_ascii=False)


def _captions(case: dict) -> pa.Table:
    """One caption per video of the case, its prompt id naming its kind (judged on that kind's questions only)."""
    videos = case["videos"]
    n = len(videos)
    return conform(pa.table({"caption_key": [f"oracle-{i}" for i in range(n)], "captioner": ["oracle"] * n,
                             "prompt_id": [f"vdc_{v['kind']}" for v in videos], "frame_spec": ["uniform:8"] * n,
                             "video_id": [v["video_id"] for v in videos],
                             "text": [v["prediction"] for v in videos]}), CAPTIONS)


def _pairs_of_items(case: dict, items: pa.Table) -> dict[tuple[str, str], list[dict]]:
    """(kind, video_id) -> the loaded items of that video in question order, checked against the case's pairs."""
    by_video: dict[tuple[str, str], list[dict]] = {}
    for row in items.to_pylist():
        by_video.setdefault((row["task"], row["video_id"]), []).append(row)
    for rows in by_video.values():
        rows.sort(key=lambda r: json.loads(r["extra"])["qa_index"])
    for video in case["videos"]:
        key = (video["kind"], video["video_id"])
        if not video["in_qa_file"]:
            assert key not in by_video, key
            continue
        got = [(r["annotation"], r["answer"]) for r in by_video[key]]
        assert got == [(q["question"], q["answer"]) for q in video["qa"]], key  # the last line of an id wins
    return by_video


def _replies(case: dict, by_video: dict) -> list[dict]:
    out = []
    for video in case["videos"]:
        for qa, item in zip(video["qa"], by_video.get((video["kind"], video["video_id"]), [])):
            out += [{"item_id": item["item_id"], "step": "answer", "text": qa["answer_reply"]},
                    {"item_id": item["item_id"], "step": "score", "text": qa["judge_reply"]}]
    return out


def _params() -> dict:
    return {"mode": "official", "prompts": str(PACK_DIR / "vdc.toml")}


def _run(case: dict, tmp_path: Path, items_source: str = "release"):
    release = _release(case, tmp_path / "release")
    items = load_dataset("vdc", {"path": str(release)}, base_dir=tmp_path, out_dir=tmp_path / "out").items
    by_video = _pairs_of_items(case, items)
    source = items
    if items_source == "table":
        source = tmp_path / "items.parquet"
        import pyarrow.parquet as pq

        pq.write_table(items, source)
    result = api_judge("vdc", source, _captions(case), judge="replay",
                       judge_options={"replies": _replies(case, by_video)}, params=_params(),
                       cache=tmp_path / f"cache-{items_source}", n_resamples=0)
    return items, by_video, result


# -- expected values -----------------------------------------------------------------------------------------------

def _num(x) -> float | None:
    return None if x is None else float(x)  # "nan" / "inf" are the oracle's non-finite numbers


def _same(got, expected, tol: float = TOL) -> bool:
    if expected is None:
        return got is None
    e = _num(expected)
    if got is None:
        return False
    g = float(got)
    if math.isnan(e):
        return math.isnan(g)
    if math.isinf(e):
        return g == e
    return abs(g - e) <= tol


def _blank_led(text: str) -> bool:
    """A reply whose literal_eval outcome depends on the interpreter (bpo-41887: leading spaces and tabs)."""
    return text[:1] in (" ", "\t")


def _here_accepts_blank_lead() -> bool:
    try:
        ast.literal_eval(" {'pred': 'yes', 'score': 1}")
        return True
    except SyntaxError:
        return False


def _case_accepts_blank_lead(case: dict) -> bool | None:
    """Whether the case's interpreter accepted a reply led by a space or tab: read from the case's own records where
    it sent one, else from its version (accepted since 3.10; 3.9 maintenance releases differ), else unknown."""
    for video, official in zip(case["videos"], case["official_per_video"]):
        for qa, rec in zip(video["qa"], official.get("qa", [])):
            if rec.get("sent") and _blank_led(qa["judge_reply"]) and rec.get("parse") in ("ok", "error"):
                if rec["parse"] == "ok":
                    return True
                if rec.get("parse_error", "").startswith(("SyntaxError", "IndentationError")):
                    return False
    try:
        version = tuple(int(x) for x in str(case.get("python", "")).split(".")[:2])
    except ValueError:
        return None
    if len(version) < 2:
        return None
    return True if version >= (3, 10) else False if version < (3, 9) else None


def _incomparable(case: dict) -> set[tuple[str, str]]:
    """(kind, video_id) of the videos whose official outcome depends on an interpreter rule this one reads
    differently (see the module docstring); empty for a case recorded under an equivalent interpreter."""
    if _case_accepts_blank_lead(case) == _here_accepts_blank_lead():
        return set()
    out = {(v["kind"], v["video_id"]) for v in case["videos"] if any(_blank_led(q["judge_reply"]) for q in v["qa"])}
    if out:
        warnings.warn(f"case {case['case_id']}: recorded under Python {case.get('python')}, whose ast.literal_eval "
                      f"reads replies led by a space or tab differently from Python {sys.version.split()[0]}: "
                      f"{len(out)} video(s) and the aggregates they enter are not compared")
    return out


def _kinds_of(case: dict) -> list[str]:
    seen = []
    for v in case["videos"]:
        if v["kind"] not in seen:
            seen.append(v["kind"])
    return seen


# -- capeval's outcome ---------------------------------------------------------------------------------------------

def _per_video(result, items: pa.Table, captions: pa.Table) -> tuple[pl.DataFrame, pl.DataFrame]:
    from capeval.engine.protocols.vdc.metrics import lmms_eval_per_video, official_per_video

    verdicts, item_frame = result.verdicts, pl.from_arrow(items)
    return (official_per_video(verdicts, item_frame, pl.from_arrow(captions)),
            lmms_eval_per_video(verdicts, item_frame))


def _rows_of(frame: pl.DataFrame, kind: str, video_id: str) -> list[dict]:
    return frame.filter((pl.col("task") == kind) & (pl.col("video_id") == video_id)).to_dicts()


def _metric(metrics: pl.DataFrame, task: str, metric: str, reading: str, prompt_id: str | None = None) -> dict:
    rows = metrics.filter((pl.col("task") == task) & (pl.col("metric") == metric) & (pl.col("reading") == reading)
                          & (pl.col("captioner") == "oracle"))
    if prompt_id is not None:
        rows = rows.filter(pl.col("prompt_id") == prompt_id)
    assert rows.height == 1, (task, metric, reading, rows)
    return rows.row(0, named=True)


def _assert_value(row: dict, expected, scale: float = 1.0) -> None:
    """The metric equals the official number; a nan one may be null (the engine's explain_nulls makes NaN null) but
    then its reason must say it is the official nan."""
    e = _num(expected)
    if e is not None and math.isnan(e):
        assert row["value"] is None or math.isnan(row["value"]), row
        assert "nan" in (row["reason"] or ""), row
        return
    assert row["value"] is not None, row
    assert _same(row["value"], e * scale, TOL * max(scale, 1.0)), (row["value"], e * scale, row)


def _assert_question_verdicts(case: dict, by_video: dict, verdicts: pl.DataFrame, skip: set) -> None:
    """Per question, where the official scoring loop ran: the verdict is YES exactly when qa['pred'] == 'yes'; a
    reply the official parse rejected has no verdict."""
    verdict_of = {r["item_id"]: r["verdict"] for r in verdicts.filter(pl.col("step") == "score").iter_rows(named=True)}
    for video, official in zip(case["videos"], case["official_per_video"]):
        key = (video["kind"], video["video_id"])
        if key in skip or not video["in_qa_file"]:
            continue
        for n, (item, rec) in enumerate(zip(by_video[key], official.get("qa", []))):
            got = verdict_of.get(item["item_id"])
            if "is_yes" in rec:
                assert got == (1 if rec["is_yes"] else 0), (key, n, rec, got)
            elif rec.get("sent") and rec.get("parse") == "error":
                assert got is not None and got < 0, (key, n, rec, got)


def _masked(text: str) -> str:
    import re

    return re.sub(r"0x[0-9a-fA-F]+", "0x...", text)


@pytest.mark.parametrize("case", CASES, ids=[c["case_id"] for c in CASES])
def test_official_mode_reproduces_the_official_run(case, tmp_path):
    skip = _incomparable(case)
    items, by_video, result = _run(case, tmp_path)
    metrics, captions = result.metrics, _captions(case)
    assert set(metrics["mode"]) == {"official"}
    _assert_question_verdicts(case, by_video, result.verdicts, skip)
    official_pv, lmms_pv = _per_video(result, items, captions)

    # per video, in the official run's order within each kind
    seen: dict[tuple[str, str], int] = {}
    for official in case["official_per_video"]:
        key = (official["kind"], official["video_id"])
        k = seen[key] = seen.get(key, -1) + 1
        if key in skip:
            continue
        rows = _rows_of(official_pv, *key)
        assert len(rows) > k, (key, rows)
        got = rows[k]
        assert got["status"] == official["status"], (key, got, official)
        if official["status"] in ("counted", "dropped_zero"):
            assert _same(got["tp_score"], official["tp_score"]) and _same(got["tp_acc"], official["tp_acc"]), \
                (key, got, official)
        elif official["status"] == "skipped_error":
            assert got["tp_score"] is None and got["tp_acc"] is None, got
            assert _masked(official["error"]) in _masked(got["error"] or ""), (key, got["error"], official["error"])
    for kind, video_id in seen:  # no video capeval reports that the official run does not
        assert len(_rows_of(official_pv, kind, video_id)) == seen[(kind, video_id)] + 1, (kind, video_id)

    # per kind: the official script's printed overall (or its crash)
    for kind, official in case["official_per_kind"].items():
        if any(k == kind for k, _ in skip):
            continue
        score = _metric(metrics, kind, "Score", "official", f"vdc_{kind}")
        acc = _metric(metrics, kind, "Acc", "official", f"vdc_{kind}")
        if official["status"] == "error":
            for row in (score, acc):
                assert row["value"] is None, row
                assert official["error"].split(":")[0] in (row["reason"] or ""), row
            continue
        _assert_value(score, official["tp_score"])
        _assert_value(acc, official["tp_acc"], 100.0)
        assert score["n"] == acc["n"] == official["n_counted"], (score, official)
        assert [score["printed"], acc["printed"]] == official["printed"], (score["printed"], acc["printed"])

    # across the five kinds: the derived VDCscore (mean of the per-kind accuracies, %) and the mean score
    across = case.get("across_kinds")
    if across and not skip:
        vdcscore = _metric(metrics, "all", "VDCscore", "official")
        assert _same(vdcscore["value"], across["vdcscore_mean_acc_pct"], 1e-9), vdcscore
        assert "derived" in (vdcscore["note"] or ""), vdcscore
        mean_score = _metric(metrics, "all", "Score", "official")
        assert _same(mean_score["value"], across["mean_score"], 1e-9), mean_score

    # lmms-eval's port on the same replies: per video, then per kind (or the error that aborts its run)
    port = case["lmms_eval_port"]
    seen = {}
    for official in port["per_video"]:
        key = (official["kind"], official["video_id"])
        k = seen[key] = seen.get(key, -1) + 1
        if key in skip:
            continue
        rows = _rows_of(lmms_pv, *key)
        assert len(rows) > k, (key, rows)
        got = rows[k]
        assert got["status"] == official["status"], (key, got, official)
        if official["status"] == "ok":
            assert _same(got["score"], official["score"]) and _same(got["acc"], official["acc"]), (key, got, official)
            assert got["pairs_kept"] == official["pairs_kept"], (key, got, official)
        else:
            logged = [m.split(f"{official['video_id']}: ", 1)[-1] for m in official["logged"]]
            assert any(_masked(m) in _masked(got["error"] or "") for m in logged), (key, got["error"], logged)
    for kind, official in port["per_kind"].items():
        if any(k == kind for k, _ in skip):
            continue
        score = _metric(metrics, kind, "Score", "lmms_eval", f"vdc_{kind}")
        acc = _metric(metrics, kind, "Acc", "lmms_eval", f"vdc_{kind}")
        if official["status"] == "error":
            for row in (score, acc):
                assert row["value"] is None and official["error"] in (row["reason"] or ""), row
            continue
        _assert_value(score, official["llmms_eval_score"])
        _assert_value(acc, official["llmms_eval_acc"], 100.0)


@pytest.mark.parametrize("case", CASES, ids=[c["case_id"] for c in CASES])
def test_an_items_table_gives_the_same_metrics_as_the_release_files(case, tmp_path):
    """The loaded items written as an ITEMS table file and judged from it: the same metrics, row for row."""
    _, _, release = _run(case, tmp_path / "release")
    _, _, table = _run(case, tmp_path / "table", items_source="table")
    columns = [c for c in release.metrics.columns if c not in ("ci_low", "ci_high")]
    assert release.metrics.select(columns).equals(table.metrics.select(columns), null_equal=True)


@pytest.mark.parametrize("case", CASES, ids=[c["case_id"] for c in CASES])
def test_capeval_judge_on_the_release_folder_gives_the_same_metrics(case, tmp_path):
    """`capeval judge --dataset vdc --items FOLDER --captions FILE --judge replay` (the command line, files only):
    the same metric rows as the API run, so the per-kind figures above hold for the command too."""
    from capeval.engine.cli import main

    items, by_video, api = _run(case, tmp_path / "api")
    release = _release(case, tmp_path / "cli" / "release")
    captions = tmp_path / "cli" / "captions.jsonl"
    captions.write_text("".join(json.dumps({"video_id": r["video_id"], "caption": r["text"], "captioner": r["captioner"],
                                            "prompt_id": r["prompt_id"], "frame_spec": r["frame_spec"]},
                                           ensure_ascii=False) + "\n" for r in _captions(case).to_pylist()),
                        encoding="utf-8")
    replies = tmp_path / "cli" / "replies.jsonl"
    replies.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in _replies(case, by_video)),
                       encoding="utf-8")
    out, metrics_csv = tmp_path / "cli" / "verdicts.parquet", tmp_path / "cli" / "metrics.csv"
    code = main(["judge", "--protocol", "vdc", "--dataset", "vdc", "--items", str(release), "--captions", str(captions),
                 "--judge", "replay", "--judge-option", f"replies={replies}", "--mode", "official",
                 "--prompts", str(PACK_DIR / "vdc.toml"), "--cache", str(tmp_path / "cli" / "cache"),
                 "--out", str(out), "--metrics", str(metrics_csv), "--resamples", "0", "--no-progress",
                 "--max-failure-share", "1"])  # the official reading keeps replies it cannot read, by design
    assert code == 0
    cli = pl.read_csv(metrics_csv, infer_schema_length=None)
    keys = ["captioner", "prompt_id", "task", "reading", "metric"]
    got = {tuple(r[k] for k in keys): r for r in cli.iter_rows(named=True)}
    for row in api.metrics.iter_rows(named=True):
        key = tuple(row[k] for k in keys)
        assert key in got, key
        assert _same(got[key]["value"], row["value"]) or (row["value"] is None and got[key]["value"] is None), \
            (key, got[key]["value"], row["value"])
        assert got[key]["n"] == row["n"], key
