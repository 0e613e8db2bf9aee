#!/usr/bin/env bash
# Install nunet-tui into .venv and open the app (extra arguments go to nunet-tui).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
. "$root/scripts/setup_venv.sh"
exec "$root/.venv/bin/nunet-tui" "$@"
