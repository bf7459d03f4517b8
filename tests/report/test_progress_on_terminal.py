"""Progress bars on a real terminal (a pseudo-terminal) under the CLI's escaping streams: tqdm's own cursor moves
(two bars at once, a warning above them) reach the terminal as escape sequences, while a hostile label in a bar's
description or counts is shown escaped."""

from __future__ import annotations

import fcntl
import os
import pty
import select
import struct
import subprocess
import sys
import termios
import textwrap
from pathlib import Path

from tests._terminal_escapes import HOSTILE

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent(f"""
    import time
    from capeval.engine.safetext import guard_terminal_streams
    guard_terminal_streams()
    from capeval.engine.stages.progress import Bar
    decode = Bar(3, "decode [shapes]", "video", True)
    caption = Bar(3, "caption [" + {HOSTILE!r} + "]", "video", True)
    for _ in range(3):
        decode.update(1)
        caption.update(1)
        caption.set_counts("failed 1/3 (" + {HOSTILE!r} + ")")
        time.sleep(0.6)
    caption.warn("warning: " + {HOSTILE!r})
    decode.close()
    caption.close()
""")


def _run_on_terminal(script: str) -> bytes:
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 160, 0, 0))  # tqdm sizes its bar to it
    env = dict(os.environ, PYTHONPATH=os.environ.get("PYTHONPATH", ""))
    proc = subprocess.Popen([sys.executable, "-c", script], stdin=follower, stdout=follower, stderr=follower,
                            cwd=ROOT, env=env, close_fds=True)
    os.close(follower)
    out = b""
    try:
        while True:
            ready, _, _ = select.select([leader], [], [], 120)
            if not ready:
                break
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # the child closed the terminal
                break
            if not chunk:
                break
            out += chunk
    finally:
        proc.wait(timeout=60)
        os.close(leader)
    assert proc.returncode == 0, out.decode(errors="replace")
    return out


def test_bars_move_the_cursor_and_escape_untrusted_text():
    out = _run_on_terminal(SCRIPT)
    text = out.decode(errors="replace")
    assert b"\x1b[A" in out, f"two bars at once: tqdm moves the cursor up between them:\n{text}"
    assert b"\\x1b[A" not in out, f"tqdm's cursor move was printed escaped, as text:\n{text}"
    assert b"\x1b" not in out.replace(b"\x1b[A", b""), f"raw escape sequence other than tqdm's own:\n{text}"
    assert b"\x07" not in out
    for shown in ("caption [\\x1b]0;pwned\\x07", "failed 1/3 (\\x1b]0;pwned\\x07", "warning: \\x1b]0;pwned\\x07"):
        assert shown in text, f"{shown!r} not shown escaped:\n{text}"
