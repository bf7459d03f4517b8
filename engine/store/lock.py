"""One writer per output folder: an advisory lock (fcntl.flock) on `<folder>/.capeval.lock`.

Why flock: the kernel drops the lock when its holder dies, kill -9 included, so a crashed run never leaves a stale
lock behind and nobody has to delete a file by hand; a second process asking for it gets an answer at once
(non-blocking) instead of writing beside the first. The file holds the holder's PID, host and start time, so the
refusal names who holds the folder. Advisory: it binds capeval processes, not other programs.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import time
from pathlib import Path

from capeval.engine.errors import AbortedError, UsageError

LOCK_NAME = ".capeval.lock"


class LockHeldError(AbortedError):
    """Another live process holds the folder's lock."""


class FolderLock:
    """`with FolderLock(out, purpose="sweep"):` holds the lock of `out` (created if needed) for the block."""

    def __init__(self, folder: str | Path, *, purpose: str = "capeval"):
        self.folder = Path(folder)
        self.path = self.folder / LOCK_NAME
        self.purpose = purpose
        self._fd: int | None = None

    def acquire(self) -> "FolderLock":
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise UsageError(f"cannot use {self.folder} as an output folder: {exc.strerror or exc} "
                             f"(need a writable folder)") from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_holder(fd)
            os.close(fd)
            raise LockHeldError(f"{self.folder} is in use by another capeval run ({holder}); wait for it to finish "
                                f"or use another --out") from None
        # We hold the lock: record who we are (truncate first: an older holder's text may be longer).
        info = {"pid": os.getpid(), "host": socket.gethostname(), "purpose": self.purpose,
                "since": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, (json.dumps(info) + "\n").encode(), 0)
        except OSError as exc:  # a full disk must not stop us from holding the lock; the run's writes will report it
            del exc
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is not None:
            try:
                fcntl.flock(self._fd, fcntl.LOCK_UN)
            finally:
                os.close(self._fd)
                self._fd = None

    def __enter__(self) -> "FolderLock":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


def _read_holder(fd: int) -> str:
    try:
        info = json.loads(os.pread(fd, 4096, 0).decode() or "{}")
    except (OSError, ValueError):
        info = {}
    if not info:
        return "holder unknown"
    return (f"PID {info.get('pid')} on host {info.get('host')}, {info.get('purpose', 'capeval')} "
            f"since {info.get('since')}")
