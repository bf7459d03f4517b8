#!/usr/bin/env python
"""Submit a sweep to a running Ray cluster as a Ray Job: the same as `capeval submit` (engine/cli/submit.py).

    python cluster/submit.py examples/capquiz_vllm_gpu.toml --address http://HEAD:8265 --out runs/gpu
    python cluster/submit.py sweep.toml --dry-run          # stage the sweep and print the job only

The sweep file may sit anywhere; the files it declares (datasets, their media, caption files, prompt files and
packs) travel with the job, from the sweep's folder, the dataset folders and `--allow-root` folders only; a
credential value in the sweep is refused (name an environment variable: `api_key_env`). See cluster/README.md.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from capeval.engine.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(["submit", *sys.argv[1:]]))
