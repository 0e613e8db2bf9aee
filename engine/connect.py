"""Pick the engine a command talks to: the home's running engine, or a new embedded one.

Order matters: whoever holds the home lock owns the engine, so we try the lock first. If it
is free we start an embedded engine (unless ``attach`` insists on a daemon); if it is held we
connect to the holder's control socket, waiting briefly for a holder that is still starting.
"""

from __future__ import annotations

import time

from engine.client import EngineClient
from engine.config import Paths
from engine.control import ControlClient
from engine.errors import EngineError
from engine.facade import Engine
from engine.homelock import HomeLock
from engine.reconnect import ReconnectingClient


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

    def attached() -> EngineClient:
        """The holder's control socket (OSError while nothing answers on it yet)."""
        if reconnect:
            return ReconnectingClient(
                lambda on_lost: ControlClient(paths.control_socket, on_lost=on_lost)
            )
        return ControlClient(paths.control_socket)

    if attach:
        # A running daemon answers on its socket: no need to touch its lock at all.
        try:
            return attached()
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
        return Engine(
            paths, lock=lock, network=network, autostart_network=not defer_network
        ).start()
    deadline = time.monotonic() + wait
    while True:
        try:
            return attached()
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
