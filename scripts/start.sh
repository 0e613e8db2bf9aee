#!/usr/bin/env bash
# Install nunet-tui into .venv and start the demo: a sandbox market on 127.0.0.1 and the app
# in consumer mode. Any arguments replace `demo` (e.g. `bash scripts/start.sh --home DIR`).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
. "$root/scripts/setup_venv.sh" demo
if [ "$#" -eq 0 ]; then
  set -- demo
fi
exec "$root/.venv/bin/nunet-tui" "$@"
