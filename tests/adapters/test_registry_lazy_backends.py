"""Looking a backend up does not start its heavy dependencies: the `vllm` captioner and judge are ordinary registered
plugins, and finding them (the caption stage asks for the captioner's CPUs, the sweep for its revision, `--check`
for its params) imports neither vLLM nor torch; only constructing one does. Run in a fresh interpreter, so nothing
another test imported counts."""

from __future__ import annotations

import json
import os
import subprocess
import sys

PROBE = """
import json, sys
from capeval.engine.registry import lookup, names
from capeval.engine.stages.caption import actor_cpus
from capeval.engine.sweep.config import ComponentSpec
from capeval.engine.sweep.runner import component_revision

captioner = lookup("captioner", "vllm")
judge = lookup("judge", "vllm")
print(json.dumps({
    "captioner": f"{captioner.__module__}.{captioner.__qualname__}",
    "judge": f"{judge.__module__}.{judge.__qualname__}",
    "cpus": actor_cpus("vllm"),
    "revision": component_revision("captioner", ComponentSpec(name="vllm", params={"model": "org/some-vlm"})),
    "listed": names("captioner"),
    "heavy": sorted(m for m in sys.modules if m.split(".")[0] in ("vllm", "torch", "transformers")),
}))
"""


def test_looking_up_the_vllm_backends_imports_neither_vllm_nor_torch(tmp_path):
    env = {**os.environ, "PYTHONPATH": os.environ.get("PYTHONPATH", "")}
    done = subprocess.run([sys.executable, "-c", PROBE], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["captioner"] == "capeval.adapters.vllm_captioner.VLLMCaptioner"
    assert out["judge"] == "capeval.adapters.vllm_engine.VLLMJudge"
    assert out["cpus"] == 1.0
    assert "org/some-vlm" in out["revision"]
    assert {"vllm", "openai", "local"} <= set(out["listed"])
    assert out["heavy"] == []
