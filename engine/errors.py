"""Errors that end a command with a specific exit code (engine/exitcodes.py); the CLI prints their message as one
line (no traceback unless --debug)."""

from __future__ import annotations

import threading

from capeval.engine import exitcodes


class CapevalError(Exception):
    exit_code = exitcodes.INTERNAL


class UsageError(CapevalError, ValueError):
    """Bad options or inputs (sweep files, tables, paths): nothing was run."""

    exit_code = exitcodes.USAGE


class AbortedError(CapevalError):
    """The run stopped early (auth refused, lock held by another process, disk full); finished work is kept."""

    exit_code = exitcodes.ABORTED


class Terminated(KeyboardInterrupt):
    """SIGTERM (a scheduler's time limit: Slurm, Kubernetes; `kill`): it unwinds as Ctrl-C does (finished work is
    kept, a sweep records the run as interrupted) and the CLI exits TERMINATED."""

    exit_code = exitcodes.TERMINATED


_SIGTERM_SEEN = threading.Event()


def sigterm_received() -> bool:
    """True once this process got SIGTERM (under `raise_on_sigterm`). A scheduler signals the whole job at once, so
    the local Ray's GCS, raylet and workers may be ending too: code on the way out then makes no Ray call
    (engine/ray_local.py, `ray_usable`)."""
    return _SIGTERM_SEEN.is_set()


def raise_on_sigterm():
    """Until the returned function is called, a SIGTERM raises Terminated in the main thread (nothing changes in
    another thread: only the main one can set handlers). A second SIGTERM while the first unwinds is ignored, so it
    cannot cut the ending short. Ray replaces the handler when it starts (its C++ one dumps a stack and aborts, exit
    134): engine/ray_local.py puts this one back."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return lambda: None

    def on_sigterm(signum, frame):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        _SIGTERM_SEEN.set()
        raise Terminated("SIGTERM")

    previous = signal.signal(signal.SIGTERM, on_sigterm)
    return lambda: signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)
