#!/usr/bin/env bash
# Install everything the tests need into .venv, then lint, type-check and run every test.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
. "$root/scripts/setup_venv.sh" test
echo "== ruff"
.venv/bin/ruff check engine nunet_tui oracle_client tests scripts bench
.venv/bin/ruff format --check engine nunet_tui oracle_client tests scripts bench
echo "== mypy"
.venv/bin/mypy
echo "== pytest"
.venv/bin/python -m pytest "$@"
