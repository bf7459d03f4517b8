"""`capeval` command line. Each subcommand lives in its own module here, exposing `register(subparsers)`;
heavy imports (Ray, vLLM, torch) happen inside the command functions so `capeval --help` stays fast.

Exit codes are the same for every command (engine/exitcodes.py): a command returns OK or FAILURES; errors raised
as capeval.engine.errors.CapevalError end with their own code (USAGE, ABORTED) and a one-line message; bad command lines
exit USAGE (argparse); anything unexpected exits INTERNAL with a one-line message (the traceback with --debug)."""

from __future__ import annotations

import argparse
import atexit
import errno
import importlib
import os
import sys
import threading

from capeval.engine import exitcodes
from capeval.engine.cli.command_tools import CliCommandTools
from capeval.engine.errors import CapevalError, Terminated, raise_on_sigterm
from capeval.engine.frames.sampling import FrameSpecError
from capeval.engine.packs import PackError
from capeval.engine.ray_local import exit_without_ray, flush_and_exit, quiet_libraries, shutdown_before_exit
from capeval.engine.registry import lookup, names
from capeval.engine.safetext import guard_terminal_streams, terminal_text
from capeval.engine.secrets import redact_message
from capeval.engine.store.segments import storage_errno
from capeval.engine.sweep.config import SweepFileError
from capeval.engine.warning_groups import capture_python_warnings

