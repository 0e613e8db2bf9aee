"""Pick the engine a command talks to: the home's running engine, or a new embedded one.

Order matters: whoever holds the home lock owns the engine, so we try the lock first. If it
is free we start an embedded engine (unless ``attach`` insists on a daemon); if it is held we
connect to the holder's control socket, waiting briefly for a holder that is still starting.

``prepare_client`` makes the same choice without loading the engine (trio, the node, the
control client): the TUI decides before its first frame and opens the engine after it.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from typing import TypeVar

from engine.client import EngineClient
from engine.config import Paths, check_socket_dir, check_socket_file
from engine.deferred import PendingEngine
from engine.errors import EngineError
from engine.homelock import HomeLock

T = TypeVar("T")


def open_client(
    paths: Paths,
    *,
    attach: bool = False,
    network: bool = True,
    defer_network: bool = False,
    wait: float = 5.0,
    reconnect: bool = False,
) -> EngineClient:
    """``network=False`` for one-shot commands: an embedded engine then skips libp2p.
    ``defer_network``: the network starts on ``StartNetwork`` (the TUI sends it once painted).
    ``reconnect``: attached to a daemon, follow its restarts (engine/reconnect.py; the TUI)."""
    paths.ensure()
    client, lock = _choose(
        paths, attach=attach, wait=wait, holder=lambda: _attach(paths, reconnect)
    )
    if client is not None:
        return client
    assert lock is not None
    return _embedded(paths, lock, network=network, defer_network=defer_network)


def prepare_client(
    paths: Paths,
    *,
    attach: bool = False,
    network: bool = True,
    defer_network: bool = False,
    wait: float = 5.0,
    reconnect: bool = False,
) -> PendingEngine:
    """``open_client``'s choice, made now and cheaply (the lock taken, or a daemon seen to
    answer on its socket), with the same errors; the slow part is ``PendingEngine.open``."""
    paths.ensure()
    seen, lock = _choose(paths, attach=attach, wait=wait, holder=lambda: _probe(paths))
    if seen is not None:
        return PendingEngine(
            embedded=False, open=lambda: _attach(paths, reconnect), release=lambda: None
        )
    assert lock is not None
    held = lock
    return PendingEngine(
        embedded=True,
        open=lambda: _embedded(paths, held, network=network, defer_network=defer_network),
        release=held.release,
    )


def _choose(
    paths: Paths, *, attach: bool, wait: float, holder: Callable[[], T]
) -> tuple[T | None, HomeLock | None]:
    """``holder()`` (the home's running engine; OSError while nothing answers), or the home's
    lock, acquired: then the caller starts the engine itself."""
    if attach:
        # A running daemon answers on its socket: no need to touch its lock at all.
        try:
            return holder(), None
        except OSError:
            pass
    lock = HomeLock(paths.lock_file)
    if lock.try_acquire():
        if attach:
            lock.release()
            raise EngineError(
                "no_daemon",
                f"no nunet-tui daemon is running for {paths.label}; start one with "
                f"`nunet-tui --home {paths.label} daemon` or drop --attach",
            )
        return None, lock
    deadline = time.monotonic() + wait
    while True:
        try:
            return holder(), None
        except OSError as exc:
            if time.monotonic() >= deadline:
                pid = lock.holder_pid()
                raise EngineError(
                    "home_busy",
                    f"another nunet-tui process (pid {pid or '?'}) holds {paths.label} but does "
                    f"not answer on {paths.control_socket} ({exc.strerror or exc}); wait for it "
                    "to finish starting, or stop it",
                ) from exc
            time.sleep(0.05)


def _attach(paths: Paths, reconnect: bool) -> EngineClient:
    """The holder's control socket (OSError while nothing answers on it yet)."""
    from engine.control_client import ControlClient

    if reconnect:
        from engine.reconnect import ReconnectingClient

        return ReconnectingClient(
            lambda on_lost: ControlClient(paths.control_socket, on_lost=on_lost)
        )
    return ControlClient(paths.control_socket)


def _probe(paths: Paths) -> bool:
    """True when a daemon accepts on the control socket now (OSError while none does),
    refusing a socket of someone else's as ControlClient does."""
    check_socket_dir(paths.control_socket.parent)
    check_socket_file(paths.control_socket)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(5.0)
        sock.connect(str(paths.control_socket))
    return True


def _embedded(paths: Paths, lock: HomeLock, *, network: bool, defer_network: bool) -> EngineClient:
    from engine.facade import Engine

    return Engine(paths, lock=lock, network=network, autostart_network=not defer_network).start()
