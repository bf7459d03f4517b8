"""One video-id rule across dataset kinds (engine/datasets/video_ids.py, docs/inputs.md "Video ids"): the `items` kind
names a clip `clips/v01.mp4` (its media_path as written), the `videos` kind `v01` (its path under the folder, no
suffix); a caption may name its video by either, or by any trailing part of the media file's path, so one captions
file serves both kinds (it used to match nothing in one of them). The datasets' own ids are unchanged (run keys
stay)."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from capeval.engine.cli import main as cli_main
from capeval.engine.datasets.registry import load
from capeval.engine.datasets.video_ids import with_dataset_video_ids
from capeval.engine.errors import UsageError
from capeval.engine.inputs import read_captions


@pytest.fixture
def clips(tmp_path) -> Path:
    from capeval.engine.datasets.synthetic_videos import make_video

    (tmp_path / "clips").mkdir()
    for k in range(2):
        make_video(tmp_path / "clips" / f"v0{k}.mp4", codec="h264", seconds=1, fps=8, gop_seconds=1, seed=k)
    items = tmp_path / "items.jsonl"
    items.write_text("".join(json.dumps({"item_id": f"q{k}", "media_path": f"clips/v0{k}.mp4", "task": "action",
                                         "question": "What moves?", "options": ["a ball", "a cat"],
                                         "answer": "a ball"}) + "\n" for k in range(2)))
    return tmp_path


def _captions(folder: Path, names: list[str]) -> Path:
    p = folder / "caps.jsonl"
    p.write_text("".join(json.dumps({"video_id": n, "caption": "A red ball rolls."}) + "\n" for n in names))
    return p


def test_one_captions_file_names_the_videos_of_both_kinds(clips):
    table = load("items", {"path": "items.jsonl"}, base_dir=clips).items
    folder = load("videos", {"path": "clips"}, base_dir=clips).items
    assert table.column("video_id").to_pylist() == ["clips/v00.mp4", "clips/v01.mp4"]  # ids as before
    assert folder.column("video_id").to_pylist() == ["v00", "v01"]
    for names in (["v00", "v01"], ["clips/v00.mp4", "clips/v01.mp4"], ["v00.mp4", "clips/v01"]):
        captions = read_captions(_captions(clips, names))
        for items in (table, folder):
            renamed, _ = with_dataset_video_ids(captions, items)
            assert renamed.column("video_id").to_pylist() == items.column("video_id").to_pylist(), (names, items)
            assert renamed.column("caption_key").to_pylist() == captions.column("caption_key").to_pylist()


def test_items_from_polars_hold_other_string_types_and_still_match(clips):
    """`capeval.judge(items=<polars DataFrame>)`: polars hands over large or view strings, the captions file plain
    ones; the ids must still meet (this raised ArrowTypeError: Array chunks must all be same type)."""
    table = load("items", {"path": "items.jsonl"}, base_dir=clips).items
    from_polars = pl.from_arrow(table).to_arrow()
    assert from_polars.column("video_id").type != table.column("video_id").type
    for names in (["clips/v00.mp4", "clips/v01.mp4"], ["v00", "v01"]):
        captions = read_captions(_captions(clips, names))
        renamed, n = with_dataset_video_ids(captions, from_polars)
        assert renamed.column("video_id").to_pylist() == ["clips/v00.mp4", "clips/v01.mp4"]
        assert n == (0 if names[0].startswith("clips/") else 2)


def test_two_rows_naming_one_video_are_refused(clips):
    folder = load("videos", {"path": "clips"}, base_dir=clips).items
    captions = read_captions(_captions(clips, ["v00", "clips/v00.mp4"]))
    with pytest.raises(UsageError, match="captions name video 'v00' twice"):
        with_dataset_video_ids(captions, folder)


def test_judge_and_sweep_match_captions_named_as_the_videos_kind_names_them(clips, ray_local, capsys, monkeypatch):
    caps = _captions(clips, ["v00", "v01"])
    out = clips / "v.parquet"
    rc = cli_main(["judge", "--protocol", "capquiz", "--items", str(clips / "items.jsonl"), "--captions", str(caps),
                   "--judge", "local", "--out", str(out), "--no-progress", "--resamples", "0"])
    assert rc in (0, 3), capsys.readouterr().err[-2000:]
    verdicts = pl.read_parquet(out)
    assert sorted(set(verdicts["video_id"])) == ["clips/v00.mp4", "clips/v01.mp4"]
    assert verdicts["verdict"].null_count() == 0
    sweep = clips / "sweep.toml"
    sweep.write_text('name = "ids"\n[[datasets]]\nname = "table"\nkind = "items"\npath = "items.jsonl"\n'
                     f'[[captions]]\npath = "{caps}"\n[[protocols]]\nname = "capquiz"\n'
                     '[[judges]]\nname = "local"\n[options]\nn_resamples = 0\n')
    monkeypatch.chdir(clips)
    rc = cli_main(["sweep", str(sweep), "--out", str(clips / "run"), "--no-progress"])
    assert rc in (0, 3), capsys.readouterr().err[-2000:]
    results = pl.read_parquet(clips / "run" / "results.parquet")
    assert results.height and results["n_no_verdict"].max() == 0, results  # every item had its caption
