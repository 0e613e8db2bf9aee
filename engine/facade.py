"""``Engine``: the node core embedded in this process, behind the EngineClient protocol.

``start()`` takes the home's lock, opens the identity and the database, and runs the node and
its control socket on a trio loop in a background thread (see bridge.py). Every engine serves
the control socket, embedded or daemon, so scripting commands in another terminal attach to
whichever process holds the home instead of fighting over it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import trio

from engine import api
from engine.bridge import TrioThread
from engine.client import EventCallback, Subscribers
from engine.config import Paths, Settings, load_settings
from engine.control import ControlServer
from engine.errors import EngineError
from engine.homelock import HomeLock
from engine.identity import load_or_create
from engine.node import Node
from engine.probes import HostProbes
from engine.store import Store

log = logging.getLogger("nunet.engine")


class Engine:
    def __init__(
        self,
        paths: Paths,
        *,
        settings: Settings | None = None,
        daemon: bool = False,
        network: bool = True,
        lock: HomeLock | None = None,
        probes: HostProbes | None = None,
        autostart_network: bool = True,
    ) -> None:
        self._probes = probes
        self._autostart_network = autostart_network
        self.paths = paths
        self._network = network
        self._settings = settings
        self._daemon = daemon
        self._lock = lock
        self._thread: TrioThread | None = None
        self._node: Node | None = None
        self._subscribers = Subscribers()
        self._closed = False

    @property
    def embedded(self) -> bool:
        return True

    @property
    def node(self) -> Node:
        if self._node is None:
            raise RuntimeError("the engine is not started")
        return self._node

    def start(self, timeout: float = 30.0) -> Engine:
        self.paths.ensure()
        if self._lock is None:
            lock = HomeLock(self.paths.lock_file)
            if not lock.acquire(wait=2.0):
                pid = lock.holder_pid()
                raise EngineError(
                    "home_busy",
                    f"another nunet-tui process (pid {pid or '?'}) has {self.paths.label} open; "
                    "use it, stop it, or pick another --home",
                )
            self._lock = lock
        try:
            settings = self._settings or load_settings(self.paths)
            self._thread = TrioThread(lambda task_status: self._main(settings, task_status))
            self._thread.start(timeout)
        except BaseException:
            self._release()
            raise
        return self

    async def _main(self, settings: Settings, task_status: trio.TaskStatus[None]) -> None:
        identity = load_or_create(self.paths.identity_key)
        store = Store(self.paths.database)
        try:
            node = Node(
                self.paths,
                settings,
                identity,
                store,
                daemon=self._daemon,
                network=self._network,
                probes=self._probes,
                autostart_network=self._autostart_network,
            )
            await node.prepare()
            node.add_sink(self._subscribers.deliver)
            async with trio.open_nursery() as nursery:
                server = ControlServer(node, self.paths.control_socket)
                await nursery.start(server.serve)
                await nursery.start(node.run)
                self._node = node
                log.info("engine started: peer %s, home %s", identity.peer_id, self.paths.label)
                task_status.started()
                try:
                    await trio.sleep_forever()
                finally:
                    node.emit(api.EngineStopping(at=trio.current_time(), reason="stopped"))
                    nursery.cancel_scope.cancel()
        finally:
            store.close()

    async def call(self, command: api.Command) -> Any:
        return await self._require_thread().call(self.node.handle, command)

    def call_blocking(self, command: api.Command, timeout: float = 30.0) -> Any:
        return self._require_thread().call_blocking(self.node.handle, command, timeout=timeout)

    def subscribe(self, callback: EventCallback) -> Callable[[], None]:
        return self._subscribers.add(callback)

    def _require_thread(self) -> TrioThread:
        if self._thread is None or not self._thread.running:
            raise EngineError("stopped", "the engine is not running")
        return self._thread

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            if self._thread is not None:
                try:
                    self._thread.stop(timeout=5.0)
                except TimeoutError:
                    # A blocking call in a worker thread outlives the loop (a daemon thread:
                    # it ends with the process). Quitting stays quiet: said in the log only.
                    log.warning("the engine thread was still busy 5 s after stopping")
        finally:
            self._release()
            log.info("engine stopped")

    def _release(self) -> None:
        self._thread = None
        self._node = None
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    def __enter__(self) -> Engine:
        return self.start() if self._thread is None else self

    def __exit__(self, *exc: object) -> None:
        self.close()
