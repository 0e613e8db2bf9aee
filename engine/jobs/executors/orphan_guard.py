"""What a provider's jobs do when the provider dies: they go with it, whatever killed it.

Run by path (``python -I orphan_guard.py ROLE PROVIDER_PID ...``: the standard library only,
outside the engine) in one of two roles:

- ``group PROVIDER_PID ARGV...``: the leader of a process-executor job's process group (the
  first process of its new session). It runs the job as its child, and when the provider
  dies it kills the whole group, the job's own children included. ``PR_SET_PDEATHSIG`` on
  the job alone would not do: it is not inherited, so it would end the job's first process
  and leave what that process started. Everything else passes through: the signals the
  provider sends the group (SIGTERM and its grace period, SIGSTOP/SIGCONT for a snapshot,
  SIGKILL) reach the job as before, and the leader ends with the job's exit code or by the
  signal that ended it, so the provider reads the same status (-SIGXCPU, -SIGXFSZ,
  -SIGKILL) as when the job led its group itself.
- ``containers PROVIDER_PID DOCKER_URL LABEL``: one per Docker executor, asleep; when the
  provider dies it removes every container labelled ``LABEL`` (``nunet.node=<this node>``),
  as ``DockerExecutor.cleanup_orphans`` does at the provider's next start. A provider that
  stops normally has removed its containers already, and kills this process.

Before, a provider killed with SIGKILL, or by the OOM killer, left its jobs running
unsupervised until it came back (``ProcessExecutor.kill_orphan``, ``cleanup_orphans``): a
process job until its CPU limit, a container for ever, GPUs included, as the provider was
what enforced its time limit.

The provider's death is told by ``PR_SET_PDEATHSIG`` (Linux: when the thread that started
us, the engine's, ends), or else by a thread that sees us adopted by another parent.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import threading
import time

PR_SET_PDEATHSIG = 1
# Sent to us when the provider is gone: a signal that no provider, and hardly any job,
# sends to a process group.
PROVIDER_GONE = signal.SIGRTMIN + 2 if hasattr(signal, "SIGRTMIN") else signal.SIGUSR2
PASSED_ON = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT)


def _told_of_provider_death(provider: int) -> None:
    """From now on PROVIDER_GONE arrives when the provider dies, also if it already has."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        told = libc.prctl(PR_SET_PDEATHSIG, int(PROVIDER_GONE), 0, 0, 0) == 0
    except (AttributeError, OSError):  # no prctl: not Linux
        told = False
    if not told:

        def watch() -> None:
            while os.getppid() == provider:
                time.sleep(1.0)
            os.kill(os.getpid(), PROVIDER_GONE)

        threading.Thread(target=watch, daemon=True).start()
    elif os.getppid() != provider:  # it died before the prctl: nothing would tell us
        os.kill(os.getpid(), PROVIDER_GONE)


def _say(line: str) -> None:
    with contextlib.suppress(OSError, ValueError):  # no stderr left: the work is done anyway
        print(line, file=sys.stderr, flush=True)


# --- group: a process job's leader ----------------------------------------------------------


def _end_group(signum: int = 0, frame: object = None) -> None:
    os.killpg(0, signal.SIGKILL)  # this process too: the group goes as one


def _ignore(signum: int, frame: object) -> None:
    """A handler, not SIG_IGN: the job's exec resets handlers but keeps ignored signals."""


def lead_group(provider: int, command: list[str]) -> int:
    signal.signal(PROVIDER_GONE, _end_group)
    _told_of_provider_death(provider)
    for passed in PASSED_ON:  # the provider's SIGTERM is for the job, which has its grace time
        signal.signal(passed, _ignore)
    child = os.fork()
    if child == 0:
        try:
            signal.signal(PROVIDER_GONE, signal.SIG_DFL)
            os.execv(command[0], command)
        except OSError as exc:
            _say(f"cannot run {command[0]}: {exc.strerror}")
        os._exit(127)
    _, status = os.waitpid(child, 0)  # retried by Python when a signal interrupts it
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        if sig != signal.SIGKILL:  # its action cannot be set, and is the default already
            signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)  # end as the job ended, for the provider's status
    return os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 1


# --- containers: a Docker executor's reaper ---------------------------------------------------


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


def reap_containers(provider: int, docker_url: str, label: str) -> int:
    signal.signal(PROVIDER_GONE, _raise)
    # The provider's own stop (SIGTERM, Ctrl-C in its terminal) is not ours to act on.
    for passed in PASSED_ON:
        signal.signal(passed, signal.SIG_IGN)
    try:
        _told_of_provider_death(provider)
        while True:
            signal.pause()
    except _ProviderGone:
        pass
    signal.signal(PROVIDER_GONE, signal.SIG_IGN)
    try:
        removed = remove_labelled(docker_url, label)
    except Exception as exc:  # dockerd away: the provider's next start removes them
        _say(f"orphan_guard: could not remove {label} containers: {exc}")
        return 1
    if removed:
        _say(f"orphan_guard: removed {removed} container(s) of {label}")
    return 0


USAGE = (
    "usage: orphan_guard.py group PROVIDER_PID ARGV...\n"
    "       orphan_guard.py containers PROVIDER_PID DOCKER_URL LABEL"
)


def main(argv: list[str]) -> int:
    role, rest = (argv[1], argv[2:]) if len(argv) > 1 else ("", [])
    if role == "group" and len(rest) >= 2 and rest[0].isdigit():
        return lead_group(int(rest[0]), rest[1:])
    if role == "containers" and len(rest) == 3 and rest[0].isdigit():
        return reap_containers(int(rest[0]), rest[1], rest[2])
    _say(USAGE)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
