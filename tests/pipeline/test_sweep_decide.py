"""`[options] decide`: a sweep judged in rounds of videos stops each comparison when its confidence sequence decides
it, commits the systems it stopped as `pending` with the videos judged so far, says which decisions were early and
how many requests were saved (decide.json), replays the same decisions from the caches, and a run without `decide`
finishes the pending cells.

Real components: `run_sweep` in-process, CapQuiz items from a JSONL file and its strict prompts and parser,
captions from `[[captions]]` files (no captioning), the judgment cache; the judge is a registered backend that reads
the answer off the caption by a rule ("the <shape> is <colour>"), so each system's verdicts are known. Three
systems on 40 videos of 3 colour questions each: `good` names every colour right (the baseline), `copy` is the same
text under another label (identical verdicts: equivalent), `wrong` names a wrong colour for every shape."""

from __future__ import annotations

import json
import re

import polars as pl
import pytest

from capeval.adapters.base import JudgeResponse
from capeval.engine.registry import register
from capeval.engine.sweep.config import load_sweep
from capeval.engine.sweep.runner import run_sweep

N_VIDEOS = 40
COLOURS = ["red", "green", "blue", "yellow"]
SHAPES = ["circle", "square", "triangle"]


@register("judge", "colour-reader")
class ColourReader:
    """Answers a CapQuiz colour question with the option the caption names for its shape, else "cannot"."""

    name = "colour-reader"
    revision = "test-rule-1"

    def __init__(self, **_params):
        pass

    def close(self) -> None:
        pass

    def judge(self, requests):
        out = []
        for r in requests:
            options, letters = json.loads(r.fields["options"]), list(r.choices)
            shape = r.fields["question"].rstrip("?").split()[-1]
            said = re.search(rf"{shape} is (\w+)", r.fields["caption"])
            pick = options.index(said.group(1)) if said and said.group(1) in options else len(options) - 1
            out.append(JudgeResponse(r.key, letters[pick]))
        return out


def _files(tmp_path):
    items, texts, lies_of = [], {}, {}
    for v in range(N_VIDEOS):
        said, lies = [], []
        for q, shape in enumerate(SHAPES):
            colour = COLOURS[(v + q) % len(COLOURS)]
            items.append({"item_id": f"v{v}/q{q}", "video_id": f"v{v}", "task": "color",
                          "annotation": f"What colour is the {shape}?", "options": COLOURS, "answer": colour,
                          "category": "color", "benchmark": "capquiz"})
            said.append(f"The {shape} is {colour}.")
            lies.append(f"The {shape} is {COLOURS[(v + q + 2) % len(COLOURS)]}.")
        # each video's caption is its own text (its requests have their own keys)
        texts[f"v{v}"], lies_of[f"v{v}"] = f"Clip {v}. " + " ".join(said), f"Clip {v}. " + " ".join(lies)
    (tmp_path / "items.jsonl").write_text("".join(json.dumps(i) + "\n" for i in items))
    for name, caption in (("good", lambda v: texts[v]), ("copy", lambda v: texts[v]),
                          ("wrong", lambda v: lies_of[v])):
        (tmp_path / f"{name}.jsonl").write_text("".join(json.dumps({"video_id": f"v{v}", "caption": caption(f"v{v}")})
                                                        + "\n" for v in range(N_VIDEOS)))


def _sweep(tmp_path, decide: bool):
    caps = "".join(f'\n[[captions]]\npath = "{tmp_path / n}.jsonl"\ncaptioner = "{n}"\n' for n in ("good", "copy",
                                                                                                   "wrong"))
    option = ('decide = { metric = "CapF1", baseline = "captioner=good", delta = 20.0, alpha = 0.05, '
              'rounds = 4, min_videos = 10 }\n') if decide else ""
    path = tmp_path / ("decide.toml" if decide else "full.toml")
    path.write_text(f"""name = "decide"
[[datasets]]
name = "quiz"
kind = "items"
path = "{tmp_path / 'items.jsonl'}"
{caps}
[[protocols]]
name = "capquiz"
[[judges]]
name = "colour-reader"
[options]
n_resamples = 20
{option}""")
    return load_sweep(path)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("decide")
    _files(tmp)
    out = tmp / "out"
    first = run_sweep(_sweep(tmp, True), out, progress=False, log=lambda m: None)
    record = json.loads((out / "decide.json").read_text())
    verdicts = {p.stem: pl.read_parquet(p) for p in (out / "verdicts").glob("*.parquet")}
    again = run_sweep(_sweep(tmp, True), out, progress=False, log=lambda m: None)
    finished = run_sweep(_sweep(tmp, False), out, progress=False, log=lambda m: None)
    full_verdicts = pl.concat([pl.read_parquet(p) for p in (out / "verdicts").glob("*.parquet")], how="diagonal")
    return {"first": first, "record": record, "verdicts": verdicts, "again": again, "finished": finished,
            "full_verdicts": full_verdicts, "out": out}


