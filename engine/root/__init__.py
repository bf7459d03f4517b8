"""capeval: a high-throughput evaluation engine for video captions.

The public Python API (capeval.engine.api, docs/api.md) is re-exported here: `capeval.sweep`, `capeval.judge`,
`capeval.load_run` and their result types. The rest of the package is `capeval.engine` (the pipeline),
`capeval.adapters` (judges and captioners), `capeval.kernels` and `capeval.benchmarks`. The API is imported on first
use (PEP 562), so `import capeval` stays cheap: no Polars, Ray or torch until a name of it is used."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

# Polars' allocator (jemalloc) keeps the pages a step freed and hands them back only after a delay; at the end of a
# 100,000-request sweep the metrics' steps left ~60 MB resident through the rest of the run, its peak RSS (issue
# 30). Freed pages go back at once instead: ~30% slower on a loop of nothing but Polars group-bys and joins, and a
# sweep's Polars work is its end steps. Polars appends this variable to its own defaults when it loads, so it must be
# set first: a value the user set wins, and a process that imported Polars before capeval keeps Polars' defaults.
os.environ.setdefault("_RJEM_MALLOC_CONF", "dirty_decay_ms:0,muzzy_decay_ms:0")

__version__ = "0.1.0"
__all__ = ["JudgeResult", "RunTables", "judge", "load_run", "sweep"]

if TYPE_CHECKING:
    from capeval.engine.api import JudgeResult, RunTables, judge, load_run, sweep


def __getattr__(name: str):
    if name in __all__:
        from capeval.engine import api  # deferred: Polars, PyArrow and the engine load on first use

        return getattr(api, name)
    raise AttributeError(f"module 'capeval' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
