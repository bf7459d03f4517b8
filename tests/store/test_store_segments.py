"""SegmentStore group commit and compaction (issue 21): appends buffered into few segments, every reader sees
buffered rows, a kill -9 mid-compaction leaves each row readable exactly once, and a run folder at rest is a few
files. Real files in tmp_path; kills are real SIGKILLs of a child process (engine/faultpoints.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from capeval.engine.errors import UsageError
from capeval.engine.schemas import CAPTIONS
from capeval.engine.store import GroupCommit, SegmentStore

REPO = Path(__file__).resolve().parents[2]
SLOW_TIMER = 600.0  # an interval no test waits for: commits come from row counts, flushes and reads only


def rows(start: int, n: int = 1) -> pa.Table:
    return pa.table({"key": [f"k{i:05d}" for i in range(start, start + n)], "value": list(range(start, start + n))})


def files(store: SegmentStore) -> list[Path]:
    """What is on disk now, without asking the store (which would flush)."""
    return sorted(p for p in store.root.glob("*.parquet"))


def on_disk_rows(store: SegmentStore) -> int:
    return sum(pq.ParquetFile(p).metadata.num_rows for p in files(store))


def test_group_commit_writes_one_segment_per_group_of_rows(tmp_path):
    store = SegmentStore(tmp_path / "s", group=GroupCommit(rows=5, interval_s=SLOW_TIMER, compact_after=100))
    for i in range(12):
        assert store.append(rows(i)) is None or (i + 1) % 5 == 0
    assert len(files(store)) == 2 and on_disk_rows(store) == 10  # 2 rows still buffered
    assert store.read()["key"].to_pylist() == [f"k{i:05d}" for i in range(12)]  # reading committed them
    assert len(files(store)) == 3 and on_disk_rows(store) == 12


def test_buffered_rows_are_committed_after_the_interval_without_any_call(tmp_path):
    store = SegmentStore(tmp_path / "s", group=GroupCommit(rows=1000, interval_s=0.2))
    store.append(rows(0, 3))
    assert files(store) == []
    deadline = time.monotonic() + 10
    while not files(store) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert on_disk_rows(store) == 3


def test_every_reader_sees_buffered_rows(tmp_path):
    from capeval.engine.stages.caption import finished_keys, read_captions

    group = GroupCommit(rows=1000, interval_s=SLOW_TIMER)
    caption = {"caption_key": "c1", "captioner": "local", "prompt_id": "p", "frame_spec": "uniform:1",
               "video_id": "v1", "text": "a red circle", "error": None}
    readers = {
        "segments": lambda s: len(s.segments()) == 1,
        "read": lambda s: s.read().num_rows == 1,
        "existing_keys": lambda s: s.existing_keys("caption_key") == {"c1"},
        "len": lambda s: len(s) == 1,
        "finished_keys": lambda s: finished_keys(s) == {"c1"},
        "read_captions": lambda s: read_captions(s)["text"].to_pylist() == ["a red circle"],
    }
    for name, sees in readers.items():
        store = SegmentStore(tmp_path / name, CAPTIONS, group=group)
        store.append(pa.Table.from_pylist([caption], schema=CAPTIONS))
        assert files(store) == []
        assert sees(store), name


def test_put_flushes_the_stores_it_depends_on_first(tmp_path):
    captions = SegmentStore(tmp_path / "captions", group=GroupCommit(rows=1000, interval_s=SLOW_TIMER))
    verdicts = SegmentStore(tmp_path / "verdicts", flush_before_put=(captions,))
    captions.append(rows(0, 4))
    verdicts.put(rows(0, 4), "cellkey")
    assert on_disk_rows(captions) == 4 and (tmp_path / "verdicts" / "cellkey.parquet").exists()


def test_compaction_bounds_the_file_count_and_keeps_order(tmp_path):
    store = SegmentStore(tmp_path / "s", group=GroupCommit(rows=4, interval_s=SLOW_TIMER, compact_after=4))
    most = 0
    for i in range(400):
        store.append(rows(i))
        most = max(most, len(files(store)))
    assert most <= 12, most  # 100 commits of 4 rows, a few files at any time
    store.close()
    assert len(files(store)) <= 3
    assert store.read()["key"].to_pylist() == [f"k{i:05d}" for i in range(400)]


def test_close_merges_the_trailing_small_segments(tmp_path):
    store = SegmentStore(tmp_path / "s", group=GroupCommit(rows=2, interval_s=SLOW_TIMER, compact_after=50))
    for i in range(9):
        store.append(rows(i))
    assert len(files(store)) == 4
    store.close()
    assert len(files(store)) == 1 and store.read()["value"].to_pylist() == list(range(9))


def test_compaction_leaves_named_segments_alone(tmp_path):
    store = SegmentStore(tmp_path / "s", group=GroupCommit(rows=1, interval_s=SLOW_TIMER, compact_after=2))
    store.put(rows(100, 2), "cellkey")
    for i in range(5):
        store.append(rows(i))
    store.close()
    assert (tmp_path / "s" / "cellkey.parquet").exists()
    assert sorted(store.read()["value"].to_pylist()) == [0, 1, 2, 3, 4, 100, 101]
    with pytest.raises(ValueError, match="segment stamp"):
        store.put(rows(0), "00000000000000000001-abcdef01")


_KILLED_CHILD = """
import sys
import pyarrow as pa
from capeval.engine.store import GroupCommit, SegmentStore
from capeval.engine.faultpoints import hit
store = SegmentStore(sys.argv[1], group=GroupCommit(rows=2, interval_s=600, compact_after=3))
for i in range(int(sys.argv[2])):
    store.append(pa.table({"key": [f"k{i:05d}"], "value": [i]}))
    hit("appended")
