"""A full disk at any point of a sweep (issue 26, item 4): whatever was being written when the space ran out — the
judgment cache, a cell's transcript spool, a segment, the results, the run record — the run stops with exit 4 and
one line naming the file, never exit 1 ("internal error"). The output folder is a real tmpfs of a few dozen KiB
(mounted in a private mount namespace), so every write path meets ENOSPC at one size or another; the videos lie
outside it."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import textwrap

import pytest

from _faults_support import REPO, cli_env, sweep, sweep_text
from capeval.engine import exitcodes


def _tmpfs(target, size_kib: int) -> list[str]:
    """A command prefix that runs the command with a `size_kib` tmpfs mounted on `target` (a private namespace)."""
    if not shutil.which("unshare"):
        pytest.skip("needs unshare(1)")
    script = f'mkdir -p "{target}" && mount -t tmpfs -o size={size_kib}k tmpfs "{target}" && exec "$@"'
    prefix = ["unshare", "-r", "-m", "sh", "-c", script, "sh"]
    if subprocess.run(prefix + ["true"], capture_output=True).returncode != 0:
        pytest.skip("cannot mount a tmpfs in a user namespace here")
    return prefix


@pytest.fixture(scope="module")
def items(tmp_path_factory):
    from capeval.engine.datasets.synthetic_videos import make_video

    d = tmp_path_factory.mktemp("media")
    rows = []
    for v in range(2):
        path = d / f"v{v}.mp4"
        make_video(path, codec="h264", seconds=1.0, fps=12, size=(96, 64), seed=60 + v)
        rows += [{"benchmark": "capquiz", "task": "counting", "item_id": f"v{v}/q{q}", "video_id": f"v{v}",
                  "media_path": str(path), "media_type": "video", "annotation": f"How many shapes? ({q})",
                  "options": ["1", "2", "3", "4", "5"], "answer": "2", "category": "counting"} for q in range(3)]
    path = d / "items.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


SPOOL_SCRIPT = textwrap.dedent("""
    import sys
    import pyarrow as pa
    from capeval.engine.store.transcripts import CAPTURE, TranscriptSpool
    from capeval.engine.store.segments import StoreWriteError
    spool = TranscriptSpool(sys.argv[1], "cell")
    row = {name: None for name in CAPTURE.names}
    row.update(request_key="k", user="x" * 64_000, attempts=[])
    try:
        for _ in range(4):  # more than the 16 KiB file system holds, whatever the compression
            spool.append(pa.Table.from_pylist([{**row, "user": row["user"] + str(_)}], schema=CAPTURE))
        spool.finish()
    except StoreWriteError as exc:
        print(exc)
        sys.exit(4)
    sys.exit(0)
""")


def test_a_full_disk_under_the_transcript_spool_is_one_storage_error(tmp_path):
    folder = tmp_path / "transcripts"
    run = subprocess.run(_tmpfs(folder, 16) + [sys.executable, "-c", SPOOL_SCRIPT, str(folder)], cwd=REPO,
                         env=cli_env(), capture_output=True, text=True, timeout=120)
    assert run.returncode == 4, run
    assert "cannot write the cell's judge transcripts (spool) to" in run.stdout and str(folder) in run.stdout, run
    assert "no space left on the device (errno 28)" in run.stdout, run


RECORD_SCRIPT = textwrap.dedent("""
    import sys
    from capeval.engine.runrecord import append_run_record
    from capeval.engine.store.segments import StoreWriteError
    try:
        append_run_record(sys.argv[1], extra={"notes": ["a note"] * 8_000})  # more than the 16 KiB tmpfs holds
    except StoreWriteError as exc:
        print(exc)
        sys.exit(4)
""")


def test_a_run_record_on_a_full_disk_is_one_storage_error_naming_run_json(tmp_path):
    """record_run used to swallow this into a warning: the results were complete, the record silently missing."""
    folder = tmp_path / "out"
    run = subprocess.run(_tmpfs(folder, 16) + [sys.executable, "-c", RECORD_SCRIPT, str(folder)], cwd=REPO,
                         env=cli_env(), capture_output=True, text=True, timeout=120)
    assert run.returncode == 4, run
    assert f"cannot write the run record to {folder / 'run.json'}: no space left on the device" in run.stdout, run


@pytest.mark.slow
@pytest.mark.parametrize("size_kib", [56, 64, 72])
def test_a_full_disk_at_any_write_exits_4_naming_the_file(tmp_path, sweep_file, items, size_kib):
    path = sweep_file(sweep_text(dataset={"name": "clips", "kind": "items", "path": str(items)}))
    disk = tmp_path / "disk"
    run = sweep(path, disk / "out", prefix=_tmpfs(disk, size_kib), timeout=300)
    assert run.returncode in (exitcodes.OK, exitcodes.ABORTED), run
    assert "internal error" not in run.stderr and "Traceback" not in run.stderr, run
    if run.returncode == exitcodes.ABORTED:
        last = run.stderr.strip().splitlines()[-1]
        assert last.startswith("capeval sweep: aborted:") and str(disk / "out") in last, run.stderr
        assert re.search(r"disk is full|no space left on the device", last), last
