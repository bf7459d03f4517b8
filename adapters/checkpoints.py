"""Model folders built once on this machine and reused: the build spec a folder was made from is recorded in it, a
build runs in a sibling temp folder renamed into place when complete, and sessions sharing a cache folder build
under a file lock (adapters/smollm2.py; the random-weight checkpoints of capeval.testing). `model_revision` is the
weights identity the model-backed captioners put in caption keys."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

BUILD_SPEC_FILE = "capeval_build.json"
_CHECKOUT = Path(__file__).resolve().parents[1]  # the repository root in a source checkout


def model_cache() -> Path:
    """Where model folders are built: $CAPEVAL_MODEL_CACHE; else .capeval/models of the source checkout capeval runs
    from; else (an installed capeval, which must not write into site-packages) $XDG_CACHE_HOME/capeval/models,
    ~/.cache/capeval/models by default."""
    if os.environ.get("CAPEVAL_MODEL_CACHE"):
        return Path(os.environ["CAPEVAL_MODEL_CACHE"])
    if (_CHECKOUT / ".git").exists():
        return _CHECKOUT / ".capeval" / "models"
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "capeval" / "models"


@contextmanager
def staged_build(out: Path, spec: dict) -> Iterator[Path]:
    """A sibling temp folder to build `out` in. When the block ends without an error, the build spec is written and
    the folder renamed into place (replacing an older build); otherwise it is removed. A killed build therefore never
    leaves a folder that looks complete."""
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
    try:
        yield tmp
        (tmp / BUILD_SPEC_FILE).write_text(json.dumps(spec, indent=1, sort_keys=True))
        if out.exists():
            shutil.rmtree(out)
        os.replace(tmp, out)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def build_once(out: Path, spec: dict, build: Callable[[], None]) -> Path:
    """Run `build()` unless `out` already holds a build of `spec`; several sessions may share one cache directory:
    one builds under a file lock, the others wait and reuse."""
    if _spec_matches(out, spec):
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    import fcntl

    with open(out.parent / f".{out.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not _spec_matches(out, spec):
            build()
    return out


def _spec_matches(out: Path, spec: dict) -> bool:
    try:
        return json.loads((out / BUILD_SPEC_FILE).read_text()) == spec
    except (OSError, json.JSONDecodeError):
        return False  # missing or half-written: rebuild


def model_revision(model: str) -> str:
    """Weights identity: a local folder's config + weight file names and sizes, else the hub id (+ revision)."""
    path = Path(model)
    if path.is_dir():
        h = hashlib.sha256()
        for p in sorted(path.iterdir()):
            if p.suffix in (".json", ".safetensors", ".bin"):
                h.update(f"{p.name}:{p.stat().st_size}".encode())
                if p.name == "config.json":
                    h.update(p.read_bytes())
        return f"dir:{h.hexdigest()[:16]}"
    return f"hub:{model}"
