"""Which protocol reads which dataset (issue 16, item 4): `[[protocols]] datasets = [...]` pairs a protocol with its
datasets, and without it a protocol judges only the datasets its declarations accept (JudgeProtocol.dataset_problem),
skipping the others with a note. A pair that cannot work fails `capeval sweep --check` naming protocol, dataset,
reason and line; VC-Inspector judging a caption file gets frames decoded at its declared default spec."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from capeval.engine.exitcodes import OK, USAGE
from capeval.engine.sweep.config import SweepFileError, load_sweep
from capeval.engine.sweep.grid import expand


@pytest.fixture(scope="module")
def clips(tmp_path_factory) -> Path:
    """A folder of two real H.264 videos (a `videos` dataset for VC-Inspector)."""
    from capeval.engine.datasets.synthetic_videos import make_video

    d = tmp_path_factory.mktemp("clips")
    for i, name in enumerate(("walk", "run")):
        make_video(d / f"{name}.mp4", codec="h264", seconds=1.0, fps=12, size=(96, 64), seed=20 + i)
    return d


def _sweep(tmp_path: Path, clips: Path, *, capquiz: str = "", vcinspector: str = "", extra: str = "") -> Path:
    path = tmp_path / "pair.toml"
    path.write_text(f"""name = "pair"
prompts = ["brief"]
frames = ["uniform:2"]

[[datasets]]
name = "quiz"
kind = "synthetic"
n_videos = 2
duration_s = 1.0

[[datasets]]
name = "clips"
kind = "videos"
path = "{clips}"

[[captioners]]
name = "local"

