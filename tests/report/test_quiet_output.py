"""What a command prints is the signal, not noise: repeated warnings are one line per kind with a count; the
leaderboard has no column that is "-" on every row and says what each metric is (declared by its protocol, in the
terminal and the HTML report); `capability score` prints its table once and no empty notes; `capeval judge` says
what its requests count and leaves the long metric table to --metrics; Python warnings of a command come grouped at
its end and libraries' stay out unless --verbose; `bench judge` without --json prints a readable table."""

from __future__ import annotations

import json
import warnings

import polars as pl

from _verdicts import verdict_rows
from capeval.engine.cli import main
from capeval.engine.protocols.capquiz.metrics import compute_metrics as capquiz_metrics
from capeval.engine.registry import lookup
from capeval.engine.report.leaderboard import format_leaderboard, leaderboard

PROTOCOLS = ("capquiz", "capability", "vidcapbench", "lvcap", "vcinspector")


def _uniform_systems(n: int) -> pl.DataFrame:
    """n captioners whose every video gets the same verdicts: every CI is degenerate ([x, x])."""
    systems = [{"captioner": f"m{i:02d}", "prompt_id": "p", "frame_spec": "uniform:8"} for i in range(n)]
    return pl.concat([verdict_rows(s, [[0, 0, 1, 2]] * 6) for s in systems])


def test_degenerate_intervals_of_sixteen_systems_are_one_line():
    v = _uniform_systems(16)
    metrics = capquiz_metrics(v.drop("dataset", "protocol_name"), n_resamples=50)
    lb = leaderboard(metrics, "capquiz", n_videos=v.group_by("captioner", "prompt_id", "frame_spec").agg(
        pl.col("video_id").n_unique().alias("n_videos")))
    text = format_leaderboard(lb)
    degenerate = [line for line in text.splitlines() if "degenerate" in line]
    assert len(degenerate) == 1, text  # was 48: one per system and metric
    assert "48 times" in degenerate[0] and "and 45 more" in degenerate[0]


def test_every_headline_metric_has_a_definition_declared_by_its_protocol():
    for name in PROTOCOLS:
        protocol = lookup("protocol", name)
        defined = dict(protocol.metric_definitions)
        assert set(protocol.headline) <= set(defined), (name, set(protocol.headline) - set(defined))
        assert all(d and "\n" not in d and len(d) < 120 for d in defined.values()), name


def test_report_defines_its_metrics_and_shows_videos(tmp_path, ray_local, capsys):
    """A real sweep (items + caption files, local judge) and its report: the terminal leaderboard and the HTML
    page both carry the protocol's definitions; the videos column has the counts."""
    from capeval.engine.sweep.config import load_sweep
    from capeval.engine.sweep.runner import run_sweep

    items, captions = tmp_path / "items.jsonl", tmp_path / "captions.jsonl"
    items.write_text("".join(json.dumps({"item_id": f"v{v}/q", "video_id": f"v{v}", "task": "counting",
                                         "annotation": "How many shapes?", "options": ["1", "2", "3", "4", "5"],
                                         "answer": "2", "category": "counting", "benchmark": "capquiz"}) + "\n"
                             for v in range(3)))
    captions.write_text("".join(json.dumps({"video_id": f"v{v}", "caption": "Two shapes move."}) + "\n"
                                for v in range(3)))
    sweep = tmp_path / "sweep.toml"
    sweep.write_text(f'name = "defs"\n[[datasets]]\nname = "quiz"\nkind = "items"\npath = "{items}"\n'
                     f'[[captions]]\npath = "{captions}"\ncaptioner = "mine"\n[[protocols]]\nname = "capquiz"\n'
                     '[[judges]]\nname = "local"\n[options]\nn_resamples = 20\n')
    out = tmp_path / "out"
    run_sweep(load_sweep(sweep), out, progress=False, log=lambda m: None)
    capsys.readouterr()
    assert main(["report", str(out)]) == 0
    text = capsys.readouterr().out
    definitions = dict(lookup("protocol", "capquiz").metric_definitions)
    for metric in ("CapF1", "CapP", "CapR"):  # the legend under the table: one line per metric
        assert any(line.split()[0] == metric and line.endswith(definitions[metric])
                   for line in text.splitlines() if line.strip()), text
    header = next(line for line in text.splitlines() if line.startswith("captioner"))
    row = next(line for line in text.splitlines() if line.startswith("mine"))
    assert header.split()[-1] == "videos" and row.split()[-1] == "3"
    page = (out / "report.html").read_text(encoding="utf-8")
    assert "<dl class='metric-definitions'>" in page and f"<dd>{definitions['CapR']}</dd>" in page