# Subcommand modules, in help order. A module registers one or more subcommands; BENCHMARK_COMMANDS marks where the
# benchmarks' own commands go (each registered protocol's `cli_commands`, in the registry's order).
BENCHMARK_COMMANDS = "<benchmark commands>"
_COMMAND_MODULES = ("demo", BENCHMARK_COMMANDS, "construct", "score", "judge", "align", "sweep", "plan",
                    "compare", "show", "report", "export", "submit", "list", "bench")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="capeval", description="High-throughput evaluation engine for video captions.")
    parser.add_argument("--debug", dest="debug_all", action="store_true", help="show tracebacks of errors")
    parser.add_argument("--verbose", dest="verbose_all", action="store_true",
                        help="show the log lines and warnings of the libraries a command runs (vLLM, Ray, transformers)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in _COMMAND_MODULES:
        if name == BENCHMARK_COMMANDS:
            add_benchmark_commands(sub)
            continue
        importlib.import_module(f"capeval.engine.cli.{name}").register(sub)
    for command in sub.choices.values():  # every command: --verbose shows the libraries' log lines and warnings
        try:
            command.add_argument("--verbose", action="store_true",
                                 help="show the log lines and warnings of the libraries it runs (vLLM, Ray, "
                                      "transformers)")
        except argparse.ArgumentError:  # the command has its own --verbose (same meaning, more said)
            pass
    return parser


def add_benchmark_commands(subparsers) -> None:
    """The commands each registered protocol brings (`JudgeProtocol.cli_commands`, e.g. `capeval <benchmark> ...`),
    handed the CLI's services (engine/cli/command_tools.py)."""
    tools = CliCommandTools()
    for name in names("protocol"):
        lookup("protocol", name).cli_commands(subparsers, tools)


def _usage_errors() -> tuple[type, ...]:
    """Input errors raised by modules that predate capeval.engine.errors: they are the user's to fix (exit USAGE);
    a PackError: a pack missing (official mode without --prompts), unreadable or malformed."""
    return (SweepFileError, FrameSpecError, PackError)


def main(argv: list[str] | None = None) -> int:
    # every line any command (or a library it runs) prints reaches the terminal escaped: labels, categories,
    # options and replies come from the user's files and the judge, and may hold escape sequences
    restore_streams = guard_terminal_streams()
    restore_sigterm = raise_on_sigterm()  # a scheduler's SIGTERM ends a command as Ctrl-C does (exit TERMINATED)
    try:
        code = _main(argv)
    finally:
        restore_sigterm()
        restore_streams()
    exit_without_ray(code)  # after a SIGTERM, Ray's own exit hook could wait a minute on a dead GCS
    if _called_by_program_top_level():
        _end_process(code)
    return code


def _called_by_program_top_level() -> bool:
    """True when main() was called from the top level of the program being run (the `capeval` script,
    `python -m capeval`, a `python -c` line), which exits with main()'s code next; False for a call from a function
    (another program or a test using the CLI in-process), which goes on after it."""
    caller = sys._getframe(2)  # 0: this function, 1: main, 2: main's caller
    return caller.f_code.co_name == "<module>" and caller.f_globals.get("__name__") == "__main__"


def _end_process(code: int) -> None:
    """Exit with `code` as the interpreter does -- threads that are not daemons and executors' queued work waited
    for, exit handlers run (Ray's shutdown, the stores' last commits, logging's flush), standard streams flushed --
    minus the interpreter's own tear-down: once a command has loaded torch, transformers and Ray, garbage-collecting
    and freeing their millions of objects at exit costs about 1.5 s of CPU and does nothing the user can see."""
    # what the interpreter runs first at exit: threading's exit callbacks (concurrent.futures lets its executors'
    # queued work finish there), then every thread that is not a daemon is joined
    threading._shutdown()
    shutdown_before_exit()  # what Ray's exit hook does, before the stores' flush as there, without its pause
    atexit._run_exitfuncs()  # every handler once, newest first, as at a normal exit
    flush_and_exit(code)


def _main(argv: list[str] | None) -> int:
    parser = build_parser()
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)  # bad: exit USAGE (2)
    if not getattr(args, "func", None):
        parser.print_help()
        return exitcodes.USAGE
    debug = getattr(args, "debug", False) or getattr(args, "debug_all", False)
    verbose = bool(getattr(args, "verbose", False) or getattr(args, "verbose_all", False))
    if getattr(args, "verbose_all", False) and hasattr(args, "verbose"):
        args.verbose = True
    name = f"capeval {args.command}"
    quiet_libraries(verbose)  # third-party log lines stay out of the terminal unless --verbose
    try:
        with capture_python_warnings(verbose):  # printed grouped at the end, libraries' only counted
            return int(args.func(args) or 0)
    except BrokenPipeError:  # output piped into `head` and the like: not an error of the command
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return exitcodes.OK
    except KeyboardInterrupt as exc:
        how = "terminated (SIGTERM)" if isinstance(exc, Terminated) else "interrupted"
        print(f"{name}: {how}; finished work is kept and a rerun resumes", file=sys.stderr)
        return getattr(exc, "exit_code", exitcodes.INTERRUPTED)
    except CapevalError as exc:
        if debug:
            raise
        # the whole message: input validation lists every error at once, one per line
        print(f"{name}: {_kind(exc.exit_code)}: {terminal_text(redact_message(str(exc).strip()))}", file=sys.stderr)
        return exc.exit_code
    except Exception as exc:  # noqa: BLE001 - the one place that turns any error into an exit code
        if debug:
            raise
        if isinstance(exc, _usage_errors()) or isinstance(exc, FileNotFoundError):
            print(f"{name}: error: {terminal_text(redact_message(str(exc).strip()))}", file=sys.stderr)
            return exitcodes.USAGE
        if storage_errno(exc) in (errno.ENOSPC, errno.EDQUOT):  # a write no store wrapped: still a full disk
            where = f" writing {exc.filename}" if getattr(exc, "filename", None) else ""
            print(f"{name}: aborted: {os.strerror(storage_errno(exc))}{where}: {_one_line(exc)}; finished work is "
                  "kept, free space and rerun to resume", file=sys.stderr)
            return exitcodes.ABORTED
        print(f"{name}: internal error: {type(exc).__name__}: {_one_line(exc)} (rerun with --debug for the "
              "traceback)", file=sys.stderr)
        return exitcodes.INTERNAL


def _kind(code: int) -> str:
    return {exitcodes.USAGE: "error", exitcodes.ABORTED: "aborted"}.get(code, "error")


def _one_line(exc: BaseException) -> str:
    text = redact_message(str(exc).strip()) or type(exc).__name__
    lines = text.split("\n")
    return terminal_text(lines[0]) + (f" (+{len(lines) - 1} more lines)" if len(lines) > 1 else "")


if __name__ == "__main__":
    sys.exit(main())
