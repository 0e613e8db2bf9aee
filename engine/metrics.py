"""The Prometheus endpoint: ``[metrics] listen = "127.0.0.1:9464"`` (off when empty).

Served by every long-running engine (the daemon and the TUI's own) with prometheus-client's
HTTP server, in its own thread. There is no second bookkeeping: ``NodeCollector`` reads the
node on each scrape, on the engine's trio thread (the node is only ever touched there), from
what the node already keeps: the onboarding, the network's peers, the GPU service's live
samples, the jobs in the store (one aggregate query), the escrow book and the contained
failures of engine/network/supervise.py. Every name starts ``nunet_`` and says its unit.
"""

from __future__ import annotations

import logging
import time
import typing
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import trio
from prometheus_client import CollectorRegistry, ProcessCollector, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily
from prometheus_client.registry import Collector

from engine import api
from engine.config import metrics_address
from engine.context import NodeContext
from engine.network import supervise
from engine.resources.readiness import for_executors

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

log = logging.getLogger("nunet.metrics")

# A scrape waits at most this long for the engine (GPU driver, Docker): Prometheus's own
# default scrape timeout is 10 s, and a late answer is worth less than a partial one.
GATHER_TIMEOUT_S = 5.0
# The readiness probe asks Docker (up to ~1.3 s): once per this many seconds is enough.
READINESS_TTL_S = 30.0
MB = 1 << 20


@dataclass
class Figures:
    """What one scrape read from the node."""

    peer_id: str
    version: str
    mode: str
    channel: str
    started_at: float
    onboarded: bool = False
    paused: bool = False
    readiness: api.Readiness | None = None
    online: bool = False
    connected_peers: int = 0
    peers: dict[str, int] = field(default_factory=dict)  # by channel
    gpus: tuple[api.GpuSnapshot, ...] = ()
    jobs: list[tuple[str, str, int, float, float]] = field(default_factory=list)
    escrows: tuple[api.EscrowInfo, ...] = ()
    payments: bool = False
    failures: dict[str, int] = field(default_factory=dict)


class OnlineFigures(Protocol):
    """The running network service, as far as a scrape reads it."""

    channel: str | None

    def connected_peers(self) -> list[str]: ...

    def peers(self) -> list[Any]: ...


class MetricsSource(Protocol):
    """What a scrape reads from the node besides its context (implemented by ``Node``)."""

    started_at: float

    def mode(self) -> api.Mode | None: ...

    def running_network(self) -> OnlineFigures | None:
        """The network service once started and up (None: offline, or never started)."""
        ...

    def escrow_list(self) -> tuple[api.EscrowInfo, ...]:
        """The escrow book (empty when payments are off)."""
        ...

    async def handle(self, command: api.Command) -> Any: ...


class NodeCollector(Collector):
    """Reads the node on each scrape (from the HTTP server's thread, through the trio token)."""

    def __init__(
        self, ctx: NodeContext, source: MetricsSource, token: trio.lowlevel.TrioToken
    ) -> None:
        self.ctx = ctx
        self.source = source
        self.token = token
        self._readiness: tuple[float, api.Readiness] | None = None
        self._failed_once = False

    def collect(self) -> Iterator[Metric]:
        try:
            figures = trio.from_thread.run(self.gather, trio_token=self.token)
        except (trio.RunFinishedError, trio.Cancelled):
            return  # the engine is stopping: an empty answer, not a traceback
        except Exception:
            # A scrape must not print a traceback on the daemon's terminal (wsgiref would):
            # logged once in full through the node's escaped log, then counted.
            supervise.FAILURES.count("metrics scrape")
            if not self._failed_once:
                self._failed_once = True
                log.exception("metrics: reading the node failed; later failures are counted")
            return
        yield from metric_families(figures)

    async def gather(self) -> Figures:
        node, source = self.ctx, self.source
        onboarding = node.store.get_onboarding()
        figures = Figures(
            peer_id=node.identity.peer_id,
            version=node.version,
            mode=source.mode() or "",
            channel=onboarding.channel if onboarding else node.settings.network.channel,
            started_at=source.started_at,
            onboarded=onboarding is not None,
            paused=onboarding is not None and onboarding.state == "paused",
            jobs=node.store.job_summary(),
            failures=supervise.FAILURES.snapshot(),
            payments=node.payments_enabled,
        )
        service = source.running_network()
        if service is not None:
            figures.online = True
            figures.connected_peers = len(service.connected_peers())
            for info in service.peers():
                channel = info.channel or service.channel or ""
                figures.peers[channel] = figures.peers.get(channel, 0) + 1
        figures.escrows = source.escrow_list()
        with trio.move_on_after(GATHER_TIMEOUT_S):
            figures.readiness = await self._ready()
            if node.gpus:  # the sampler only where there is something to sample
                status = await source.handle(api.GetGpuStatus())
                figures.gpus = status.gpus
        return figures

    async def _ready(self) -> api.Readiness:
        now = time.monotonic()
        if self._readiness is None or now - self._readiness[0] > READINESS_TTL_S:
            node = self.ctx
            ready = await trio.to_thread.run_sync(
                node.probes.check_readiness, node.gpus, abandon_on_cancel=True
            )
            ready = for_executors(ready, node.settings.jobs.executors)
            self._readiness = (now, ready)
        return self._readiness[1]


