"""Removes a provider's job containers when the provider dies, whatever killed it.

Run by path, ``python -I container_reaper.py PROVIDER_PID DOCKER_URL LABEL``, one per Docker
executor, started when it starts serving. It waits; when the thread that started it (the
provider's engine) is gone, ``PR_SET_PDEATHSIG`` wakes it and it removes every container
labelled ``LABEL`` (``nunet.node=<this node>``), as ``DockerExecutor.cleanup_orphans`` does
when the provider starts again. Without it a provider killed with SIGKILL, or by the OOM
killer, left its containers running (GPUs included, and no timeout: the provider enforced
it) until it came back, and for ever if it never did.

A provider that stops normally has removed its containers already; the reaper then finds
none. It imports only the standard library until it has work to do.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys

PR_SET_PDEATHSIG = 1
PROVIDER_GONE = signal.SIGRTMIN + 2  # as group_leader.py: nobody else sends it


class _ProviderGone(Exception):
    pass


def _raise(signum: int, frame: object) -> None:
    raise _ProviderGone


def remove_labelled(docker_url: str, label: str) -> int:
    """Remove every container (running or not) carrying ``label``; how many went."""
    import docker  # only now: the reaper spends its life asleep

    client = docker.DockerClient(base_url=docker_url, version="auto", timeout=60)
    removed = 0
    for container in client.containers.list(all=True, filters={"label": label}):
        try:
            container.remove(force=True)
            removed += 1
        except docker.errors.NotFound:
            continue  # gone meanwhile
    return removed


def main(argv: list[str]) -> int:
    if len(argv) != 4:
        print("usage: container_reaper.py PROVIDER_PID DOCKER_URL LABEL", file=sys.stderr)
        return 2
    provider, docker_url, label = int(argv[1]), argv[2], argv[3]
    signal.signal(PROVIDER_GONE, _raise)
    # The provider's own stop (SIGTERM, Ctrl-C in its terminal) is not ours to act on.
    for passed in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(passed, signal.SIG_IGN)
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, int(PROVIDER_GONE), 0, 0, 0) != 0:
        print("container_reaper: prctl(PR_SET_PDEATHSIG) failed", file=sys.stderr)
        return 1
    try:
        if os.getppid() == provider:  # else it died before the prctl: act at once
            while True:
                signal.pause()
    except _ProviderGone:
        pass
    signal.signal(PROVIDER_GONE, signal.SIG_IGN)
    try:
        removed = remove_labelled(docker_url, label)
    except Exception as exc:  # dockerd away: the provider's next start removes them
        _say(f"container_reaper: could not remove {label} containers: {exc}")
        return 1
    if removed:
        _say(f"container_reaper: removed {removed} container(s) of {label}")
    return 0


def _say(line: str) -> None:
    with contextlib.suppress(OSError, ValueError):  # no stderr left: the work is done anyway
        print(line, file=sys.stderr, flush=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
