"""torchvision on the CPU torch (adapters/vllm_compat.install_torchvision_hook, installed by scripts/env.sh as a
`.pth` start-up line): a fresh interpreter of the venv imports torchvision and runs a transformers video processor,
and without the hook the CUDA-built wheel's import fails (so the hook is what makes it work).

Each check runs in a new subprocess started from a folder outside the repository, as Ray workers and vLLM's engine
processes are: what matters is what a fresh interpreter gets at start-up, not what this test process imported.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

RUN_VIDEO_PROCESSOR = """
import json, sys
import numpy as np
import torchvision  # noqa: F401
from transformers.models.qwen2_vl.video_processing_qwen2_vl import Qwen2VLVideoProcessor
proc = Qwen2VLVideoProcessor(size={"shortest_edge": 28 * 28, "longest_edge": 56 * 56}, patch_size=14,
                             temporal_patch_size=2, merge_size=2)
frames = np.random.default_rng(0).integers(0, 256, (4, 64, 64, 3), dtype=np.uint8)
out = proc(videos=[frames], do_sample_frames=False, return_tensors="np")
print(json.dumps({"grid": out["video_grid_thw"].tolist(), "pixels": list(out["pixel_values_videos"].shape),
                  "hooks": [type(f).__name__ for f in sys.meta_path].count("_TorchvisionImportHook")}))
"""


def _fresh_python(code: str, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, timeout=300)


def test_fresh_interpreter_imports_torchvision_and_runs_a_video_processor(tmp_path):
    p = _fresh_python(RUN_VIDEO_PROCESSOR, tmp_path)
    assert p.returncode == 0, p.stderr[-3000:]
    out = json.loads(p.stdout.strip().splitlines()[-1])
    # 4 frames of 64x64 -> 56x56 (multiple of 28 within 56*56 pixels): 2 temporal patches of 4x4 patches of 14 px,
    # each patch 3 channels x 2 frames x 14 x 14 values
    assert out["grid"] == [[2, 4, 4]]
    assert out["pixels"] == [2 * 4 * 4, 3 * 2 * 14 * 14]
    assert out["hooks"] == 0  # the hook stepped aside after torchvision's first import


def test_without_the_hook_the_cuda_wheel_does_not_import(tmp_path):
    """The venv's torchvision wheel is a CUDA build whose C extension cannot load on the CPU torch: taking the hook
    out of a fresh interpreter before the import makes `import torchvision` fail. (Where the extension loads -- a CPU
    build of torchvision, a CUDA torch -- the hook changes nothing and this check does not apply.)"""
    probe = _fresh_python(
        "import glob, importlib.util, os, torch\n"
        "spec = importlib.util.find_spec('torchvision')\n"
        "libs = glob.glob(os.path.join(list(spec.submodule_search_locations)[0], '_C*.so'))\n"
        "try:\n torch.ops.load_library(libs[0]); print('loads')\nexcept Exception:\n print('fails')\n", tmp_path)
    if probe.stdout.strip() != "fails":
        pytest.skip(f"torchvision's C extension loads here ({probe.stdout.strip() or probe.stderr[-300:]})")
    p = _fresh_python(
        "import sys\n"
        "sys.meta_path[:] = [f for f in sys.meta_path if type(f).__name__ != '_TorchvisionImportHook']\n"
        "import torchvision\n", tmp_path)
    assert p.returncode != 0 and "torchvision" in p.stderr


def test_install_is_idempotent_and_a_no_op_once_imported(tmp_path):
    p = _fresh_python(
        "import sys\n"
        "from capeval.adapters.vllm_compat import install_torchvision_hook\n"
        "install_torchvision_hook(); install_torchvision_hook()\n"
        "n = [type(f).__name__ for f in sys.meta_path].count('_TorchvisionImportHook')\n"
        "import torchvision\n"
        "install_torchvision_hook()\n"
        "m = [type(f).__name__ for f in sys.meta_path].count('_TorchvisionImportHook')\n"
        "print(n, m)\n", tmp_path)
    assert p.returncode == 0, p.stderr[-3000:]
    assert p.stdout.split() == ["1", "0"]
