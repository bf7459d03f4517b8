"""Start (or join) Ray for a capeval command: a local Ray is private by construction, dies with its run, stays quiet.

- `RAY_ADDRESS` set: join that cluster (its network settings are the cluster operator's business).
- Otherwise a private local Ray (never one that `ray start` left running on the machine), bound to loopback
  whatever the environment: Ray 2.60 turns `_node_ip_address="127.0.0.1"` into the machine's external address
  (`services.resolve_ip_for_localhost`) unless `RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER` is false, and then binds the GCS,
  raylet, workers and the driver to `::` and the agents to the external address. `_private_network()` therefore
  sets that variable to 0 for this process and every Ray process it starts, and also the flag Ray already read from
  it at `import ray` (`ray_constants.ENABLE_RAY_CLUSTER`). Every listening socket of the session is then on
  127.0.0.1 (checked from a clean environment by tests/faults/test_faults_loopback.py); no dashboard; a bounded
  object store. Nothing on the machine's other interfaces can reach it.
  The variable and the flag stay set in this process afterwards (it runs a private local Ray; a later `RAY_ADDRESS`
  join from the same process is not a use capeval has).
- A watchdog (engine/ray_reaper.py, its own session, started before Ray's first process so a kill during
  `ray.init` is covered too) SIGKILLs every process of that local Ray once the driver is gone, however it died (it
  knows them by an environment marker, unique to the run, that `init_ray` sets just before Ray starts):
  `kill -9` of a run leaves no agent, worker or port behind (tests/faults/test_ray_cleanup.py). Ray 2.60 cannot
  start a node without its DashboardAgent and RuntimeEnvAgent, so they are reaped rather than avoided.
- Token authentication stays on (Ray's default for a new local cluster). Ray announces that default with a warning
  on every start; it is one of the log lines kept out of the terminal below. (Setting `RAY_AUTH_MODE=token` after
  `import ray` is not a way to silence it: the driver's already-initialised config would then send no token.)
- Ray's own log lines and worker output stay out of the terminal unless `verbose` (they are in Ray's session logs).
"""

from __future__ import annotations

import contextlib
import logging
import os
from typing import NoReturn

from capeval.engine.errors import sigterm_received
from capeval.engine.ray_reaper import MARKER_ENV, new_marker, start_watchdog

LOOPBACK = "127.0.0.1"


def init_ray(*, verbose: bool = False, num_cpus: int | None = None, object_store_mb: int = 256,
             temp_dir: str | None = None) -> None:
    import ray

    global _QUIET_RAY
    if ray.is_initialized():
        return
    _QUIET_RAY = not verbose
    level = logging.INFO if verbose else logging.ERROR
    if os.environ.get("RAY_ADDRESS"):
        with _sigterm_handler_kept():
            ray.init(address=os.environ["RAY_ADDRESS"], log_to_driver=verbose, logging_level=level)
        return
    # address="local": always a new private instance; a bare ray.init() would join any cluster started on this
    # machine with `ray start` (someone else's, listening who knows where).
    kwargs = dict(address="local", num_cpus=num_cpus or max(2, os.cpu_count() or 2), include_dashboard=False, log_to_driver=verbose,
                  logging_level=level, object_store_memory=object_store_mb * 1024 * 1024,
                  _node_ip_address=LOOPBACK, dashboard_host=LOOPBACK)
    if temp_dir:
        kwargs["_temp_dir"] = temp_dir
    if not verbose:
        _quiet_ray_loggers()
    _private_network()
    _watch()
    with _sigterm_handler_kept():
        ray.init(**kwargs)


def ray_usable() -> bool:
    """False once this process got SIGTERM. Slurm signals every process of a job at a time limit, Ray's GCS,
    raylet and workers too, and a call that needs the GCS (ray.kill, ray.get or ray.wait on a dead actor's call,
    ray.shutdown) then blocks until Ray's core worker ends the driver after 60 s with exit 1, before the run's record
    is written. Clean-up on the way out skips Ray then: the watchdog SIGKILLs what is left once the driver exits."""
    return not sigterm_received()


def exit_without_ray(code: int) -> None:
    """End the process now with `code` when it got SIGTERM while a Ray was up: Ray's exit hook (ray.shutdown) would
    wait on a GCS the same signal may have ended (see `ray_usable`). The run's record and output are written by
    then; streams are flushed here; the watchdog reaps Ray's processes (a private local Ray) once the driver is
    gone, and a joined cluster's raylet notices the driver's exit itself."""
    import sys

    ray = sys.modules.get("ray")
    if ray_usable() or ray is None or not ray.is_initialized():
        return
    flush_and_exit(code)


def flush_and_exit(code: int) -> NoReturn:
    """Flush the standard streams and end the process with `code` at once (no exit handlers, no tear-down)."""
    import sys

    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001 - a closed pipe: nothing more to say
            pass
    os._exit(code)


