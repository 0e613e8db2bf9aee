"""The leader of a process-executor job's process group: it runs the job as its child, and
when the provider dies it ends the whole group, the job's own children included.

Run by path, ``python -I group_leader.py PROVIDER_PID ARGV...``, as the first process of the
job's new session (it uses only the standard library: it runs outside the engine, with the
job's environment). Without it a provider killed with SIGKILL, or by the OOM killer, left its
jobs running unsupervised until it came back (``ProcessExecutor.kill_orphan``), or until
their CPU limit if it never did. ``PR_SET_PDEATHSIG`` alone would not do: it is not
inherited, so it would end the job's first process and leave the children that process
started.

Everything else passes through: the signals the provider sends to the group (SIGTERM and
its grace period, SIGSTOP/SIGCONT for a snapshot, SIGKILL) reach the job as before; the
leader exits with the job's exit code, or by the signal that ended it, so the provider reads
the same status (-SIGXCPU, -SIGXFSZ, -SIGKILL) as when the job was the leader itself.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

PR_SET_PDEATHSIG = 1
# Sent to the leader when the thread that started it (the provider's engine) is gone: a
# signal that no provider, and hardly any job, sends to a process group.
PROVIDER_GONE = signal.SIGRTMIN + 2
PASSED_ON = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT)


def _end_group(signum: int = 0, frame: object = None) -> None:
    os.killpg(0, signal.SIGKILL)  # this process too: the group goes as one


def _ignore(signum: int, frame: object) -> None:
    """A handler, not SIG_IGN: the job's exec resets handlers but keeps ignored signals."""


def main(argv: list[str]) -> int:
    if len(argv) < 3:
        print("usage: group_leader.py PROVIDER_PID ARGV...", file=sys.stderr)
        return 2
    provider, command = int(argv[1]), argv[2:]
    signal.signal(PROVIDER_GONE, _end_group)
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, int(PROVIDER_GONE), 0, 0, 0) != 0:
        print("group_leader: prctl(PR_SET_PDEATHSIG) failed", file=sys.stderr)
    if os.getppid() != provider:  # the provider died before the prctl: nothing would tell us
        _end_group()
    for passed in PASSED_ON:  # the provider's SIGTERM is for the job, which has its grace time
        signal.signal(passed, _ignore)
    child = os.fork()
    if child == 0:
        try:
            signal.signal(PROVIDER_GONE, signal.SIG_DFL)
            os.execv(command[0], command)
        except OSError as exc:
            print(f"cannot run {command[0]}: {exc.strerror}", file=sys.stderr)
        os._exit(127)
    _, status = os.waitpid(child, 0)  # retried by Python when a signal interrupts it
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        if sig != signal.SIGKILL:  # its action cannot be set, and is the default already
            signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)  # end as the job ended, for the provider's status
    return os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
