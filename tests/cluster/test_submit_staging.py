"""What `capeval submit` ships (engine/staging.py), without a cluster: a user's home-like folder with `.ssh` and
`.aws` beside a project whose sweep names an items table with real files; the staging function is called directly
(and the CLI's --dry-run for exit codes)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from _sweeps import sweep_toml
from capeval.engine.errors import UsageError
from capeval.engine.staging import SHIPPED_LIST, StagingError, plan_staging, stage_sweep

REPO = Path(__file__).resolve().parents[2]
PRIVATE_KEY = "-----BEGIN OPENSSH PRIVATE KEY----- not-a-real-key"


@pytest.fixture()
def home(tmp_path) -> Path:
    """home/.ssh/id_rsa, home/.aws/credentials, and home/proj/{sweeps/s.toml, data/items.jsonl, data/clips/*.mp4}."""
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_rsa").write_text(PRIVATE_KEY)
    (home / ".aws").mkdir()
    (home / ".aws" / "credentials").write_text("aws_secret_access_key = not-a-real-secret\n")
    data = home / "proj" / "data"
    (data / "clips").mkdir(parents=True)
    (data / "unrelated.bin").write_bytes(b"u" * 1000)  # in the dataset folder, named by no row: never shipped
    rows = []
    for i in range(3):
        (data / "clips" / f"v{i}.mp4").write_bytes(b"\0" * (100 + i))
        rows.append({"item_id": f"q{i}", "media_path": f"clips/v{i}.mp4", "question": "What colour?",
                     "options": ["red", "blue"], "answer": "red"})
    (data / "items.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (home / "proj" / "sweeps").mkdir()
    return home


def write_sweep(home: Path, text: str) -> Path:
    path = home / "proj" / "sweeps" / "s.toml"
    path.write_text(text)
    return path


def items_sweep(**kw) -> str:
    return sweep_toml("staging", dataset={"name": "clips", "kind": "items", "path": "../data/items.jsonl"}, **kw)


def staged_files(folder: Path) -> set[str]:
    return {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()}


def test_ships_exactly_the_table_and_the_media_its_rows_name(home, tmp_path):
    sweep = write_sweep(home, items_sweep())
    staged, shipped = stage_sweep(sweep, tmp_path / "stage")
    data = "data/00_data"  # roots sorted by depth then path: proj/data before proj/sweeps
    expected = {f"{data}/items.jsonl", *(f"{data}/clips/v{i}.mp4" for i in range(3))}
    assert {rel for _, rel in shipped} == expected
    assert staged_files(tmp_path / "stage") == expected | {"s.yaml", SHIPPED_LIST}
    listing = (tmp_path / "stage" / SHIPPED_LIST).read_text().splitlines()[1:]
    assert sorted(line.split("\t")[0] for line in listing) == sorted(expected)
    assert f"path: {data}/items.jsonl" in staged.read_text()
    # the table keeps its relative media paths, which still lead to the staged media: copied as it is
    assert (tmp_path / "stage" / data / "items.jsonl").read_bytes() == (home / "proj/data/items.jsonl").read_bytes()


def test_a_home_directory_label_is_neither_shipped_nor_rewritten(home, tmp_path):
    text = items_sweep().replace('[[captioners]]\nname = "local"', '[[captioners]]\nname = "local"\nlabel = "~/"')
    sweep = write_sweep(home, text)
    os.environ["HOME"], old = str(home), os.environ.get("HOME")
    try:
        staged, shipped = stage_sweep(sweep, tmp_path / "stage")
    finally:
        os.environ["HOME"] = old or ""
    assert len(shipped) == 4 and not any(".ssh" in rel or ".aws" in rel for _, rel in shipped)
    assert "label: ~/" in staged.read_text()
    assert PRIVATE_KEY not in "".join(p.read_text(errors="replace") for p in (tmp_path / "stage").rglob("*")
                                      if p.is_file())


def test_a_media_path_climbing_out_of_the_dataset_is_refused_naming_the_row(home, tmp_path):
    table = home / "proj" / "data" / "items.jsonl"
    rows = [json.loads(line) for line in table.read_text().splitlines()]
    rows[1]["media_path"] = "../../.ssh/id_rsa"
    table.write_text("".join(json.dumps(r) + "\n" for r in rows))
    sweep = write_sweep(home, items_sweep())
    with pytest.raises(StagingError) as err:
        stage_sweep(sweep, tmp_path / "stage")
    message = str(err.value)
    assert "line 2" in message and "media_path '../../.ssh/id_rsa'" in message and "--allow-root" in message
    assert isinstance(err.value, UsageError) and not (tmp_path / "stage").exists()


def test_a_symlink_escaping_the_root_is_refused(home, tmp_path):
    link = home / "proj" / "data" / "clips" / "v1.mp4"
    link.unlink()
    link.symlink_to(home / ".ssh" / "id_rsa")
    sweep = write_sweep(home, items_sweep())
    with pytest.raises(StagingError, match="resolves to .*id_rsa, outside"):
        stage_sweep(sweep, tmp_path / "stage")
    assert not (tmp_path / "stage").exists()


def test_hidden_files_and_non_media_under_an_allowed_root_are_refused(home, tmp_path):
    """A sweep kept in the home folder itself makes home a root: .ssh is still refused (hidden)."""
    table = home / "proj" / "data" / "items.jsonl"
    rows = [json.loads(line) for line in table.read_text().splitlines()]
    rows[0]["media_path"] = "../../.ssh/id_rsa"
    rows[2]["media_path"] = "unrelated.bin"
    table.write_text("".join(json.dumps(r) + "\n" for r in rows))
    sweep = home / "s.toml"
    sweep.write_text(sweep_toml("staging", dataset={"name": "clips", "kind": "items",
                                                   "path": "proj/data/items.jsonl"}))
    with pytest.raises(StagingError) as err:
        plan_staging(sweep)
    assert "2 problems" in str(err.value) and "is hidden" in str(err.value)
    assert "unrelated.bin is not a video or image file" in str(err.value)


def test_oversize_is_refused_before_anything_is_copied(home, tmp_path):
    sweep = write_sweep(home, items_sweep())
    with pytest.raises(StagingError, match="over the 0 MiB cap.*nothing was copied"):
        stage_sweep(sweep, tmp_path / "stage", max_bytes=100)
    assert not (tmp_path / "stage").exists()


def test_a_credential_value_is_refused_naming_field_and_line(home, tmp_path):
    sweep = write_sweep(home, items_sweep(judges=[{"name": "openai", "params": {
        "model": "m", "base_url": "http://127.0.0.1:9/v1", "api_key": "sk-not-shipped-123"}}]))
    with pytest.raises(StagingError) as err:
        stage_sweep(sweep, tmp_path / "stage", ship_data=False)
    assert "judges[0].params.api_key: a credential value" in str(err.value) and "api_key_env" in str(err.value)
    assert f"{sweep}, line" in str(err.value) and "sk-not-shipped-123" not in str(err.value)
    assert not (tmp_path / "stage").exists()


def test_absolute_media_paths_get_a_rewritten_table_that_keeps_video_ids(home, tmp_path):
    table = home / "proj" / "data" / "items.jsonl"
    rows = [json.loads(line) for line in table.read_text().splitlines()]
    for r in rows:
        r["media_path"] = str(table.parent / r["media_path"])
    table.write_text("".join(json.dumps(r) + "\n" for r in rows))
    sweep = write_sweep(home, items_sweep())
    staged, shipped = stage_sweep(sweep, tmp_path / "stage")
    from capeval.engine.inputs import read_items

    new = tmp_path / "stage" / "data/00_data/items.staged.jsonl"
    assert ("(rewritten)", "data/00_data/items.staged.jsonl") in shipped
    assert read_items(new).column("video_id").to_pylist() == read_items(table).column("video_id").to_pylist()
    assert all(Path(p).is_file() and Path(p).is_relative_to(tmp_path / "stage")
               for p in read_items(new).column("media_path").to_pylist())


def test_cli_dry_run_exit_2_for_a_credential_and_lists_files_otherwise(home, tmp_path):
    env = {**os.environ, "PYTHONPATH": os.environ.get("PYTHONPATH", "")}
    sweep = write_sweep(home, items_sweep())
    ok = subprocess.run([sys.executable, "-m", "capeval.engine.cli", "submit", str(sweep), "--dry-run"], env=env,
                        cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert ok.returncode == 0, ok.stderr
    assert ok.stderr.count("[submit]   ships ") == 4 and "clips/v2.mp4" in ok.stderr
    bad = write_sweep(home, items_sweep(judges=[{"name": "openai", "params": {
        "model": "m", "base_url": "http://127.0.0.1:9/v1", "api_key": "sk-not-shipped-456"}}]))
    proc = subprocess.run([sys.executable, "-m", "capeval.engine.cli", "submit", str(bad), "--dry-run"], env=env,
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr
    assert "api_key" in proc.stderr and "sk-not-shipped-456" not in proc.stdout + proc.stderr


def test_a_videos_glob_ships_the_matching_media_only_and_keeps_ids(home, tmp_path):
    clips = home / "proj" / "data" / "clips"
    (clips / "notes.txt").write_text("not media")
    (clips / "sub").mkdir()
    (clips / "sub" / "w.mp4").write_bytes(b"\0" * 10)
    sweep = write_sweep(home, sweep_toml("staging", dataset={"name": "v", "kind": "videos",
                                                            "path": "../data/clips/**/*.mp4"}))
    staged, shipped = stage_sweep(sweep, tmp_path / "stage")
    assert sorted(rel for _, rel in shipped) == sorted(
        [f"data/01_clips/v{i}.mp4" for i in range(3)] + ["data/01_clips/sub/w.mp4"])
    from capeval.engine.datasets.registry import load

    local = load("videos", {"path": "../data/clips/**/*.mp4"}, base_dir=sweep.parent, out_dir=tmp_path / "x")
    there = load("videos", {"path": "data/01_clips/**/*.mp4"}, base_dir=staged.parent, out_dir=tmp_path / "y")
    assert "path: data/01_clips/**/*.mp4" in staged.read_text()
    assert sorted(local.media) == sorted(there.media) == ["sub/w", "v0", "v1", "v2"]


def test_no_ship_data_copies_nothing_and_makes_declared_paths_absolute(home, tmp_path):
    sweep = write_sweep(home, items_sweep())
    staged, shipped = stage_sweep(sweep, tmp_path / "stage", ship_data=False)
    assert shipped == [] and staged_files(tmp_path / "stage") == {"s.yaml", SHIPPED_LIST}
    assert f"path: {(home / 'proj/data/items.jsonl').resolve()}" in staged.read_text()
