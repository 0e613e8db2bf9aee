"""What this provider offers now, in one place: :class:`ProviderOffer` makes the
``OfferView`` (engine/ports.py) that the provider's admission judges and the network's advert
and heartbeats carry (engine/network/link.py reads it through ``JobsPort.offer``).

Consumers match on the advert with the same shared rules (admission.py) that the provider
admits by; both read this one view, so the two cannot drift apart. It also answers what a
job gets of it: the executor that runs a spec and the GPUs a GPU job gets.
"""

from __future__ import annotations

from collections.abc import Callable

from engine import api
from engine.context import NodeContext
from engine.domain.spec import FRAMEWORKS, JobSpec
from engine.domain.specs import ResourceBook, sold
from engine.errors import EngineError
from engine.jobs.executors.base import Executor
from engine.ports import Committed, MachinePort, OfferView

Sold = tuple[tuple[api.ResourceSpec, ...], tuple[api.Pool, ...]]


class ProviderOffer:
    """``executors``: those built here (an executor configured but not usable is neither
    advertised nor judged); ``machine``: the machine's facts and the resource specs file (what
    is sold, issue 12), from the resources room;
    ``committed``: what running jobs hold now; ``capacity``: the machine's full capacity
    (node.py's; None: the cores are detected here and no disk is offered)."""

    def __init__(
        self,
        ctx: NodeContext,
        executors: dict[str, Executor],
        machine: MachinePort,
        committed: Callable[[], Committed],
        capacity: Callable[[], api.Capacity] | None = None,
    ) -> None:
        self.ctx = ctx
        self.executors = executors
        self._facts = machine
        self._committed = committed
        self._capacity = capacity
        self._sold_for: (
            tuple[ResourceBook, tuple[int, int, tuple[api.GpuInfo, ...]], Sold] | None
        ) = None

    def view(self) -> OfferView:
        """What this provider offers now (nothing until it is onboarded)."""
        onboarding = self.ctx.store.get_onboarding()
        if onboarding is None:
            return OfferView(accepting=False, resources=api.PeerResources())
        settings = self.ctx.settings.jobs
        used = self._committed()
        full = self._full(onboarding)
        offered = set(onboarding.gpus)
        gpus = tuple(
            api.PeerGpu(vendor=gpu.vendor, model=gpu.name, vram_mb=gpu.vram_mb)
            for gpu in full.gpus
            if gpu.uuid in offered
        )
        vram = sum(gpu.vram_mb for gpu in gpus)
        specs, pools = self._sold(onboarding, full)
        resources = api.PeerResources(
            cpu_mhz=onboarding.cpu_mhz,
            memory_mb=onboarding.memory_mb,
            disk_mb=full.disk_mb,
            gpus=gpus,
            price_units=settings.price_units(),
            executors=tuple(name for name in settings.executors if name in self.executors),
            frameworks=self.frameworks(),
            slots=settings.slots,
            shell=settings.shells_offered(),
            free_cpu_mhz=max(onboarding.cpu_mhz - used.cpu_mhz, 0),
            free_memory_mb=max(onboarding.memory_mb - used.memory_mb, 0),
            free_gpus=max(len(gpus) - used.gpus, 0),
            free_vram_mb=max(vram - used.vram_mb, 0),
            running_jobs=used.jobs,
            specs=specs,
            pools=pools,
        )
        return OfferView(accepting=onboarding.state == "active", resources=resources)

    def _full(self, onboarding: api.Onboarding) -> api.Capacity:
        if self._capacity is not None:
            return self._capacity()
        machine = self._facts.machine()  # what bounds a spec: cores, as the node counts them
        cores = machine.cpu_cores
        return api.Capacity(
            view="full",
            cpu_cores=cores,
            cpu_mhz=cores * machine.cpu_mhz_per_core,
            memory_mb=onboarding.memory_mb,
            disk_mb=0,
            gpus=self.ctx.gpus,
        )

    def _sold(self, onboarding: api.Onboarding, full: api.Capacity) -> Sold:
        """The specs sold here and their pools; none when the resources file does not read
        (admission then refuses every offer, so nothing is sold by mistake)."""
        try:
            book = self._facts.resource_book()
        except EngineError:
            return (), ()
        onboarded = self._facts.onboarded(onboarding, full)
        # Worked out again only when the book (cached by the file's mtime) or what bounds a
        # spec changes: heartbeats read this view too, and sold() warns of each spec dropped.
        key = (onboarded.cpu_cores, onboarded.memory_mb, onboarded.gpus)
        if self._sold_for is None or self._sold_for[0] is not book or self._sold_for[1] != key:
            self._sold_for = (book, key, sold(book, onboarded))
        return self._sold_for[2]

    def frameworks(self) -> tuple[str, ...]:
        """The frameworks some executor of this provider's can run now (a process executor
        offers only those its Python has)."""
        offered = {
            framework
            for name in self.ctx.settings.jobs.executors
            if name in self.executors
            for framework in self.executors[name].frameworks()
        }
        return tuple(f for f in FRAMEWORKS if f in offered)

    def executor_for(self, spec: JobSpec) -> str | None:
        """The first configured executor here that runs ``spec`` (None: none does)."""
        for name in self.ctx.settings.jobs.executors:
            if (
                name in self.executors
                and not (spec.device == "gpu" and name == "process")
                and spec.framework in self.executors[name].frameworks()
            ):
                return name
        return None

    def gpus_for(self, spec: JobSpec) -> tuple[api.GpuInfo, ...]:
        """The onboarded cards a GPU job gets: those of the vendor it asked for, or of this
        machine's own vendor when it named none (never every GPU the machine has)."""
        if spec.device != "gpu":
            return ()
        onboarding = self.ctx.store.get_onboarding()
        offered = set(onboarding.gpus) if onboarding is not None else set()
        cards = [gpu for gpu in self.ctx.gpus if gpu.uuid in offered]
        if not cards:
            raise EngineError("no_gpu", "no onboarded GPU is present on this provider now")
        vendor = spec.gpu_vendor or cards[0].vendor
        chosen = tuple(gpu for gpu in cards if gpu.vendor == vendor)
        if not chosen:
            have = ", ".join(sorted({gpu.vendor for gpu in cards}))
            raise EngineError("no_gpu", f"no {vendor} GPU onboarded here (onboarded: {have})")
        return chosen
