#!/usr/bin/env bash
# Install everything the tests need into .venv, then lint, type-check, check the import
# contracts and run every test.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
# CI's limit is 90 minutes and our budget 25 (README, "Tests"): every phase says what it took.
started=$SECONDS
phase_start=$SECONDS
phase() {
  echo "   ($(( SECONDS - phase_start )) s)"
  phase_start=$SECONDS
  echo "== $1"
}
finish() {
  local rc=$?
  if [ -n "${started_dockerd:-}" ]; then
    bash scripts/dockerd.sh stop >/dev/null 2>&1 || true
  fi
  local total=$(( SECONDS - started ))
  echo "== total: $(( total / 60 )) min $(( total % 60 )) s (exit $rc)"
  exit "$rc"
}
trap finish EXIT
echo "== set-up (.venv)"
. "$root/scripts/setup_venv.sh" test
# The js-libp2p peer of tests/interop/test_network_interop.py, at the versions of its package-lock.json
# (the tests never download; they fail without it). Reinstalled only when the lock changed.
js="$root/tests/interop/js"
if ! cmp -s "$js/package-lock.json" "$js/node_modules/.nunet-installed-lock" 2>/dev/null; then
  if command -v npm >/dev/null 2>&1; then
    echo "== npm ci (tests/interop/js)"
    (cd "$js" && npm ci --no-audit --no-fund --loglevel=error)
    cp "$js/package-lock.json" "$js/node_modules/.nunet-installed-lock"
  else
    echo "note: no npm: install Node.js >= 20 for tests/interop/test_network_interop.py" >&2
  fi
fi
phase "ruff"
.venv/bin/ruff check engine nunet_tui oracle_client tests scripts bench
.venv/bin/ruff format --check engine nunet_tui oracle_client tests scripts bench
phase "mypy"
.venv/bin/mypy
phase "import contracts"
# The rooms' boundaries: [tool.importlinter] in pyproject.toml (layers, no Textual in the engine,
# subsystems without the node, screens and widgets without the command line, widgets without
# screens).
.venv/bin/lint-imports
phase "job sandbox (bubblewrap)"
# The process executor runs each job in a bwrap sandbox: installed with apt when missing, so
# tests/adversarial/test_process_sandbox.py runs on a fresh Debian machine.
bash scripts/bubblewrap.sh
phase "NAT lab tools (nft, miniupnpd)"
bash scripts/lab_tools.sh
phase "docker engine and test image"
# A private dockerd (installed with apt when missing) and the jobs' image built from Debian
# packages: the container tests run against the real thing. Stopped again on exit if we
# started it.
if ! bash scripts/dockerd.sh status >/dev/null 2>&1; then
  started_dockerd=1
fi
export "$(bash scripts/dockerd.sh start | tail -n 1)"
bash scripts/build_test_image.sh >/dev/null
# PyTorch (CPU) on top, from the local wheel, for the overlay's distributed tests (issue 25);
# exit 3: no wheel here, and those tests skip saying so.
bash scripts/build_torch_image.sh >/dev/null || [ $? -eq 3 ]
echo "DOCKER_HOST=$DOCKER_HOST${started_dockerd:+ (started for this run)}"
phase "pytest"
# Parallel workers (pytest-xdist, `-n` in [tool.pytest.ini_options]); the 30 slowest tests are
# printed: the suite must stay well inside CI's limit.
# A stuck test fails at its limit with every thread's stack (pytest-timeout; faulthandler in
# the worker after 11 minutes at most, pyproject.toml); a run stuck past 45 minutes (three
# times what it takes) is stopped, its own stacks printed (SIGABRT), before CI's 90.
timeout --signal=ABRT --kill-after=60 2700 .venv/bin/python -m pytest --durations=30 "$@"
phase "done"