"""


def _child(root: Path, n: int, **env: str) -> int:
    environ = {**os.environ, "PYTHONPATH": os.environ.get("PYTHONPATH", ""), **env}
    return subprocess.run([sys.executable, "-c", _KILLED_CHILD, str(root), str(n)], env=environ, cwd=REPO,
                          timeout=120).returncode


def test_kill_nine_between_merge_and_unlink_leaves_each_row_once(tmp_path):
    root = tmp_path / "s"
    # 3 commits of 2 rows, then the compaction is killed after renaming its merged segment into place
    assert _child(root, 7, CAPEVAL_KILL_AT="compact") == -signal.SIGKILL
    on_disk = sorted(p.name for p in root.glob("*.parquet"))
    assert len(on_disk) == 4 and sum(n.endswith("-merged.parquet") for n in on_disk) == 1  # parts AND merge
    store = SegmentStore(root, group=GroupCommit(rows=2, interval_s=SLOW_TIMER, compact_after=3))
    assert store.read()["value"].to_pylist() == [0, 1, 2, 3, 4, 5]  # exactly once, in order
    assert len(store) == 6 and len(store.segments()) == 1
    store.append(rows(6, 2))  # the next compaction removes the parts the merge holds
    store.close()
    assert len(files(store)) == 1 and store.read()["value"].to_pylist() == list(range(8))


def test_kill_nine_loses_only_the_rows_buffered_since_the_last_commit(tmp_path):
    root = tmp_path / "s"
    assert _child(root, 10, CAPEVAL_KILL_AT="appended@5") == -signal.SIGKILL
    assert SegmentStore(root).read()["value"].to_pylist() == [0, 1, 2, 3]  # the 5th row was buffered: lost


def test_a_normal_exit_commits_the_buffer(tmp_path):
    root = tmp_path / "s"
    assert _child(root, 5) == 0
    assert SegmentStore(root).read()["value"].to_pylist() == [0, 1, 2, 3, 4]


@pytest.mark.parametrize("value, field", [("rows=0", "rows"), ("rows=x", "rows"), ("speed=3", "speed"),
                                          ("compact_after=1", "compact_after"), ("interval_s", "interval_s")])
def test_bad_commit_settings_are_usage_errors_naming_the_field(value, field):
    with pytest.raises(UsageError, match=f"CAPEVAL_STORE_COMMIT.*{field}"):
        GroupCommit.from_env({"CAPEVAL_STORE_COMMIT": value})
    assert GroupCommit.from_env({"CAPEVAL_STORE_COMMIT": "rows=4, interval_s=0.5"}) == GroupCommit(rows=4,
                                                                                                 interval_s=0.5)
