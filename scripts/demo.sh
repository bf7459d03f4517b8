#!/usr/bin/env bash
# The main job on a fresh machine: sets up .venv on first use, then runs the capeval demo.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
exec "$ROOT/.venv/bin/python" -m capeval.engine.cli demo "$@"
