"""A big `[[captions]]` cell is built in parts of whole videos, each when the judge reaches it (engine/sweep/
judge_stage.py JudgeStage.prepare), so its requests are never all held at once; its verdicts, metrics and keys are
those of the cell built whole."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from capeval.engine.judging.scheduler import JudgeScheduler
from capeval.engine.sweep import judge_stage
from capeval.engine.sweep.config import load_sweep
from capeval.engine.sweep.runner import run_sweep

from _sweeps import write_sweep


def _inputs(tmp_path: Path) -> tuple[Path, Path]:
    items, captions = tmp_path / "items.jsonl", tmp_path / "captions.jsonl"
    rows = []
    for v in range(9):  # 1-3 items per video; v7 has no caption; v8's first item has its own caption
        for q in range(1 + v % 3):
            rows.append({"item_id": f"v{v}/q{q}", "video_id": f"v{v}", "task": ["counting", "scene"][q % 2],
                         "annotation": f"Question {q} about video {v}?", "options": ["1", "2", "3", "4", "5"],
                         "answer": str(1 + (v + q) % 5), "category": "counting", "benchmark": "capquiz"})
    items.write_text("".join(json.dumps(r) + "\n" for r in rows[::-1]))  # videos not in id order
    caps = [{"video_id": f"v{v}", "caption": f"{v % 5 + 1} shapes move."} for v in range(9) if v != 7]
    caps.append({"video_id": "v8/q0", "caption": "3 shapes, its own caption."})
    captions.write_text("".join(json.dumps(c) + "\n" for c in caps))
    return items, captions


def _run(tmp_path: Path, out: str, overlap: bool) -> Path:
    items, captions = _inputs(tmp_path)
    path = write_sweep(tmp_path / f"{out}.toml", "parts", prompts=(), frames=(),
                       dataset={"name": "quiz", "kind": "items", "path": str(items)},
                       captioners=(), captions=[{"path": str(captions), "captioner": "given"}],
                       judges=[{"name": "local", "seeds": [0, 1]}], options={"n_resamples": 20, "overlap": overlap})
    run_sweep(load_sweep(path), tmp_path / out, progress=False, log=lambda m: None)
    return tmp_path / out


def _table(out: Path, store: str) -> pl.DataFrame:
    (segment,) = (out / store).glob("*.parquet")
    t = pl.read_parquet(segment)
    return t.drop([c for c in t.columns if c in ("latency_s",)])


@pytest.mark.parametrize("overlap", [False, True])
def test_a_captions_cell_built_in_parts_judges_as_the_whole_cell(tmp_path, monkeypatch, overlap):
    whole = _run(tmp_path, "whole", overlap)
    builds, at_start = [], []
    build = judge_stage.JudgeStage.build
    run = JudgeScheduler.run

    def counted(self, cell, protocol, judge, items, captions, **extra):
        builds.append(items.num_rows)
        return build(self, cell, protocol, judge, items, captions, **extra)

    def started(self, source=None, **kw):
        at_start.append(len(builds))
        return run(self, source, **kw)

    monkeypatch.setattr(judge_stage, "PART_ITEMS", 4)
    monkeypatch.setattr(judge_stage.JudgeStage, "build", counted)
    monkeypatch.setattr(JudgeScheduler, "run", started)
    parts = _run(tmp_path, "parts", overlap)
    assert len(builds) >= 4 and max(builds) <= 4 + 2  # whole videos: a part stops at the video that reaches 4
    assert sum(builds) == 18
    if not overlap:  # added before the loop runs; built only as the loop reaches them
        assert at_start == [0]
    assert (whole / "verdicts").glob("*.parquet").__next__().name == (parts / "verdicts").glob("*.parquet").__next__().name
    for store in ("verdicts", "metrics"):
        assert _table(parts, store).equals(_table(whole, store)), store


@pytest.mark.parametrize("overlap", [False, True])
def test_once_every_request_is_built_the_run_lets_go_of_the_item_columns_only_requests_read(tmp_path, monkeypatch,
                                                                                          overlap):
    """When the cell ends, the run's item table (and the cell's) keeps the ids and the columns the metrics read, and
    the table with the question, its options and answer is gone from memory (nothing else holds it: the checks'
    read views and pair plan let go of it too); the verdicts and metrics are those of a run that kept it."""
    import gc
    import weakref

    kept = _run(tmp_path, "kept", overlap)
    seen = {}
    init, finish = judge_stage.JudgeStage.__init__, judge_stage.JudgeStage.finish

    def watched_init(self, run, *args, **kw):
        init(self, run, *args, **kw)
        seen["table"] = weakref.ref(run.datasets["quiz"].items)

    def watched_finish(self, prep, verdicts, summary):
        gc.collect()
        seen["alive"] = seen["table"]() is not None
        seen["run_columns"] = self.run.datasets["quiz"].items.column_names
        seen["cell_columns"] = prep.items.column_names
        return finish(self, prep, verdicts, summary)

    monkeypatch.setattr(judge_stage, "PART_ITEMS", 4)
    monkeypatch.setattr(judge_stage.JudgeStage, "__init__", watched_init)
    monkeypatch.setattr(judge_stage.JudgeStage, "finish", watched_finish)
    narrowed = _run(tmp_path, "narrowed", overlap)
    assert seen["alive"] is False
    for columns in (seen["run_columns"], seen["cell_columns"]):
        assert {"task", "item_id", "video_id", "category"} <= set(columns)
        assert not {"annotation", "options", "answer"} & set(columns)
    for store in ("verdicts", "metrics"):
        assert _table(narrowed, store).equals(_table(kept, store)), store


@pytest.mark.parametrize("overlap", [False, True])
def test_a_datasets_last_cell_to_build_lets_go_of_its_questions_part_by_part(tmp_path, monkeypatch, overlap):
    """The only cell of its dataset (the last to build) hands each part its own items and the run lets go of the
    whole table at once: while the parts are built, the table with every question, option and answer is gone from
    memory, the run's table has the ids and metric columns only, and each part's items go once that part is built;
    the verdicts and metrics are those of a run that kept the table to the end."""
    import gc
    import weakref

    kept = _run(tmp_path, "kept", overlap)
    seen = {"parts": [], "alive_parts": [], "table_alive": [], "run_columns": []}
    init, build = judge_stage.JudgeStage.__init__, judge_stage.JudgeStage.build

    def watched_init(self, run, *args, **kw):
        init(self, run, *args, **kw)
        seen["table"] = weakref.ref(run.datasets["quiz"].items)

    def watched_build(self, cell, protocol, judge, items, captions, **extra):
        gc.collect()
        seen["alive_parts"].append(sum(part() is not None for part in seen["parts"]))
        seen["table_alive"].append(seen["table"]() is not None)
        seen["run_columns"].append(set(self.run.datasets["quiz"].items.column_names))
        seen["parts"].append(weakref.ref(items))
        return build(self, cell, protocol, judge, items, captions, **extra)

    monkeypatch.setattr(judge_stage, "PART_ITEMS", 4)
    monkeypatch.setattr(judge_stage.JudgeStage, "__init__", watched_init)
    monkeypatch.setattr(judge_stage.JudgeStage, "build", watched_build)
    narrowed = _run(tmp_path, "narrowed", overlap)
    assert len(seen["parts"]) >= 4
    assert seen["table_alive"] == [False] * len(seen["parts"])
    assert seen["alive_parts"] == [0] * len(seen["parts"])
    for columns in seen["run_columns"]:
        assert {"task", "item_id", "video_id", "category"} <= columns
        assert not {"annotation", "options", "answer"} & columns
    for store in ("verdicts", "metrics"):
        assert _table(narrowed, store).equals(_table(kept, store)), store