def metric_families(f: Figures) -> Iterator[Metric]:
    info = InfoMetricFamily("nunet_node", "This node: peer id, version, mode and channel")
    info.add_metric(
        [], {"peer_id": f.peer_id, "version": f.version, "mode": f.mode, "channel": f.channel}
    )
    yield info
    yield _gauge(
        "nunet_node_start_time_seconds", "When the engine started (Unix time)", f.started_at
    )
    yield _gauge("nunet_node_onboarded", "1 when this machine is onboarded", f.onboarded)
    yield _gauge("nunet_node_paused", "1 when the onboarding is paused", f.paused)
    ready = GaugeMetricFamily(
        "nunet_node_ready", "1 when a readiness check passes", labels=["check"]
    )
    if f.readiness is not None:
        for name in ("docker", "gpu_driver", "gpu_runtime"):
            ready.add_metric([name], float(getattr(f.readiness, name).ok))
    yield ready

    yield _gauge("nunet_network_online", "1 while the node is on the network", f.online)
    yield _gauge(
        "nunet_network_connected_peers", "Peers with an open connection", f.connected_peers
    )
    peers = GaugeMetricFamily("nunet_peers", "Peers known on each channel", labels=["channel"])
    for channel, count in sorted(f.peers.items()):
        peers.add_metric([channel], count)
    yield peers
    failures = CounterMetricFamily(
        "nunet_contained_failures",
        "Handler and task failures contained since the engine started",
        labels=["name"],
    )
    for name, count in sorted(f.failures.items()):
        failures.add_metric([name], count)
    yield failures
    yield CounterMetricFamily(
        "nunet_network_restarts",
        "Times the node's network failed and was restarted",
        value=f.failures.get("network", 0),
    )

    yield from _gpu_families(f.gpus)
    yield from _job_families(f.jobs)
    yield from _escrow_families(f.escrows, f.payments)


def _gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, value=float(value))


def _gpu_families(gpus: tuple[api.GpuSnapshot, ...]) -> Iterator[Metric]:
    labels = ["gpu", "uuid", "name", "vendor"]
    families: dict[str, GaugeMetricFamily] = {
        name: GaugeMetricFamily(name, doc, labels=labels)
        for name, doc in (
            ("nunet_gpu_utilization_ratio", "Share of time a kernel ran (0 to 1)"),
            ("nunet_gpu_memory_used_bytes", "GPU memory in use"),
            ("nunet_gpu_memory_total_bytes", "GPU memory on the board"),
            ("nunet_gpu_temperature_celsius", "GPU temperature"),
            ("nunet_gpu_power_watts", "Power drawn"),
            ("nunet_gpu_power_limit_watts", "The board's power limit"),
        )
    }
    for gpu in gpus:
        key = [str(gpu.index), gpu.uuid, gpu.name, gpu.vendor]
        values = {
            "nunet_gpu_utilization_ratio": _scaled(gpu.utilization_gpu, 0.01),
            "nunet_gpu_memory_used_bytes": _scaled(gpu.memory_used_mb, MB),
            "nunet_gpu_memory_total_bytes": _scaled(gpu.memory_total_mb, MB),
            "nunet_gpu_temperature_celsius": gpu.temperature_c,
            "nunet_gpu_power_watts": gpu.power_draw_w,
            "nunet_gpu_power_limit_watts": gpu.power_limit_w,
        }
        for name, value in values.items():
            if value is not None:  # n/a on this board: no sample rather than a false 0
                families[name].add_metric(key, float(value))
    yield from families.values()


def _scaled(value: float | None, factor: float) -> float | None:
    return None if value is None else value * factor