[[protocols]]
name = "capquiz"
{capquiz}
[[protocols]]
name = "vcinspector"
{vcinspector}
[[judges]]
name = "local"
{extra}
[options]
n_resamples = 20
""")
    return path


def _line(path: Path, needle: str, nth: int = 1) -> int:
    hits = [i for i, line in enumerate(path.read_text().splitlines(), 1) if needle in line]
    return hits[nth - 1]


def _pairs(cells) -> set[tuple[str, str]]:
    return {(c.protocol.name, c.caption.dataset.name) for c in cells}


def test_a_sweep_pairs_capquiz_items_with_a_vcinspector_folder_in_one_run(tmp_path, clips, ray_local):
    """CapQuiz items (synthetic) and a folder of videos for VC-Inspector: one run folder, each protocol judging only
    its own dataset, every item with a verdict."""
    from capeval.engine.sweep.runner import run_sweep

    path = _sweep(tmp_path, clips, capquiz='datasets = ["quiz"]', vcinspector='datasets = ["clips"]')
    config = load_sweep(path)
    assert config.protocols[0].datasets == ("quiz",) and config.protocols[1].datasets == ("clips",)
    assert _pairs(expand(config)) == {("capquiz", "quiz"), ("vcinspector", "clips")}
    logs: list[str] = []
    res = run_sweep(config, tmp_path / "out", progress=False, log=logs.append)
    assert res.exit_code == OK, logs
    rows = res.results.select("protocol", "dataset").unique().rows()
    assert sorted(rows) == [("capquiz", "quiz"), ("vcinspector", "clips")]
    verdicts = pl.concat([pl.read_parquet(p) for p in (tmp_path / "out" / "verdicts").glob("*.parquet")])
    assert set(verdicts["item_status"]) == {"ok"}, verdicts.select("protocol", "video_id", "error").to_dicts()
    by_protocol = {p: set(g["video_id"]) for (p,), g in verdicts.group_by("protocol")}
    assert by_protocol == {"capquiz": {"quiz-000", "quiz-001"}, "vcinspector": {"walk", "run"}}
    # CapQuiz answered its 4 questions per video; VC-Inspector scored each clip once
    assert verdicts.filter(pl.col("protocol") == "capquiz").height == 2 * 4
    assert verdicts.filter(pl.col("protocol") == "vcinspector").height == 2
    assert not any("note:" in line for line in logs)  # explicit pairs: nothing skipped


def test_without_datasets_a_protocol_skips_what_it_cannot_read_with_a_note(tmp_path, clips, capsys):
    """No `datasets`: CapQuiz skips the folder (it reads multiple-choice items, not a folder of videos), VC-Inspector
    judges both datasets (each has media); --check lists exactly those cells and says why CapQuiz skips the
    folder."""
    from capeval.engine.cli import main

    path = _sweep(tmp_path, clips)
    notes: list[str] = []
    cells = expand(load_sweep(path), note=notes.append)
    assert _pairs(cells) == {("capquiz", "quiz"), ("vcinspector", "quiz"), ("vcinspector", "clips")}
    assert len(notes) == 1 and "'capquiz' skips dataset 'clips'" in notes[0] and "not 'videos'" in notes[0], notes
    capsys.readouterr()
    assert main(["sweep", str(path), "--check"]) == OK
    out, err = capsys.readouterr()
    assert "3 cells" in out and "protocol=capquiz judge=local" in out
    assert "dataset=clips" not in "".join(line for line in out.splitlines() if "protocol=capquiz" in line)
    assert "note: protocol 'capquiz' skips dataset 'clips'" in err


def test_check_fails_on_an_explicit_pair_that_cannot_work(tmp_path, clips, capsys):
    """CapQuiz told to judge a folder of videos: --check exits 2 naming the file, the line of `datasets`, the
    protocol, the dataset and the reason (it used to pass --check and crash in the run)."""
    from capeval.engine.cli import main

    path = _sweep(tmp_path, clips, capquiz='datasets = ["quiz", "clips"]', vcinspector='datasets = ["clips", "nope"]')
    with pytest.raises(SweepFileError) as info:
        load_sweep(path)
    problems = info.value.problems
    assert len(problems) == 2, problems
    assert problems[0].startswith(f"{path}, line {_line(path, 'datasets = ')}: protocols[0].datasets: protocol "
                                  f"'capquiz' cannot judge dataset 'clips': it reads datasets of kind 'synthetic' or "
                                  f"'items', not 'videos'"), problems[0]
    assert f"line {_line(path, 'datasets = ', 2)}: protocols[1].datasets: no dataset named 'nope'" in problems[1]
    capsys.readouterr()
    assert main(["sweep", str(path), "--check"]) == USAGE
    err = capsys.readouterr().err
    assert "protocols[0].datasets" in err and "'capquiz' cannot judge dataset 'clips'" in err


def test_check_reads_the_items_a_protocol_needs(tmp_path, clips):
    """An items table without options named for CapQuiz, and one without media named for VC-Inspector (its judge
    sees frames; the captions come from a file, so nothing else needs the media): both refused by --check."""
    table = tmp_path / "items.jsonl"
    table.write_text("".join(json.dumps({"item_id": f"v{k}", "video_id": f"v{k}", "task": "caption",
                                         "annotation": "Describe the video."}) + "\n" for k in range(2)))
    caps = tmp_path / "caps.jsonl"
    caps.write_text("".join(json.dumps({"video_id": f"v{k}", "caption": "A ball rolls."}) + "\n" for k in range(2)))
    path = tmp_path / "items.toml"
    path.write_text(f'name = "t"\n[[datasets]]\nname = "table"\nkind = "items"\npath = "{table}"\n'
                    f'[[captions]]\npath = "{caps}"\n'
                    '[[protocols]]\nname = "capquiz"\ndatasets = ["table"]\n'
                    '[[protocols]]\nname = "vcinspector"\ndatasets = ["table"]\n[[judges]]\nname = "local"\n')
    with pytest.raises(SweepFileError) as info:
        load_sweep(path)
    problems = info.value.problems
    assert len(problems) == 2, problems
    assert "protocols[0].datasets: protocol 'capquiz' cannot judge dataset 'table': it needs `options` in every " \
           "item; 2 of 2 items have none (e.g. 'v0')" in problems[0], problems[0]
    assert "protocols[1].datasets: protocol 'vcinspector' cannot judge dataset 'table': its judge sees the videos; " \
           "2 of 2 videos have no media path (e.g. 'v0')" in problems[1], problems[1]
    # without `datasets` neither protocol can judge the table: still refused, each at its own entry with the reason
    path.write_text(path.read_text().replace('datasets = ["table"]\n', ""))
    with pytest.raises(SweepFileError) as info:
        load_sweep(path)
    problems = info.value.problems
    assert len(problems) == 2, problems
    assert f"line {_line(path, 'capquiz')}: protocols[0]: protocol 'capquiz' can judge none of the datasets: " \
           "'table': it needs `options`" in problems[0], problems[0]
    assert f"line {_line(path, 'vcinspector')}: protocols[1]: protocol 'vcinspector' can judge none of the " \
           "datasets: 'table': its judge sees the videos" in problems[1], problems[1]


def test_vcinspector_judges_a_caption_file_on_frames_at_its_default_spec(tmp_path, clips, ray_local):
    """Captions from a file (frame_spec "file") judged by VC-Inspector with no `judge_frames`: the judge sees frames
    decoded at the protocol's declared default (linspace:32), every clip gets a verdict (it used to be 100% "no
    frames ... spec 'file'")."""
    from capeval.engine.registry import lookup
    from capeval.engine.sweep.cells import judge_frames_spec
    from capeval.engine.sweep.runner import run_sweep

    caps = tmp_path / "caps.jsonl"
    caps.write_text("".join(json.dumps({"video_id": v, "caption": f"A shape moves in {v}."}) + "\n"
                            for v in ("walk", "run")))
    path = tmp_path / "file.toml"
    path.write_text(f'name = "file"\n[[datasets]]\nname = "clips"\nkind = "videos"\npath = "{clips}"\n'
                    f'[[captions]]\npath = "{caps}"\ncaptioner = "mine"\n'
                    '[[protocols]]\nname = "vcinspector"\n[[judges]]\nname = "local"\n[options]\nn_resamples = 20\n')
    config = load_sweep(path)
    (cell,) = expand(config)
    default = lookup("protocol", "vcinspector").judge_frames
    assert cell.caption.frame_spec == "file" and judge_frames_spec(cell) == default == "linspace:32"
    res = run_sweep(config, tmp_path / "out", progress=False, log=lambda m: None)
    verdicts = pl.concat([pl.read_parquet(p) for p in (tmp_path / "out" / "verdicts").glob("*.parquet")])
    assert sorted(verdicts["video_id"]) == ["run", "walk"]
    assert set(verdicts["item_status"]) == {"ok"}, verdicts.select("video_id", "error").to_dicts()
    index = pl.concat([pl.read_parquet(p) for p in (tmp_path / "out" / "frames_index").glob("*.parquet")])
    assert sorted(index.filter(pl.col("frame_spec") == default)["video_id"]) == ["run", "walk"]
    assert res.exit_code == OK
