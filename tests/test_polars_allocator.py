"""`import capeval` sets Polars' allocator (jemalloc) to hand the pages a step freed back at once (engine/root/
__init__.py): with Polars' defaults a sweep's end steps left tens of MB resident for the rest of the run (issue 30's
scale RSS). A value the user set for the same variable is kept. Each check runs in a fresh process: the allocator
reads its settings once, when Polars loads."""

from __future__ import annotations

import json
import os
import subprocess
import sys

_STEP = """
import json, os
import capeval  # first, as `capeval ...` and a script's `import capeval` do
import polars as pl

def rss_mb():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS"):
            return int(line.split()[1]) / 1024

base = rss_mb()
frame = pl.DataFrame({"a": range(2_000_000), "b": [str(i) for i in range(2_000_000)]})
grouped = frame.group_by("a").agg(pl.col("b").first()).sort("a")
peak = rss_mb()
del frame, grouped
print(json.dumps({"base": base, "peak": peak, "after": rss_mb(), "conf": os.environ.get("_RJEM_MALLOC_CONF")}))
"""


def _run(env: dict) -> dict:
    proc = subprocess.run([sys.executable, "-c", _STEP], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_memory_a_polars_step_freed_leaves_the_process():
    env = {k: v for k, v in os.environ.items() if k != "_RJEM_MALLOC_CONF"}
    got = _run(env)
    grown = got["peak"] - got["base"]
    assert grown > 50, got  # the step did take memory
    assert got["after"] - got["base"] < 0.25 * grown, got  # Polars' defaults kept all of it (measured: 100%)


def test_a_setting_the_user_made_is_kept():
    got = _run({**os.environ, "_RJEM_MALLOC_CONF": "dirty_decay_ms:2000"})
    assert got["conf"].endswith("dirty_decay_ms:2000") and "muzzy_decay_ms:0" not in got["conf"], got
