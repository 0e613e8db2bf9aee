"""What a provider reads of its machine (engine/ports.py ``MachinePort``): the machine as
detected, the onboarded capacity, the resources file and the live GPU status. The composition
root (engine/node.py) builds one and hands it to the jobs room.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from engine import api
from engine.context import NodeContext
from engine.domain.specs import ResourceBook
from engine.resources.capacity import detect_machine, onboarded_capacity
from engine.resources.spec_file import ResourceFile


class MachineFacts:
    def __init__(self, ctx: NodeContext) -> None:
        self.ctx = ctx
        self._file = ResourceFile(ctx.paths.resources_file)
        self._machine: api.Machine | None = None
        self._gpu_status: Callable[[], Any] | None = None

    def machine(self) -> api.Machine:
        if self._machine is None:
            self._machine = detect_machine(
                self.ctx.settings.machine, host=self.ctx.probes.host_files
            )
        return self._machine

    def onboarded(self, onboarding: api.Onboarding | None, full: api.Capacity) -> api.Capacity:
        return onboarded_capacity(onboarding, full)

    def resource_book(self) -> ResourceBook:
        return self._file.load()  # cached by the file's size and mtime

    def gpu_status(self) -> Callable[[], Any]:
        if self._gpu_status is None:
            from engine.resources.gpu.service import GpuService  # NVML loads on first use

            self._gpu_status = GpuService(self.ctx.probes.gpu_sampler).status
        return self._gpu_status
