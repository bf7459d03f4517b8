"""capeval: a high-throughput evaluation engine for video captions.

The public Python API (capeval.engine.api, docs/api.md) is re-exported here: `capeval.sweep`, `capeval.judge`,
`capeval.load_run` and their result types. The rest of the package is `capeval.engine` (the pipeline),
`capeval.adapters` (judges and captioners), `capeval.kernels` and `capeval.benchmarks`. The API is imported on first
use (PEP 562), so `import capeval` stays cheap: no Polars, Ray or torch until a name of it is used."""

from __future__ import annotations

from typing import TYPE_CHECKING

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