def test_judge_output_is_short_and_says_what_its_requests_count(tmp_path, capsys):
    items, captions = tmp_path / "items.jsonl", tmp_path / "captions.jsonl"
    items.write_text("".join(json.dumps({"item_id": f"v{v}/q{q}", "video_id": f"v{v}", "task": "counting",
                                         "annotation": f"Question {q}?", "options": ["1", "2", "3", "4", "5"],
                                         "answer": "2", "category": "counting", "benchmark": "capquiz"}) + "\n"
                             for v in range(4) for q in range(2)))
    captions.write_text("".join(json.dumps({"video_id": f"v{v}", "caption": "Two shapes move.", "captioner": c})
                                + "\n" for v in range(4) for c in ("cap-a", "cap-b")))
    assert main(["judge", "--protocol", "capquiz", "--items", str(items), "--captions", str(captions), "--judge",
                 "local", "--out", str(tmp_path / "v.parquet"), "--resamples", "20", "--no-progress"]) == 0
    out, err = capsys.readouterr()
    # 8 items x 2 caption sets = 16 requests; "16 first-step requests from 8 items x 8 captions" read as 64
    assert "16 first-step requests: 8 items, each asked against the caption of its video in each of 2 caption " \
           "sets (8 captions of 4 videos)" in err, err
    assert "-- every metric row --" not in out and len(out.splitlines()) <= 30, out
    assert "Loading weights" not in err  # the local judge's model loader stays quiet without --verbose
    header = next(line for line in out.splitlines() if line.startswith("captioner"))
    assert header.split()[-1] == "videos"
    assert [line.split()[-1] for line in out.splitlines() if line.startswith("cap-")][:2] == ["4", "4"]


def test_capability_score_prints_one_table_and_no_empty_notes(shared_data, tmp_path, capsys):
    root = shared_data / "capability"
    assert main(["capability", "score", "--annotations", str(root / "annotations"), "--judgments",
                 str(root / "judgments" / "gpt-4o-0806"), "--out", str(tmp_path / "c.csv"), "--resamples", "20"]) == 0
    out, err = capsys.readouterr()
    assert out.count("object_category") == 1, out  # the per-dimension rows once (were printed in two tables)
    assert not [line for line in err.splitlines() if line.rstrip().endswith(": .")], err
    assert "note: 2 verdict rows have no judgment (style 2)" in err


def test_python_warnings_are_grouped_and_libraries_kept_out(capsys):
    """What `capeval` wraps every command in: capeval's own warning raised from five places is one line with its
    count; a library's deprecation is only counted, and shown with --verbose."""
    import capeval.engine.report.leaderboard as own_module
    from capeval.engine.warning_groups import capture_python_warnings

    for verbose in (False, True):
        with capture_python_warnings(verbose):
            for line in range(1, 6):
                warnings.warn_explicit("same cause", UserWarning, own_module.__file__, line)
            warnings.warn_explicit("old API", FutureWarning, "/venv/site-packages/somelib/x.py", 1)
        err = capsys.readouterr().err
        assert [line for line in err.splitlines() if "same cause" in line] == ["warning: same cause (x5)"], err
        if verbose:
            assert "library warning: FutureWarning: old API" in err
        else:
            assert "old API" not in err and "(1 library warnings not shown; --verbose shows them)" in err


def test_bench_judge_prints_a_readable_table(capsys):
    assert main(["bench", "judge", "--quick", "--only", "http"]) == 0
    out = capsys.readouterr().out
    assert "{" not in out and "'" not in out, out  # no Python dict reprs
    assert "== http ==" in out and any(line.split()[0] == "errors" for line in out.splitlines() if line.strip())
    assert any(line.strip().startswith("baseline_openai_sdk.errors") for line in out.splitlines())
