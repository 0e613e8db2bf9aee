"""The node core on the trio side, and the composition root of the engine.

Only ever touched from the engine's trio thread. ``Engine`` (facade.py) and the control socket
(control.py) both reach it through ``handle``. ``Node`` builds each subsystem once (network,
jobs, payments, the GPU commands, metrics, notifications), hands each the shared
``NodeContext`` and, for what it needs from the others, a narrow port (engine/ports.py), and
routes every command to the room that answers it (engine/commands.py). No subsystem imports
this module: what they need of the node is in the context or behind a port.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from functools import partial
from importlib import metadata
from typing import TYPE_CHECKING, Any

import trio

from engine import api
from engine.commands import Dispatch, Handlers
from engine.config import Paths, Settings
from engine.context import EventSink, NodeContext
from engine.errors import EngineError, ValidationReport
from engine.identity import Identity
from engine.network.supervise import supervised
from engine.onboarding import validate_onboarding
from engine.probes import HostProbes
from engine.resources.capacity import (
    available_capacity,
    detect_machine,
    full_capacity,
    onboarded_capacity,
)
from engine.resources.gpu.commands import commands as gpu_commands
from engine.resources.readiness import for_executors
from engine.store import Store

if TYPE_CHECKING:
    from engine.data.service import NodeData
    from engine.jobs.service import NodeJobs
    from engine.network.link import NodeNetwork
    from engine.network.service import NetworkService
    from engine.payments.escrow import Escrows
    from engine.payments.service import NodePayments

log = logging.getLogger("nunet.node")


def version() -> str:
    try:
        return metadata.version("nunet-tui")
    except metadata.PackageNotFoundError:
        return "0+unknown"


class Node:
    def __init__(
        self,
        paths: Paths,
        settings: Settings,
        identity: Identity,
        store: Store,
        daemon: bool,
        network: bool = True,
        probes: HostProbes | None = None,
        autostart_network: bool = True,
    ) -> None:
        self.daemon = daemon
        self.started_at = time.time()
        self._sinks: list[EventSink] = []
        self.ctx = NodeContext(
            paths=paths,
            settings=settings,
            identity=identity,
            store=store,
            emit=self.emit,
            probes=probes or HostProbes(),
            version=version(),
            # One-shot CLI commands run without the network: it would only join to leave again.
            network_enabled=network,
        )
        self._autostart_network = autostart_network
        self._services: trio.Nursery | None = None
        self._network_started = False
        self._network: NodeNetwork | None = None
        self._jobs: NodeJobs | None = None
        self._payments: NodePayments | None = None
        self._data: NodeData | None = None
        self.machine = detect_machine(settings.machine, host=self.probes.host_files)
        self._dispatch = Dispatch(
            {
                "node": self.commands,
                "gpu": partial(gpu_commands, self.ctx),
                "network": lambda: self.network().commands(),
                "jobs": lambda: self.jobs().commands(),
                "payments": lambda: self.payments().commands(),
                "resources": self._resource_commands,
                "data": self._data_commands,
            }
        )

    # The context's facts, under the names the facade, the CLI and the tests know.
    @property
    def paths(self) -> Paths:
        return self.ctx.paths

    @property
    def settings(self) -> Settings:
        return self.ctx.settings

    @property
    def identity(self) -> Identity:
        return self.ctx.identity

    @property
    def store(self) -> Store:
        return self.ctx.store

    @property
    def probes(self) -> HostProbes:
        return self.ctx.probes

    @property
    def version(self) -> str:
        return self.ctx.version

    @property
    def network_enabled(self) -> bool:
        return self.ctx.network_enabled

    @property
    def gpus(self) -> tuple[api.GpuInfo, ...]:
        return self.ctx.gpus

    @property
    def gpu_reason(self) -> str | None:
        return self.ctx.gpu_reason

    def commands(self) -> Handlers:
        return {
            api.GetCapacity: self._get_capacity,
            api.OnboardRequest: self._onboard,
            api.CheckOnboarding: self._check_onboarding,
            api.ResourceConfig: self._resource_config,
            api.Pause: self._pause,
            api.Resume: self._resume,
            api.Offboard: self._offboard,
            api.GetInfo: self._info,
            api.GetPeerSelf: self._peer_self,
            api.SetMode: self._set_mode,
            api.StartNetwork: self._start_network,
        }

    async def prepare(self) -> None:
        """Slow probes, off the trio loop: GPU libraries may take a while to answer."""
        self.ctx.gpus, self.ctx.gpu_reason = await trio.to_thread.run_sync(self.probes.detect_gpus)

    async def run(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Long-running services live here: the network, jobs, settling, metrics, notices."""
        async with trio.open_nursery() as nursery:
            self._services = nursery
            if self.network_enabled:  # a long-running engine (daemon, TUI): the operator's tools
                from engine.notify import serve_notifications

                # Supervised like every service: a failing hook never ends the node.
                nursery.start_soon(
                    supervised,
                    "notifications",
                    partial(serve_notifications, self.ctx, self.add_sink),
                )
                if self.settings.api.listen:
                    from engine.http_api import serve_http_api  # starlette: only when on

                    serve_api = partial(
                        serve_http_api, self, self.settings.api.listen, self.paths.state_dir
                    )
                    nursery.start_soon(supervised, "http api", serve_api)
                if self.settings.metrics.listen:
                    from engine.metrics import serve_metrics  # prometheus-client: only when on

                    nursery.start_soon(
                        supervised, "metrics", partial(serve_metrics, self.ctx, self)
                    )
            if self._autostart_network:
                self._start_services()
            task_status.started()
            await trio.sleep_forever()

    def _start_services(self) -> bool:
        if not self.network_enabled or self._network_started or self._services is None:
            return False
        self._network_started = True
        # Not awaited: the engine answers commands while py-libp2p loads and starts.
        # Each subsystem is supervised: one that fails (a connection error while settling)
        # is logged and restarted with backoff, never cancelling its siblings in this nursery.
        self._services.start_soon(supervised, "network", self.network().run)
        self._services.start_soon(supervised, "jobs", self.jobs().serve)
        if self.payments_enabled:
            self._services.start_soon(supervised, "settle", self.payments().escrows.serve)
        return True

    @property
    def network_started(self) -> bool:
        return self._network_started

    @property
    def payments_enabled(self) -> bool:
        """Paid jobs: a chain backend and an oracle are configured."""
        return self.ctx.payments_enabled

    async def _start_network(self, command: api.StartNetwork) -> api.Done:
        if not self.network_enabled:
            return api.Done(message="this engine runs without the network")
        started = self._start_services()
        return api.Done(message="network starting" if started else "network already started")

    # --- the subsystems, each built once on first use, and wired ----------------------------

    def network(self) -> NodeNetwork:
        if self._network is None:
            # Imported here: py-libp2p costs about a second to import.
            from engine.network.link import NodeNetwork

            self._network = NodeNetwork(
                self.ctx, facts=self, jobs=self.jobs, totals=self, data=self.data
            )
        return self._network

    def jobs(self) -> NodeJobs:
        if self._jobs is None:
            from engine.jobs.service import NodeJobs

            escrows = self._escrows if self.payments_enabled else None
            from engine.resources.container_host import ContainerFacts
            from engine.resources.machine import MachineFacts

            self._jobs = NodeJobs(
                self.ctx,
                network=self.network,
                escrows=escrows,
                capacity=self.full,
                machine=MachineFacts(self.ctx),
                container_host=ContainerFacts(),
                overlay=lambda: self.network().overlay,
                data=self.data,
            )
        return self._jobs

    def payments(self) -> NodePayments:
        if self._payments is None:
            # Imported here: pycardano and the keyring backends load on the first use.
            from engine.payments.service import NodePayments

            self._payments = NodePayments(self.ctx)
        return self._payments

    def data(self) -> NodeData:
        if self._data is None:
            from engine.data.service import NodeData

            self._data = NodeData(self.paths.state_dir / "data", network=self.network)
        return self._data

    def _data_commands(self) -> Handlers:
        return self.data().commands()

    def _resource_commands(self) -> Handlers:
        from engine.resources.commands import commands as resource_commands

        return resource_commands(self.ctx, self.full, self._resources_changed)

    def _resources_changed(self) -> None:
        if self._network is not None:  # what is sold changed: a new advert at once
            self._network.onboarding_changed()

    def _escrows(self) -> Escrows:
        return self.payments().escrows

    # --- ports the node itself implements (engine/ports.py, engine/metrics.py) ---------------

    def job_totals(self) -> dict[str, Any]:
        """TotalsPort: the jobs' metering and, with payments, the escrow book's sums."""
        if not self.payments_enabled:
            return self.jobs().job_totals()
        listing = self._escrows().listing()
        # A paid job's metered figure is its escrow's (the signed receipt's charge).
        totals = self.jobs().job_totals(
            {
                (e.role, e.job_id): e.metered_units
                for e in listing.escrows
                if e.metered_units is not None
            }
        )
        totals["claimed_units"] = listing.earned_units
        totals["paid_out_units"] = listing.spent_units
        totals["locked_units"] = listing.locked_units
        return totals

    def ntx_claimed(self) -> int:
        """TotalsPort: base units this provider claimed."""
        if not self.payments_enabled:
            return 0
        listing = self._escrows().listing()
        # A split pays the provider its part (paid_units); older rows were all or nothing.
        return sum(e.settled()[0] for e in listing.escrows if e.state == "claimed")

    def escrow_list(self) -> tuple[api.EscrowInfo, ...]:
        """MetricsSource: the escrow book (empty when payments are off)."""
        return self._escrows().listing().escrows if self.payments_enabled else ()

    def running_network(self) -> NetworkService | None:
        """MetricsSource: the service once started; network() loads py-libp2p, so not before."""
        return self.network().service if self.network_started else None

    # --- commands and events -------------------------------------------------------------

    async def handle(self, command: api.Command) -> Any:
        return await self._dispatch.handle(command)

    def add_sink(self, sink: EventSink) -> Callable[[], None]:
        self._sinks.append(sink)

        def remove() -> None:
            if sink in self._sinks:
                self._sinks.remove(sink)

        return remove

    def emit(self, event: api.Event) -> None:
        for sink in list(self._sinks):
            try:
                sink(event)
            except Exception:
                log.exception("an event subscriber failed; dropping it")
                self._sinks.remove(sink)

    # --- capacity --------------------------------------------------------------------------

    def full(self) -> api.Capacity:
        return full_capacity(
            self.machine,
            self.settings.machine,
            self.paths.state_dir,
            self.gpus,
            self.gpu_reason,
            host=self.probes.host_files,
        )

    async def _get_capacity(self, command: api.GetCapacity) -> api.Capacity:
        full = self.full()
        if command.view == "full":
            return full
        if command.view == "available":
            return available_capacity(
                full, self.paths.state_dir, cpu_mhz_in_use=0, host=self.probes.host_files
            )
        return onboarded_capacity(self.store.get_onboarding(), full)

    # --- onboarding ------------------------------------------------------------------------

    def _selected_gpus(self, wanted: tuple[str, ...] | None) -> tuple[api.GpuInfo, ...]:
        if wanted is None:
            return self.gpus
        known = {gpu.uuid: gpu for gpu in self.gpus}
        unknown = [uuid for uuid in wanted if uuid not in known]
        if unknown:
            raise EngineError(
                "invalid",
                f"gpus: no GPU with UUID {', '.join(unknown)} on this machine; "
                "`nunet-tui capacity --full` lists them",
                (),
            )
        return tuple(known[uuid] for uuid in wanted)

    def _validate(
        self,
        *,
        memory_mb: int | None,
        cpu_mhz: int | None,
        address: str,
        channel: str,
        cardano_node: bool,
        gpus: tuple[api.GpuInfo, ...],
    ) -> ValidationReport:
        full = self.full()
        return validate_onboarding(
            memory_mb=memory_mb,
            cpu_mhz=cpu_mhz,
            address=address,
            channel=channel,
            cardano_node=cardano_node,
            gpus=gpus,
            full=full,
            available=available_capacity(
                full, self.paths.state_dir, cpu_mhz_in_use=0, host=self.probes.host_files
            ),
        )

    async def _check_onboarding(self, command: api.CheckOnboarding) -> api.Validation:
        try:
            gpus = self._selected_gpus(command.gpus)
        except EngineError as exc:
            return api.Validation(
                ok=False, problems=(api.ProblemItem(field="gpus", message=exc.message),)
            )
        report = self._validate(
            memory_mb=command.memory_mb,
            cpu_mhz=command.cpu_mhz,
            address=command.address,
            channel=command.channel,
            cardano_node=command.cardano_node,
            gpus=gpus,
        )
        return api.Validation(
            ok=report.ok,
            problems=tuple(
                api.ProblemItem(field=p.field, message=p.message) for p in report.problems
            ),
        )

    async def _onboard(self, command: api.OnboardRequest) -> api.Onboarding:
        gpus = self._selected_gpus(command.gpus)
        self._validate(
            memory_mb=command.memory_mb,
            cpu_mhz=command.cpu_mhz,
            address=command.address,
            channel=command.channel,
            cardano_node=command.cardano_node,
            gpus=gpus,
        ).raise_if_failed()
        now = time.time()
        previous = self.store.get_onboarding()
        onboarding = api.Onboarding(
            memory_mb=command.memory_mb,
            cpu_mhz=command.cpu_mhz,
            channel=command.channel,
            address=command.address,
            local_discovery=command.local_discovery,
            cardano_node=command.cardano_node,
            gpus=tuple(gpu.uuid for gpu in gpus),
            state="active",
            onboarded_at=previous.onboarded_at if previous else now,
            updated_at=now,
        )
        self.store.save_onboarding(onboarding, "reonboard" if previous else "onboard")
        log.info(
            "onboarded %d MB, %d MHz on %s",
            onboarding.memory_mb,
            onboarding.cpu_mhz,
            onboarding.channel,
        )
        self._onboarding_changed(onboarding)
        return onboarding

    def _onboarding_changed(self, onboarding: api.Onboarding | None) -> None:
        if self._network is not None:
            self._network.onboarding_changed()
        self.emit(api.OnboardingChanged(at=time.time(), onboarding=onboarding))

    def _require_onboarding(self) -> api.Onboarding:
        onboarding = self.store.get_onboarding()
        if onboarding is None:
            raise EngineError(
                "not_onboarded",
                "this machine is not onboarded; "
                "run `nunet-tui onboard -m MB -c MHZ -a ADDRESS` first",
            )
        return onboarding

    async def _resource_config(self, command: api.ResourceConfig) -> api.Onboarding:
        current = self._require_onboarding()
        known = {gpu.uuid: gpu for gpu in self.gpus}
        gpus = tuple(known[uuid] for uuid in current.gpus if uuid in known)
        self._validate(
            memory_mb=command.memory_mb,
            cpu_mhz=command.cpu_mhz,
            address=current.address,
            channel=current.channel,
            cardano_node=current.cardano_node,
            gpus=gpus,
        ).raise_if_failed()
        changed = api.Onboarding(
            **{
                **_fields(current),
                "memory_mb": command.memory_mb,
                "cpu_mhz": command.cpu_mhz,
                "updated_at": time.time(),
            }
        )
        self.store.save_onboarding(changed, "resource-config")
        self._onboarding_changed(changed)
        return changed

    async def _set_state(self, state: api.OnboardingState, action: str) -> api.Onboarding:
        current = self._require_onboarding()
        if current.state == state:
            return current  # idempotent: pausing a paused node is not an error
        changed = api.Onboarding(**{**_fields(current), "state": state, "updated_at": time.time()})
        self.store.save_onboarding(changed, action)
        log.info("%s: resources %s", action, "withdrawn" if state == "paused" else "offered again")
        self._onboarding_changed(changed)
        return changed

    async def _pause(self, command: api.Pause) -> api.Onboarding:
        return await self._set_state("paused", "pause")

    async def _resume(self, command: api.Resume) -> api.Onboarding:
        return await self._set_state("active", "resume")

    async def _offboard(self, command: api.Offboard) -> api.Done:
        self._require_onboarding()
        self.store.delete_onboarding()
        log.info("offboarded")
        self._onboarding_changed(None)
        return api.Done(message="offboarded: this machine no longer offers resources")

    # --- identity and info ---------------------------------------------------------------

    def mode(self) -> api.Mode | None:
        value = self.store.get_value("mode")
        return value if value in ("provider", "consumer") else None  # type: ignore[return-value]

    async def _set_mode(self, command: api.SetMode) -> api.Done:
        self.store.set_value("mode", command.mode)
        self.emit(api.ModeChanged(at=time.time(), mode=command.mode))
        return api.Done(message=f"mode: {command.mode}")

    async def _info(self, command: api.GetInfo) -> api.NodeInfo:
        # Abandoned on cancel: read-only, and a Docker probe (the SDK's import, a slow
        # engine) must not hold up quitting: that was "did not stop within 5 s".
        readiness = await trio.to_thread.run_sync(
            self.probes.check_readiness, self.gpus, abandon_on_cancel=True
        )
        readiness = for_executors(readiness, self.settings.jobs.executors)
        onboarded = self.store.get_onboarding()
        return api.NodeInfo(
            peer_id=self.identity.peer_id,
            version=self.version,
            home=self.paths.label,
            mode=self.mode(),
            machine=self.machine,
            onboarded=onboarded,
            readiness=readiness,
            daemon=self.daemon,
            started_at=self.started_at,
            channel=onboarded.channel if onboarded else self.settings.network.channel,
        )

    async def _peer_self(self, command: api.GetPeerSelf) -> api.PeerSelf:
        addrs = self._network.listen_addrs() if self._network is not None else ()
        return api.PeerSelf(peer_id=self.identity.peer_id, addrs=addrs)


def _fields(record: api.Record) -> dict[str, Any]:
    return {name: getattr(record, name) for name in record.__struct_fields__}
