"""A job's overlay on this provider (issue 25 §2; docs/cluster-overlay.md): ``OverlayJoin``
gives a running container ``nunet0`` in the job's /24 (jobs/executors/overlay_tun.py) and
hands its device to the network room's carriage (``OverlayCarriage``), which runs here, in
this room's nursery, until ``OverlayLeave`` or the node stops."""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Awaitable, Callable

import trio

from engine import api
from engine.domain.overlay_packets import MTU, OverlayError, check_members
from engine.errors import EngineError
from engine.jobs.executors.overlay_tun import TunDevice, open_tun
from engine.ports import OverlayCarriage

MAX_OVERLAYS = 16  # at once on one node


class JobOverlays:
    """``container_pid``: a running container's process id (the Docker executor's)."""

    def __init__(
        self,
        overlay: Callable[[], OverlayCarriage],
        container_pid: Callable[[str], Awaitable[int]],
    ) -> None:
        self._overlay = overlay
        self._container_pid = container_pid
        self._nursery: trio.Nursery | None = None
        self._scopes: dict[str, trio.CancelScope] = {}

    async def serve(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            task_status.started()
            await trio.sleep_forever()

    async def join(self, command: api.OverlayJoin) -> api.OverlayStats:
        try:
            net, own, _others = check_members(
                command.subnet, command.address, [(m.peer_id, m.address) for m in command.members]
            )
        except OverlayError as exc:
            raise EngineError("invalid", f"overlay: {exc}") from exc
        if self._nursery is None:
            raise EngineError(
                "no_network",
                "the overlay needs a running node: start `nunet-tui daemon` for this home, "
                "and run the command again",
            )
        if command.job_id in self._scopes:
            raise EngineError(
                "invalid", f"job {command.job_id} already has an overlay here: leave it first"
            )
        if len(self._scopes) >= MAX_OVERLAYS:
            raise EngineError("busy", f"this node carries {MAX_OVERLAYS} overlays already")
        carriage = self._overlay()
        pid = await self._container_pid(command.container)
        from ipaddress import IPv4Address

        device = await open_tun(pid, IPv4Address(own), net, MTU)
        scope = trio.CancelScope()
        self._scopes[command.job_id] = scope
        try:
            await self._nursery.start(self._carry, carriage, command, device, scope, pid)
        except BaseException:
            self._scopes.pop(command.job_id, None)
            device.close()
            raise
        return carriage.stats(command.job_id)[0]

    async def _carry(
        self,
        carriage: OverlayCarriage,
        command: api.OverlayJoin,
        device: TunDevice,
        scope: trio.CancelScope,
        pid: int,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        try:
            with scope:
                async with trio.open_nursery() as nursery:
                    await nursery.start(
                        functools.partial(
                            carriage.carry,
                            command.job_id,
                            command.subnet,
                            command.address,
                            command.members,
                            device,
                        )
                    )
                    task_status.started()
                    # The container's end ends its overlay: its device no longer reads (the
                    # namespace is gone), so nothing else would say so.
                    await _exited(pid)
                    nursery.cancel_scope.cancel()
        finally:
            if self._scopes.get(command.job_id) is scope:
                del self._scopes[command.job_id]
            device.close()

    async def leave(self, command: api.OverlayLeave) -> api.Done:
        scope = self._scopes.pop(command.job_id, None)
        if scope is None:
            raise EngineError("not_found", f"job {command.job_id} has no overlay on this node")
        scope.cancel()
        return api.Done(message=f"overlay of job {command.job_id} removed")

    async def status(self, command: api.OverlayStatus) -> api.OverlayStatusReply:
        if not self._scopes and self._nursery is None:
            return api.OverlayStatusReply()
        try:
            carriage = self._overlay()
        except EngineError:
            return api.OverlayStatusReply()
        return api.OverlayStatusReply(overlays=carriage.stats(command.job_id))


async def _exited(pid: int) -> None:
    """Returns once process ``pid`` (the container's first) has exited."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    try:
        await trio.lowlevel.wait_readable(fd)
    finally:
        trio.lowlevel.notify_closing(fd)
        with contextlib.suppress(OSError):
            os.close(fd)
