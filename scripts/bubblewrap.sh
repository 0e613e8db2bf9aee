#!/usr/bin/env bash
# bwrap for the process executor's job sandbox (engine/jobs/executors/sandbox.py): installed
# with apt (Debian package bubblewrap) when missing and we are root; otherwise a note, and the
# sandbox tests skip (tests/adversarial/test_process_sandbox.py). Prints what it found.
set -euo pipefail
if ! command -v bwrap >/dev/null 2>&1; then
  if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "bubblewrap.sh: installing bubblewrap ..." >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q bubblewrap >&2 ||
      { apt-get update -q >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q bubblewrap >&2; } ||
      true
  fi
fi
if ! command -v bwrap >/dev/null 2>&1; then
  echo "note: no bwrap: install bubblewrap (apt-get install bubblewrap) for the process-job sandbox and its tests" >&2
  exit 0
fi
# A trial sandbox: a kernel or container that refuses user namespaces fails here.
if bwrap --unshare-all --unshare-user --uid 65534 --gid 65534 --ro-bind / / --dev /dev --proc /proc true 2>/dev/null; then
  echo "bwrap $(bwrap --version | awk '{print $2}'): process jobs are sandboxed"
else
  echo "note: bwrap cannot make a sandbox here (user namespaces refused?): process jobs run unsandboxed, the sandbox tests skip" >&2
fi
