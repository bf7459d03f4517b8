#!/usr/bin/env bash
# The whole test suite on a fresh machine: sets up .venv on first use, then runs pytest.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
# The HTML report's browser tests drive headless Chromium from Debian's packages (installed once, as root).
if ! command -v chromium >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "[test] installing chromium (Debian package) for the report's browser tests" >&2
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; } >/dev/null 2>&1 \
    || echo "[test] chromium could not be installed: the browser tests will say so and skip" >&2
fi
# Two workers (pytest-xdist): much of the suite waits on subprocesses, servers and engines, so two tests at a time
# use 2 cores far better than one; tests that must run alone are marked so in tests/conftest.py. `-n 0`: no workers.
exec "$ROOT/.venv/bin/python" -m pytest -q --timeout=900 -n 2 --dist worksteal "$@"
