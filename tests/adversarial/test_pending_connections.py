"""One address holds idle TCP connections to a real daemon, re-opening each one it loses.

py-libp2p 0.8.1 takes one of its ~250 inbound slots for each accepted TCP connection, before
a byte is read: ~400 idle connections from one address (each dropped after a few seconds and
opened again) kept every honest peer out; none got in within 30 s. Now an address may have
16 connections in their handshake (``[network] max_pending_per_ip``); the rest are closed at
once, and an honest peer from another address joins as if nothing were going on
(engine/network/pending_gate.py).

The attacker binds 127.0.0.9: Linux routes all of 127/8 to the loopback, so it is another
address than the honest daemon's 127.0.0.1.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable

from tests.daemon_harness import Daemon, wait_for

ATTACKER = "127.0.0.9"
HELD = 400


class Squatter:
    """Keeps up to ``HELD`` idle connections from ATTACKER open, re-opening lost ones."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.opened = 0
        self.open_now = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Squatter:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        held: list[socket.socket] = []
        while not self._stop.is_set():
            while len(held) < HELD and not self._stop.is_set():
                s = socket.socket()
                try:
                    s.bind((ATTACKER, 0))
                    s.settimeout(1)
                    s.connect((self.host, self.port))
                    s.setblocking(False)
                except OSError:
                    s.close()
                    break
                held.append(s)
                self.opened += 1
            held = [s for s in held if _still_open(s)]
            self.open_now = len(held)
            time.sleep(0.1)
        for s in held:
            s.close()


def _still_open(s: socket.socket) -> bool:
    try:
        if s.recv(1) == b"":  # closed by the victim
            s.close()
            return False
    except BlockingIOError:
        return True
    except OSError:
        s.close()
        return False
    return True


def test_one_address_holding_idle_connections_keeps_no_honest_peer_out(
    daemons: Callable[..., Daemon],
) -> None:
    victim = daemons("victim", 84)
    parts = victim.addrs()[0].split("/")
    with Squatter(parts[2], int(parts[4])) as squatter:
        wait_for(lambda: squatter.opened >= HELD, "the attacker never opened its connections")
        honest = daemons("honest", 85, bootstrap=victim.addrs()[0])

        def delivered() -> bool:
            with contextlib.suppress(Exception):
                return honest.cli("chat", "send", victim.peer_id, "hi")["status"] == "delivered"
            return False

        wait_for(delivered, "an honest peer could not reach the victim", 20)
        # The victim kept only a handful of the attacker's connections (the ones a close
        # is still on its way for may count too).
        time.sleep(1)
        assert squatter.open_now <= 64, squatter.open_now
    assert "in their handshake" in victim.stderr_path.read_text()
    assert victim.cli("peer", "self")["peer_id"]