_QUIET_RAY = False  # whether this process's Ray was started (or joined) by init_ray without --verbose


def shutdown_before_exit() -> None:
    """Shut down the Ray that init_ray started or joined, for a command about to exit. Ray's own exit hook does the
    same but first sleeps half a second so that its workers' last log lines reach the terminal; capeval shows those
    lines only with --verbose, so without it the pause is skipped (with it, or for a Ray init_ray did not start,
    Ray's hook is left to do it). Does nothing after a SIGTERM (see `ray_usable`)."""
    import sys

    ray = sys.modules.get("ray")
    if ray is None or not ray.is_initialized() or not _QUIET_RAY or not ray_usable():
        return
    ray.shutdown()


@contextlib.contextmanager
def _sigterm_handler_kept():
    """Ray sets its own SIGTERM handlers when it starts (a Python one that exits 1, then its core worker's C++ one,
    which prints a stack dump and aborts: exit 134). A Python handler set before (the CLI's: SIGTERM ends a run as
    Ctrl-C does, capeval.engine.errors.raise_on_sigterm) is put back; Ray's processes are still ended at exit and by the
    watchdog."""
    import signal
    import threading

    main = threading.current_thread() is threading.main_thread()
    before = signal.getsignal(signal.SIGTERM) if main else None
    try:
        yield
    finally:
        if callable(before):
            signal.signal(signal.SIGTERM, before)


_WATCHDOG = None  # the watchdog of this process's local Ray (kept so its exit status is collected)


def _watch() -> None:
    """Start the watchdog (engine/ray_reaper.py) before Ray's first process, so a kill during `ray.init` is covered,
    then mark this process's environment: every process started from here on (Ray's GCS, raylet, agents, workers)
    inherits the run's marker, which is how the watchdog knows them."""
    global _WATCHDOG
    if _WATCHDOG is not None:
        _WATCHDOG.poll()  # the previous one exited after a ray.shutdown(): collect it
    marker = new_marker()
    _WATCHDOG = start_watchdog(os.getpid(), marker)
    os.environ[MARKER_ENV] = marker


def _private_network() -> None:
    """Loopback for this local Ray whatever the caller's environment (see the module doc): the variable for the Ray
    processes about to start (they read it at import), the flag for this one (it read it at `import ray`)."""
    from ray._private import ray_constants

    os.environ[ray_constants.ENABLE_RAY_CLUSTERS_ENV_VAR] = "0"
    ray_constants.ENABLE_RAY_CLUSTER = False


#: environment that keeps model loaders (transformers, huggingface_hub, vLLM) from printing load bars and INFO
#: lines; set before Ray starts so workers and actors inherit it. `--verbose` leaves everything as it is.
QUIET_ENV = {"TRANSFORMERS_VERBOSITY": "error", "HF_HUB_DISABLE_PROGRESS_BARS": "1", "TOKENIZERS_PARALLELISM": "false",
             "VLLM_LOGGING_LEVEL": "ERROR", "TRANSFORMERS_NO_ADVISORY_WARNINGS": "1"}


#: environment for `--verbose`: the libraries' log lines without colour codes
VERBOSE_ENV = {"VLLM_LOGGING_COLOR": "0", "RAY_COLOR_PREFIX": "0"}


def quiet_libraries(verbose: bool = False) -> None:
    """Model loaders' noise stays out of the terminal unless `verbose` (values the user set are kept)."""
    if verbose:
        # the libraries' lines are shown, without colour: the CLI prints control characters escaped
        # (engine/safetext.py TerminalStream), and a colour code would read "\x1b[32m" there
        for key, value in VERBOSE_ENV.items():
            os.environ.setdefault(key, value)
        return
    for key, value in QUIET_ENV.items():
        os.environ.setdefault(key, value)
    # vLLM logs a few lines at import, before its own logging set-up reads VLLM_LOGGING_LEVEL
    try:
        logging.getLogger("vllm").setLevel(os.environ.get("VLLM_LOGGING_LEVEL", "ERROR").upper())
    except ValueError:  # a level name vLLM itself will refuse: not ours to report
        pass
    try:  # already imported (e.g. by a judge built earlier): switch their bars off directly too
        import sys

        if "transformers" in sys.modules:
            from transformers.utils import logging as tlog

            tlog.set_verbosity_error()
            tlog.disable_progress_bar()
    except Exception:  # noqa: BLE001 - quieting is best effort, never a reason to fail a run
        pass


def _quiet_ray_loggers() -> None:
    """Ray logs start-up INFO/WARNING lines through the `ray` logger tree before `logging_level` applies."""
    for name in ("ray", "ray._private", "ray._private.authentication", "ray._private.worker"):
        logging.getLogger(name).setLevel(logging.ERROR)
