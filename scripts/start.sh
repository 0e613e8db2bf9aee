#!/usr/bin/env bash
# Install nunet-tui into .venv and start the demo: a sandbox market on 127.0.0.1 and the app
# in consumer mode. Any arguments replace `demo` (e.g. `bash scripts/start.sh --home DIR`).
#
# Only the base package stands between a new user and the first screen. What the example jobs
# import (scikit-learn for iris, then PyTorch and TensorFlow: the `demo` extra, ~1 GB) installs
# in the background, its progress in .venv/demo-extra.log; the demo names that log while it
# is still running, and a job needing a framework not yet installed fails with its import error.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# No extras: the arguments are the app's (setup_venv.sh would read them as its own).
. "$root/scripts/setup_venv.sh" ""
log="$root/.venv/demo-extra.log"
if ! "$root/.venv/bin/python" -c 'import sklearn, torch, tensorflow' >/dev/null 2>&1; then
  if ! { [ -f "$log.pid" ] && kill -0 "$(cat "$log.pid")" 2>/dev/null; }; then
    (
      trap '' HUP # outlives the terminal's hang-up: the install finishes either way
      # The lowest CPU and disk priority: on a small machine the install (a GB of wheels)
      # must not starve the sandbox starting beside it, nor the app.
      renice -n 19 -p "$BASHPID" >/dev/null 2>&1 || true
      ionice -c 3 -p "$BASHPID" >/dev/null 2>&1 || true
      bash "$root/scripts/install_demo_extra.sh" "$log"
      rm -f "$log.pid"
    ) </dev/null >/dev/null 2>&1 &
    echo $! >"$log.pid"
  fi
  export NUNET_TUI_DEMO_EXTRA_LOG="$log"
fi
if [ "$#" -eq 0 ]; then
  set -- demo
fi
exec "$root/.venv/bin/nunet-tui" "$@"
