"""The public Python API (capeval.engine.api, re-exported by `capeval`; docs/api.md): `import capeval` loads none of
the heavy libraries, `capeval.judge` judges files through the cache and refuses what the protocol refuses before
judging, `to_pandas()` names the missing optional dependency, and the page's example runs as written."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import polars as pl
import pytest

from _api_page import python_blocks, run_page

ITEMS = [
    {"item_id": "v1/colour", "video_id": "v1", "task": "colour", "annotation": "What colour is the car?",
     "options": ["red", "blue", "white"], "answer": "red"},
    {"item_id": "v1/action", "video_id": "v1", "task": "action", "annotation": "What does the car do?",
     "options": ["parks", "turns left", "reverses"], "answer": "turns left"},
    {"item_id": "v2/colour", "video_id": "v2", "task": "colour", "annotation": "What colour is the dog?",
     "options": ["black", "brown", "white"], "answer": "brown"},
]
CAPTIONS = [
    {"video_id": "v1", "caption": "A red car drives down a wet street and turns left at the lights.",
     "captioner": "my-model"},
    {"video_id": "v2", "caption": "A brown dog runs across a lawn and catches a ball in its mouth.",
     "captioner": "my-model"},
]


def _jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


OPTIONAL_EXTRAS = ("pandas", "openpyxl", "mlflow", "wandb")


def test_import_capeval_loads_no_heavy_library():
    heavy = ("polars", "pyarrow", "ray", "torch", "vllm") + OPTIONAL_EXTRAS
    code = (f"import sys, capeval; print(sorted(m for m in {heavy!r} if m in sys.modules)); "
            "print(sorted(n for n in capeval.__all__ if n in dir(capeval)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    heavy_loaded, names = out.stdout.splitlines()
    assert heavy_loaded == "[]", out.stdout
    assert names == "['JudgeResult', 'RunTables', 'judge', 'load_run', 'sweep']"


def test_capeval_help_and_the_api_load_no_optional_extra():
    """The optional extras load only in the function that needs them: not for `capeval --help`, not when the API's
    modules load."""
    code = ("import sys\n"
            "from capeval.engine.cli import main\n"
            "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
            "import capeval; capeval.load_run\n"
            f"print(sorted(m for m in {OPTIONAL_EXTRAS!r} if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True)
    assert out.stdout.splitlines()[-1] == "[]", out.stdout[-2000:]


def test_the_api_is_reexported_from_capeval_engine_api():
    import capeval
    from capeval.engine import api

    assert (capeval.sweep, capeval.judge, capeval.load_run) == (api.sweep, api.judge, api.load_run)
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        capeval.nope  # noqa: B018


def test_judge_files_with_the_local_judge_then_from_the_cache(tmp_path):
    import capeval

    items, captions = _jsonl(tmp_path / "items.jsonl", ITEMS), _jsonl(tmp_path / "captions.jsonl", CAPTIONS)
    cache = tmp_path / "cache"
    first = capeval.judge("capquiz", items, captions, judge="local", cache=cache, n_resamples=50)
    assert isinstance(first.verdicts, pl.DataFrame) and isinstance(first.metrics, pl.DataFrame)
    assert sorted(first.verdicts["item_id"]) == sorted(i["item_id"] for i in ITEMS)
    assert first.summary.sent == len(ITEMS) and first.summary.cached == 0
    assert {"CapP", "CapR", "CapF1"} <= set(first.metrics["metric"])
    again = capeval.judge("capquiz", pl.read_ndjson(items), captions, judge="local", cache=cache, n_resamples=50)
    assert again.summary.sent == 0 and again.summary.cached == len(ITEMS)
    key = ["item_id", "verdict", "raw_output"]
    assert again.verdicts.select(key).sort("item_id").equals(first.verdicts.select(key).sort("item_id"))


def test_judge_refuses_unknown_params_before_judging(tmp_path):
    import capeval

    items, captions = _jsonl(tmp_path / "items.jsonl", ITEMS), _jsonl(tmp_path / "captions.jsonl", CAPTIONS)
    with pytest.raises(ValueError, match="no_such_param"):
        capeval.judge("capquiz", items, captions, params={"no_such_param": 1}, cache=tmp_path / "cache")
    assert not (tmp_path / "cache").exists()


def _results_with_pandas_idiom(tmp_path):
    from capeval.engine.api import JudgeResult, RunTables
    from capeval.engine.judging.summary import JudgingSummary
    from capeval.engine.sweep.results import SweepResult

    frame = pl.DataFrame({"metric": ["CapP", "CapR"], "value": [1.0, None], "n": [3, 2]})
    return frame, (RunTables(path=tmp_path, results=frame, metrics=None, verdicts=frame, captions=None, items=None),
                   JudgeResult(frame, frame, JudgingSummary()),
                   SweepResult(results=frame, cells_total=1, cells_cached=0, cells_run=1))


def test_to_pandas_without_pandas_names_the_extra(monkeypatch, tmp_path):
    _, results = _results_with_pandas_idiom(tmp_path)
    monkeypatch.setitem(sys.modules, "pandas", None)  # an environment without pandas
    for result in results:
        with pytest.raises(ModuleNotFoundError, match=r"pip install 'capeval\[pandas\]'"):
            result.to_pandas()


def test_to_pandas_converts_every_table(tmp_path):
    import pandas as pd

    frame, (tables, judged, swept) = _results_with_pandas_idiom(tmp_path)
    converted = tables.to_pandas()
    assert converted.path == tmp_path and converted.metrics is None and converted.captions is None
    for table in (converted.results, converted.verdicts, judged.to_pandas().verdicts, judged.to_pandas().metrics,
                  swept.to_pandas().results):
        assert isinstance(table, pd.DataFrame)
        assert table["metric"].tolist() == ["CapP", "CapR"] and table["n"].tolist() == [3, 2]
        assert table["value"].iloc[0] == 1.0 and pd.isna(table["value"].iloc[1])
    assert swept.to_pandas().cells_run == 1 and isinstance(swept.results, pl.DataFrame)  # the original is unchanged


def test_load_run_as_pandas_reads_a_verdict_file(tmp_path):
    import pandas as pd

    import capeval

    items, captions = _jsonl(tmp_path / "items.jsonl", ITEMS), _jsonl(tmp_path / "captions.jsonl", CAPTIONS)
    judged = capeval.judge("capquiz", items, captions, judge="local", cache=tmp_path / "cache", n_resamples=50)
    judged.verdicts.write_parquet(tmp_path / "verdicts.parquet")
    polars_run = capeval.load_run(tmp_path / "verdicts.parquet")
    pandas_run = capeval.load_run(tmp_path / "verdicts.parquet", pandas=True)
    assert isinstance(pandas_run.verdicts, pd.DataFrame)
    assert sorted(pandas_run.verdicts["item_id"]) == sorted(polars_run.verdicts["item_id"]) == sorted(
        i["item_id"] for i in ITEMS)


def test_load_run_names_a_folder_that_is_not_a_run(tmp_path):
    import capeval

    with pytest.raises(FileNotFoundError, match="not a capeval run folder"):
        capeval.load_run(tmp_path)


def test_the_page_has_an_example():
    blocks = python_blocks()
    assert len(blocks) >= 3 and all(f"capeval.{f}(" in "".join(blocks) for f in ("sweep", "load_run", "judge"))


@pytest.mark.slow
def test_api_page_example_runs_verbatim(tmp_path):
    env = {**os.environ, "PYTHONPATH": os.environ.get("PYTHONPATH", "")}
    done = run_page(sys.executable, tmp_path, env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    assert (tmp_path / "runs" / "shapes" / "results.parquet").is_file()
