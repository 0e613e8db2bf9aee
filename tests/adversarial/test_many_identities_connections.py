"""Many identities, one or two addresses: connection slots (issue 21 §1).

Identities are free: 249 of them from one address completed the handshake and held every
inbound slot of a real daemon (py-libp2p admits ~250), and a newcomer never got in. Now an
address may hold ``max_inbound_per_ip`` (32) established inbound connections and a subnet
``max_inbound_per_subnet`` (64), strangers together all but a reserve, and peers in good
standing pass (engine/network/pending_gate.py).

Eight attacker processes, 36 identities each, from 127.0.0.2-9 (Linux routes all of 127/8
to the loopback; each loopback address counts as its own subnet), each identity holding its
connection; an honest newcomer from 127.0.0.1 then joins within seconds. Before the quotas,
300 identities from two addresses held ~250 connections and the newcomer stayed out; before
the eviction, many addresses each within its quota filled the strangers' share and did so.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

from engine.jobs.provider import STREAMS_PER_ADDRESS
from tests.conftest import REPO, run_cli
from tests.daemon_harness import Daemon, wait_for
from tests.daemons.test_jobs_e2e import _pair, _state, _submit, scripts

__all__ = ["scripts"]

IDENTITIES = 150
PER_IP = 32  # [network] max_inbound_per_ip's default


class Dialer:
    """One ``sybil_dialer`` process; ``held``, ``tried`` and ``streams`` are its last report."""

    def __init__(
        self, target: str, count: int, source: str, protocol: str = "", streams: int = 0
    ) -> None:
        self.held = self.tried = self.streams = 0
        args = [target, str(count), source] + ([protocol, str(streams)] if protocol else [])
        self._start("tests.adversarial.sybil_dialer", args)

    def _start(self, module: str, args: list[str]) -> None:
        """Run ``python -m module *args``; its stdout lines go to ``_read``."""
        self.proc = subprocess.Popen(
            [sys.executable, "-m", module, *args],
            cwd=REPO,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            parts = line.split()
            if len(parts) == 6 and parts[0] == "held":
                self.held, self.tried, self.streams = int(parts[1]), int(parts[3]), int(parts[5])

    def close(self) -> None:
        with contextlib.suppress(Exception):
            assert self.proc.stdin is not None
            self.proc.stdin.close()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)


@contextlib.contextmanager
def dialers(
    target: str, sources: tuple[str, ...], count: int = IDENTITIES, **streams: Any
) -> Iterator[list[Dialer]]:
    started = [Dialer(target, count, source, **streams) for source in sources]
    try:
        yield started
    finally:
        for dialer in started:
            dialer.close()


def _connected(daemon: Daemon) -> int:
    return int(daemon.cli("network", "status")["connected_peers"])


# Eight attacker addresses, each past its quota, together past every place strangers may
# take (8 x 32 > 224): the per-address quota and the total are both under attack.
SOURCES = tuple(f"127.0.0.{i}" for i in range(2, 10))
PER_SOURCE = 36
STRANGERS_TOTAL = 224  # pending_gate: MAX_ESTABLISHED_INBOUND - INBOUND_RESERVE


def test_many_identities_from_many_addresses_leave_room_for_a_newcomer(
    daemons: Callable[..., Daemon],
) -> None:
    """288 identities from eight addresses: each address keeps at most its quota, all of
    them at most the strangers' share, and a newcomer from another address still joins (it
    takes the place of the heaviest subnet's oldest stranger). Before the eviction, with
    every stranger's place taken by many addresses each within quota, no newcomer got in
    (the many-identity soak: never within 30 s)."""
    victim = daemons("victim", 60)
    target = victim.addrs()[0]
    with dialers(target, SOURCES, count=PER_SOURCE) as attackers:
        wait_for(
            lambda: all(a.tried == PER_SOURCE for a in attackers),
            "the attackers never finished dialling",
            120,
        )
        # Each address keeps at most its quota: the rest were closed after their handshake.
        wait_for(lambda: all(a.held <= PER_IP for a in attackers), "over the quota", 20)
        held = [a.held for a in attackers]
        assert sum(held) >= STRANGERS_TOTAL - 8, held  # every stranger's place was taken
        newcomer = daemons("newcomer", 61, bootstrap=target)
        victim_id = victim.peer_id

        def talks() -> bool:
            """A stream over a connection that stays: a refused newcomer is connected for a
            moment after its handshake, then closed, and no stream opens."""
            sent = run_cli("chat", "send", victim_id, "hello", "--json", home=newcomer.home)
            return sent.returncode == 0 and json.loads(sent.stdout)["status"] == "delivered"

        wait_for(talks, "the newcomer never got in", 20)
        assert _connected(victim) <= STRANGERS_TOTAL + 2


def test_idle_job_streams_of_many_identities_leave_room_for_an_honest_job(
    daemons: Callable[..., Daemon], scripts: str
) -> None:
    """Job streams: 32 identities from 127.0.0.2 each keep 16 idle ``/nunet/job`` streams
    open, re-opening each one the provider resets (512 wanted, past the node's 256). Before
    the fix (per peer and in all only) they filled the 256 and the honest submit failed
    ("the provider closed the stream without answering"); now the address holds at most
    STREAMS_PER_ADDRESS and the honest consumer's job, from 127.0.0.1, completes."""
    provider, consumer = _pair(daemons)
    target = provider.addrs()[0]
    with dialers(target, ("127.0.0.2",), 32, protocol="/nunet/job/1.0.0", streams=16) as (a,):
        wait_for(lambda: a.streams >= STREAMS_PER_ADDRESS // 2, "the attack never began", 60)
        job = _submit(consumer, f"{scripts}/iris.py", name="honest")
        assert job["provider"] == provider.peer_id, job
        wait_for(lambda: _state(consumer, job["job_id"]) == "completed", "honest job failed", 90)
        # The attacker counts a stream once negotiated, a moment before a refusal resets it,
        # and re-opens each at once: on two loaded cores its count hovers above the cap for
        # a while (56-58 seen in 10 s) and comes down to it whenever the refusals catch up
        # (it wanted 512; before the fix it held 256).
        wait_for(lambda: a.streams <= STREAMS_PER_ADDRESS, f"{a.streams} streams held", 40)
