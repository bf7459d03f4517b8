"""Numba set-up shared by the kernels: an on-disk JIT cache in a writable place.

Numba caches next to the source by default, which fails inside a read-only install; unless the user set
NUMBA_CACHE_DIR we point it at $XDG_CACHE_HOME/capeval/numba so compiled kernels survive across processes.
"""

from __future__ import annotations

import os
from pathlib import Path

if not os.environ.get("NUMBA_CACHE_DIR"):
    _cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "capeval" / "numba"
    try:
        _cache.mkdir(parents=True, exist_ok=True)
        os.environ["NUMBA_CACHE_DIR"] = str(_cache)
    except OSError:  # no writable home: Numba falls back to its own locations
        pass

import numba  # noqa: E402

if os.environ.get("NUMBA_CACHE_DIR") and not numba.config.CACHE_DIR:
    numba.config.CACHE_DIR = os.environ["NUMBA_CACHE_DIR"]

njit = numba.njit
prange = numba.prange
