#!/usr/bin/env bash
# What the example jobs import, into .venv, its progress in LOG (start.sh runs this in the
# background): scikit-learn first (the iris example), then the `demo` extra (PyTorch and
# TensorFlow, ~1 GB). The log's last line is "done", or "failed ..." when any step failed
# (nunet_tui/cli/demo.py reads it and tells the app).
# usage: bash scripts/install_demo_extra.sh LOG   (PYTHON: the interpreter to install into)
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
log="$1"
python="${PYTHON:-$root/.venv/bin/python}"
pip=("$python" -m pip --disable-pip-version-check install --progress-bar off)
# Each step only after the one before succeeded: with `set -e` inside a `{ } ||` group the
# shell ignores failures, and the log said "done" after pip had failed.
{
  echo "installing scikit-learn (the iris example)" &&
    "${pip[@]}" "scikit-learn>=1.2" &&
    echo "installing the demo extra: PyTorch and TensorFlow (the other examples)" &&
    "${pip[@]}" -e "$root[demo]" &&
    echo "done"
} >"$log" 2>&1 || echo "failed (see above); retry with: bash scripts/start.sh" >>"$log"
