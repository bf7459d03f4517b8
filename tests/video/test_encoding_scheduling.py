"""Encoding a test video leaves the process's scheduling as it was.

SVT-AV1 raises the thread that opens it to SCHED_FIFO priority 99 when it runs as root (as CI does); every process
started from that thread afterwards inherited it, and a busy real-time Ray agent starved the 2-core CI machine.
"""

from __future__ import annotations

import os
import subprocess
import sys

from capeval.engine.datasets.synthetic_videos import available_encoders, make_video


def _scheduling() -> tuple[int, int]:
    return os.sched_getscheduler(0), os.sched_getparam(0).sched_priority


def test_encoding_with_every_available_encoder_keeps_the_scheduling_of_the_thread_and_of_its_children(tmp_path):
    before = _scheduling()
    encoders = available_encoders()
    for codec, encoder in encoders.items():
        make_video(tmp_path / f"{codec}.mkv", codec=codec, container_format="matroska", seconds=0.5, fps=8,
                   size=(64, 48), sidecar=False)
        assert _scheduling() == before, f"{encoder} left this thread's scheduling at {_scheduling()} (was {before})"
    child = subprocess.run([sys.executable, "-c", "import os; print(os.sched_getscheduler(0), "
                            "os.sched_getparam(0).sched_priority)"], capture_output=True, text=True, check=True)
    assert tuple(int(v) for v in child.stdout.split()) == before, child.stdout
