"""Errors that end a command with a specific exit code (engine/exitcodes.py); the CLI prints their message as one
line (no traceback unless --debug)."""

from __future__ import annotations

from engine import exitcodes


class CapevalError(Exception):
    exit_code = exitcodes.INTERNAL


class UsageError(CapevalError, ValueError):
    """Bad options or inputs (sweep files, tables, paths): nothing was run."""

    exit_code = exitcodes.USAGE


class AbortedError(CapevalError):
    """The run stopped early (auth refused, lock held by another process, disk full); finished work is kept."""

    exit_code = exitcodes.ABORTED
