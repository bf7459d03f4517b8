#!/usr/bin/env bash
# The whole test suite on a fresh machine: sets up .venv on first use, then runs pytest.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
exec "$ROOT/.venv/bin/python" -m pytest -q --timeout=900 "$@"
