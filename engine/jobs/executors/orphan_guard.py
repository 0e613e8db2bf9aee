"""What a provider's jobs do when the provider dies: they go with it, whatever killed it.

Run by path (``python -I orphan_guard.py ROLE PROVIDER_PID LIFELINE_FD ...``: the standard
library only, outside the engine) in one of two roles:

- ``group PROVIDER_PID LIFELINE_FD ARGV...``: the leader of a process-executor job's process
  group (the first process of its new session). It runs the job as its child, and when the provider
  dies it kills the whole group, the job's own children included. ``PR_SET_PDEATHSIG`` on
  the job alone would not do: it is not inherited, so it would end the job's first process
  and leave what that process started. Everything else passes through: the signals the
  provider sends the group (SIGTERM and its grace period, SIGSTOP/SIGCONT for a snapshot,
  SIGKILL) reach the job as before, and the leader ends with the job's exit code or by the
  signal that ended it, so the provider reads the same status (-SIGXCPU, -SIGXFSZ,
  -SIGKILL) as when the job led its group itself.
- ``containers PROVIDER_PID LIFELINE_FD DOCKER_URL LABEL``: one per Docker executor, asleep;
  when the provider dies it removes every container labelled ``LABEL`` (``nunet.node=<this node>``),
  as ``DockerExecutor.cleanup_orphans`` does at the provider's next start. A provider that
  stops normally has removed its containers already, and kills this process.

Before, a provider killed with SIGKILL, or by the OOM killer, left its jobs running
unsupervised until it came back (``ProcessExecutor.kill_orphan``, ``cleanup_orphans``): a
process job until its CPU limit, a container for ever, GPUs included, as the provider was
what enforced its time limit.

The provider's death is told by its lifeline (``LIFELINE_FD``, engine/jobs/executors/base.py
``provider_lifeline``): a pipe whose only write end the provider process holds, so a read
returns EOF when the provider ends, by whatever means. ``PR_SET_PDEATHSIG``, used before,
fires when the *thread* that started us exits, not the process: trio starts processes from
worker threads that end after 10 idle seconds, and every process job longer than that was
killed with SIGKILL while its provider ran on. ``PROVIDER_PID`` is there for ``ps``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading

# Sent to us when the provider is gone: a signal that no provider, and hardly any job,
# sends to a process group.
PROVIDER_GONE = signal.SIGRTMIN + 2 if hasattr(signal, "SIGRTMIN") else signal.SIGUSR2
PASSED_ON = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT)


def _told_of_provider_death(lifeline: int) -> None:
    """From now on PROVIDER_GONE arrives when the provider ends, also if it already has."""
    os.set_inheritable(lifeline, False)  # the guard's alone: never the job's

    def watch() -> None:
        with contextlib.suppress(OSError):
            while os.read(lifeline, 1):  # nobody writes: b"" (EOF) once the provider is gone
                pass
        os.kill(os.getpid(), PROVIDER_GONE)

    threading.Thread(target=watch, name="lifeline", daemon=True).start()


def _say(line: str) -> None:
    with contextlib.suppress(OSError, ValueError):  # no stderr left: the work is done anyway
        print(line, file=sys.stderr, flush=True)


# --- group: a process job's leader ----------------------------------------------------------


def _end_group(signum: int = 0, frame: object = None) -> None:
    os.killpg(0, signal.SIGKILL)  # this process too: the group goes as one


def _ignore(signum: int, frame: object) -> None:
    """A handler, not SIG_IGN: the job's exec resets handlers but keeps ignored signals."""


def lead_group(lifeline: int, command: list[str]) -> int:
    signal.signal(PROVIDER_GONE, _end_group)
    _told_of_provider_death(lifeline)
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


def reap_containers(lifeline: int, docker_url: str, label: str) -> int:
    signal.signal(PROVIDER_GONE, _raise)
    # The provider's own stop (SIGTERM, Ctrl-C in its terminal) is not ours to act on.
    for passed in PASSED_ON:
        signal.signal(passed, signal.SIG_IGN)
    try:
        _told_of_provider_death(lifeline)
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
    "usage: orphan_guard.py group PROVIDER_PID LIFELINE_FD ARGV...\n"
    "       orphan_guard.py containers PROVIDER_PID LIFELINE_FD DOCKER_URL LABEL"
)


def main(argv: list[str]) -> int:
    role, rest = (argv[1], argv[2:]) if len(argv) > 1 else ("", [])
    numbers = len(rest) >= 2 and rest[0].isdigit() and rest[1].isdigit()
    if role == "group" and numbers and len(rest) >= 3:
        return lead_group(int(rest[1]), rest[2:])
    if role == "containers" and numbers and len(rest) == 4:
        return reap_containers(int(rest[1]), rest[2], rest[3])
    _say(USAGE)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
