"""Progress on a terminal (issue 10): a sweep shows decode and caption bars with counts, throughput and ETA, moved
by the driver as Ray tasks and caption actors finish. Run under a pseudo-terminal, as a user would see it."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

from _sweeps import write_sweep

REPO = Path(__file__).resolve().parents[2]


def test_decode_and_caption_bars_on_a_terminal(tmp_path):
    sweep = write_sweep(tmp_path / "s.toml", "bars", prompts=("brief",), frames=("uniform:2",), n_videos=3,
                        duration_s=1.0, options={"n_resamples": 10})
    master, slave = pty.openpty()
    # a real terminal has a size; a fresh pty reports 0 columns, and tqdm draws nothing in 0 columns
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 160, 0, 0))
    env = {**os.environ, "PYTHONPATH": os.environ.get("PYTHONPATH", ""), "COLUMNS": "160"}
    env.pop("RAY_ADDRESS", None)
    proc = subprocess.Popen([sys.executable, "-m", "capeval.engine.cli", "sweep", str(sweep), "--out", str(tmp_path / "out")],
                            cwd=REPO, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=slave,
                            start_new_session=True)
    os.close(slave)
    chunks = []
    deadline = time.monotonic() + 300
    try:
        while time.monotonic() < deadline:
            try:
                data = os.read(master, 65536)
            except OSError:  # the terminal closed: the process ended
                break
            if not data:
                break
            chunks.append(data)
        proc.wait(timeout=60)
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()
    text = b"".join(chunks).decode(errors="replace")
    assert proc.returncode == 0, text[-3000:]
    for stage in ("decode [shapes]", "caption [local]"):
        bars = [line for line in re.split(r"[\r\n]", text) if stage in line]
        assert bars, f"no {stage} bar in: {text[-2000:]}"
        final = bars[-1]
        # count and throughput (tqdm writes a rate below one a second as seconds per video: a slow machine)
        assert "3/3" in final and re.search(r"video/s|s/video", final), final
        assert re.search(r"<\d\d:\d\d", " ".join(bars)), bars  # an ETA
