"""capeval: a high-throughput evaluation engine for video captions.

The public Python API (capeval.engine.api) is re-exported here; the rest of the package is
`capeval.engine` (the pipeline), `capeval.adapters` (judges and captioners), `capeval.kernels` and
`capeval.benchmarks`. Names are loaded on first use, so `import capeval` stays cheap."""

from __future__ import annotations

__version__ = "0.1.0"