def _pair(record, captioner):
    return next(p for p in record["pairs"] if p["a"].startswith(f"captioner={captioner} "))


def test_pairs_stop_early_with_the_right_decisions(runs):
    record = runs["record"]
    assert len(record["pairs"]) == 2 and all(p["b"].startswith("captioner=good ") for p in record["pairs"])
    wrong = _pair(record, "wrong")
    assert wrong["status"] == "decided" and wrong["direction"] == "a < b" and wrong["early"]
    assert wrong["videos"] == 10 and wrong["ci_high"] < 0  # decided at the first look
    copy = _pair(record, "copy")
    assert copy["status"] == "equivalent" and copy["early"] and copy["videos"] < N_VIDEOS
    assert -20 < copy["ci_low"] <= 0 <= copy["ci_high"] < 20 and copy["diff"] == 0


def test_stopped_systems_are_pending_with_only_the_videos_judged(runs):
    first, record, verdicts = runs["first"], runs["record"], runs["verdicts"]
    status = dict(first.results.select("captioner", "cell_status").unique().iter_rows())
    assert status == {"good": "pending", "copy": "pending", "wrong": "pending"}
    videos = {v["captioner"][0] if "captioner" in v.columns else k: v["video_id"].n_unique()
              for k, v in verdicts.items()}
    assert sorted(videos.values()) == sorted([_pair(record, "wrong")["videos"], _pair(record, "copy")["videos"],
                                              _pair(record, "copy")["videos"]])
    # requests saved: the 3 items of every video not judged, per system
    judged_items = 3 * sum(videos.values())
    assert record["requests"]["first_step_total"] == 3 * 3 * N_VIDEOS
    assert record["requests"]["first_step_judged"] == judged_items
    assert record["requests"]["saved_share"] == pytest.approx(1 - judged_items / (9 * N_VIDEOS))
    assert first.judge_stats["sent"] + first.judge_stats["cached"] > 0


def test_run_json_and_report_summarise_the_decisions(runs):
    """run.json's sweep record of the adaptive run summarises decide.json (counts, early ones, requests saved,
    pending cells); the run without `decide` records none; the report's run record shows the last one's."""
    from capeval.engine.report.html import write_report
    from capeval.engine.runrecord import read_run_records

    sweeps = [r for r in read_run_records(runs["out"]) if r["command"] == "sweep"]
    first, last = sweeps[0], sweeps[-1]
    record = runs["record"]
    assert first["decide"]["metric"] == record["metric"] and first["decide"]["requests"] == record["requests"]
    assert first["decide"]["pairs"] == {"decided": 1, "equivalent": 1}
    assert first["decide"]["early"] == 2 and first["decide"]["pending_cells"] == 3
    assert "decide" not in last  # the run without decide
    assert "adaptive decisions" not in write_report(runs["out"]).read_text()  # the last run's record: none
    from types import SimpleNamespace

    from capeval.engine.report.html import _record_html

    shown = _record_html(SimpleNamespace(records=[first]))  # the report of the adaptive run itself
    assert "adaptive decisions" in shown and "first_step_judged" in shown


def test_a_rerun_with_decide_replays_the_decisions_from_the_caches(runs):
    again = runs["again"]
    assert again.judge_stats["sent"] == 0
    record = json.loads((runs["out"] / "decide.json").read_text())
    assert [(p["status"], p["videos"]) for p in record["pairs"]] == [(p["status"], p["videos"])
                                                                      for p in runs["record"]["pairs"]]


def test_a_run_without_decide_finishes_the_pending_cells(runs):
    finished, full = runs["finished"], runs["full_verdicts"]
    assert set(finished.results["cell_status"]) == {"complete"}
    assert full.group_by("cell_key").agg(pl.col("video_id").n_unique())["video_id"].to_list() == [N_VIDEOS] * 3
    # only what the first run left unjudged was asked; the copy's requests are the baseline's (the same keys)
    record = runs["record"]
    unjudged = 3 * (N_VIDEOS - _pair(record, "wrong")["videos"]) + 3 * (N_VIDEOS - _pair(record, "copy")["videos"])
    assert finished.judge_stats["sent"] == unjudged
    f1 = finished.results.filter((pl.col("metric") == "CapF1") & (pl.col("question_type") == "all")
                                 if "question_type" in finished.results.columns else pl.col("metric") == "CapF1")
    value = dict(f1.group_by("captioner").agg(pl.col("value").first()).iter_rows())
    assert value["wrong"] < value["good"] and value["copy"] == value["good"]  # the decisions were right
