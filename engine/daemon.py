"""``nunet-tui daemon``: the engine headless, until SIGINT or SIGTERM."""

from __future__ import annotations

import logging
import signal
import threading

from engine.config import Paths, load_settings
from engine.facade import Engine
from engine.logsetup import configure

log = logging.getLogger("nunet.daemon")


def run_daemon(paths: Paths) -> None:
    paths.ensure()
    settings = load_settings(paths)
    configure(paths, settings.log_level, stderr=True)
    stop = threading.Event()

    def on_signal(signum: int, _frame: object) -> None:
        log.info("received %s, stopping", signal.Signals(signum).name)
        stop.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        engine = Engine(paths, settings=settings, daemon=True).start()
        try:
            log.info(
                "daemon ready: peer %s, control socket %s",
                engine.node.identity.peer_id,
                paths.control_socket,
            )
            stop.wait()
        finally:
            engine.close()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