def _job_families(rows: list[tuple[str, str, int, float, float]]) -> Iterator[Metric]:
    jobs = GaugeMetricFamily("nunet_jobs", "Jobs by role and state", labels=["role", "state"])
    counts = {(role, state): count for role, state, count, _, _ in rows}
    for role in ("consumer", "provider"):
        for state in typing.get_args(api.JobState):  # every state, 0 too: panels need no gaps
            jobs.add_metric([role, state], counts.get((role, state), 0))
    yield jobs
    ended = [r for r in rows if r[0] == "provider" and r[1] in api.TERMINAL_STATES]
    yield CounterMetricFamily(
        "nunet_machine_time_sold_seconds",
        "Wall-clock machine time of the jobs this node ran for others (metered, ended jobs)",
        value=sum(r[3] for r in ended),
    )
    yield CounterMetricFamily(
        "nunet_gpu_time_sold_seconds",
        "GPU time of the jobs this node ran for others (metered, ended jobs)",
        value=sum(r[4] for r in ended),
    )
    bought = [r for r in rows if r[0] == "consumer" and r[1] in api.TERMINAL_STATES]
    yield CounterMetricFamily(
        "nunet_machine_time_bought_seconds",
        "Wall-clock machine time of the jobs this node bought (metered, ended jobs)",
        value=sum(r[3] for r in bought),
    )


def _escrow_families(escrows: tuple[api.EscrowInfo, ...], payments: bool) -> Iterator[Metric]:
    def total(role: str | None, states: tuple[str, ...], part: str = "amount") -> int:
        return sum(
            e.amount if part == "amount" else e.settled()[0 if part == "paid" else 1]
            for e in escrows
            if (role is None or e.role == role) and e.state in states
        )

    yield _gauge("nunet_payments_enabled", "1 when paid jobs are configured", payments)
    yield CounterMetricFamily(
        "nunet_earned_ntx_base_units",
        "NTX claimed from escrows as a provider (base units: 1 NTX = 1,000,000)",
        value=total("provider", ("claimed",), "paid"),
    )
    yield GaugeMetricFamily(
        "nunet_locked_ntx_base_units",
        "NTX in open escrow locks, either role (base units)",
        value=total(None, api.ESCROW_OPEN_STATES),
    )
    yield CounterMetricFamily(
        "nunet_spent_ntx_base_units",
        "NTX paid out to providers as a consumer (base units)",
        value=total("consumer", ("paid_out",), "paid"),
    )
    yield CounterMetricFamily(
        "nunet_refunded_ntx_base_units",
        "NTX refunded to this node as a consumer (base units)",
        value=total("consumer", ("refunded", "paid_out"), "refunded"),
    )
    states = GaugeMetricFamily(
        "nunet_escrows", "Escrows by role and state", labels=["role", "state"]
    )
    counts: dict[tuple[str, str], int] = {}
    for escrow in escrows:
        counts[(escrow.role, escrow.state)] = counts.get((escrow.role, escrow.state), 0) + 1
    for (role, state), count in sorted(counts.items()):
        states.add_metric([role, state], count)
    yield states


def registry_for(
    ctx: NodeContext, source: MetricsSource, token: trio.lowlevel.TrioToken
) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(NodeCollector(ctx, source, token))
    ProcessCollector(namespace="nunet", registry=registry)  # CPU, memory, open files
    return registry


async def serve_metrics(node: NodeContext, source: MetricsSource) -> None:
    """Serve the endpoint while the node runs, if ``[metrics] listen`` says where."""
    address = metrics_address(node.settings.metrics.listen)
    if address is None:
        return
    host, port = address
    registry = registry_for(node, source, trio.lowlevel.current_trio_token())
    try:
        server, thread = start_http_server(port, addr=host, registry=registry)
    except OSError as exc:
        supervise.FAILURES.count("metrics")
        log.error(
            "metrics: cannot listen on %s (%s); change [metrics] listen and restart",
            node.settings.metrics.listen,
            exc.strerror or exc,
        )
        return
    bound_host, bound_port = str(server.server_address[0]), int(server.server_address[1])
    shown = f"[{bound_host}]" if ":" in bound_host else bound_host
    log.info("metrics: serving http://%s:%d/metrics", shown, bound_port)
    try:
        await trio.sleep_forever()
    finally:
        # shutdown() waits for the server's poll loop (0.5 s at most): off the trio thread.
        with trio.CancelScope(shield=True), trio.move_on_after(2.0):
            await trio.to_thread.run_sync(server.shutdown, abandon_on_cancel=True)
        server.server_close()
        thread.join(timeout=1.0)
