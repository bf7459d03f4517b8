"""How a `capeval` process ends (engine/cli/__init__.py): called from a program's top level, main() exits the way the
interpreter does -- its code, threads joined, exit handlers run, output flushed -- minus the interpreter's tear-down;
called from a function it returns and the caller goes on."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from capeval.engine import exitcodes

REPO = Path(__file__).resolve().parents[1]


def _python(code: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=120)


def test_top_level_call_exits_with_the_commands_code_after_threads_exit_handlers_and_output(tmp_path):
    script = f"""
        import atexit, sys, threading, time
        from capeval.engine.cli import main
        atexit.register(lambda: open({str(tmp_path / "handler")!r}, "w").write("ran"))
        def late():
            time.sleep(0.5)
            open({str(tmp_path / "thread")!r}, "w").write("joined")
        threading.Thread(target=late).start()
        def queued():
            time.sleep(0.5)
            open({str(tmp_path / "executor")!r}, "w").write("finished")
        from concurrent.futures import ThreadPoolExecutor
        ThreadPoolExecutor(1).submit(queued)  # never shut down: threading's exit callback does it
        sys.stdout.write("x" * 100_000 + "end")  # buffered, not flushed by the script
        sys.exit(main(["sweep", {str(tmp_path / "missing.toml")!r}]))
        """
    run = _python(script, tmp_path)
    assert run.returncode == exitcodes.USAGE, run.stderr
    assert run.stdout == "x" * 100_000 + "end"
    assert "capeval sweep: error" in run.stderr
    assert (tmp_path / "handler").read_text() == "ran"
    assert (tmp_path / "thread").read_text() == "joined"
    assert (tmp_path / "executor").read_text() == "finished"


def test_call_from_a_function_returns_and_the_caller_goes_on(tmp_path):
    script = f"""
        from capeval.engine.cli import main
        def use_the_cli():
            return main(["sweep", {str(tmp_path / "missing.toml")!r}])
        print("first", use_the_cli())
        print("second", use_the_cli())
        """
    run = _python(script, tmp_path)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["first", str(exitcodes.USAGE), "second", str(exitcodes.USAGE)]


def test_top_level_call_skips_the_interpreters_tear_down(tmp_path):
    """What makes a command end sooner: objects still alive at exit are not finalized one by one (with torch,
    transformers and Ray loaded, that tear-down is about 1.5 s of CPU). The same call made from a function ends
    with the tear-down."""
    script = f"""
        import sys
        from capeval.engine.cli import main
        class Finalized:
            def __del__(self, open=open):  # builtins may be gone by then
                open({str(tmp_path / "finalized")!r}, "w").write("yes")
        alive_at_exit = Finalized()
        def from_a_function():
            return main(["sweep", {str(tmp_path / "missing.toml")!r}])
        sys.exit(CALL)
        """
    run = _python(script.replace("CALL", f"main([\"sweep\", {str(tmp_path / 'missing.toml')!r}])"), tmp_path)
    assert run.returncode == exitcodes.USAGE, run.stderr
    assert not (tmp_path / "finalized").exists()
    run = _python(script.replace("CALL", "from_a_function()"), tmp_path)
    assert run.returncode == exitcodes.USAGE, run.stderr
    assert (tmp_path / "finalized").read_text() == "yes"


def test_a_quiet_local_ray_is_shut_down_before_the_exit_handlers(tmp_path):
    """engine/ray_local.py shutdown_before_exit: the Ray init_ray started without --verbose is shut down by capeval
    (Ray's own exit hook would first pause half a second for worker log lines that are not shown)."""
    script = """
        import ray
        from capeval.engine.ray_local import init_ray, shutdown_before_exit
        init_ray(num_cpus=1, object_store_mb=80)
        shutdown_before_exit()
        print("after quiet init_ray:", ray.is_initialized())
        """
    run = _python(script, tmp_path)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "after quiet init_ray: False"
