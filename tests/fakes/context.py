"""A real ``NodeContext`` in a temporary folder, for building one subsystem on its own."""

from __future__ import annotations

from pathlib import Path

import msgspec
from nacl.signing import SigningKey

from engine import api
from engine.config import JobSettings, Paths, Settings
from engine.context import NodeContext
from engine.identity import Identity
from engine.probes import HostProbes
from engine.store import Store


def identity(seed: int) -> Identity:
    """A fixed identity: ``seed`` picks which (peers in one test use different seeds)."""
    return Identity(SigningKey(bytes([seed]) * 32))


def make_context(
    root: Path,
    *,
    seed: int = 7,
    jobs: JobSettings | None = None,
    payments: bool = False,
    network: bool = True,
    gpus: tuple[api.GpuInfo, ...] = (),
) -> tuple[NodeContext, list[api.Event]]:
    """The context and the list its ``emit`` appends every event to. ``payments``: a
    backend and an oracle URL are configured (nothing listens there: the ports are fakes)."""
    root.mkdir(parents=True, exist_ok=True)
    paths = Paths.for_home(root)
    paths.ensure()
    settings = Settings(jobs=jobs or JobSettings(executors=["process"]))
    if payments:
        settings = msgspec.structs.replace(
            settings,
            payments=msgspec.structs.replace(
                settings.payments, backend="local", oracle_url="http://127.0.0.1:9"
            ),
        )
    events: list[api.Event] = []
    ctx = NodeContext(
        paths=paths,
        settings=settings,
        identity=identity(seed),
        store=Store(paths.database),
        emit=events.append,
        probes=HostProbes(),
        version="0+test",
        network_enabled=network,
        gpus=gpus,
    )
    return ctx, events


def onboard(ctx: NodeContext, memory_mb: int = 16384, cpu_mhz: int = 5000) -> None:
    ctx.store.save_onboarding(
        api.Onboarding(memory_mb=memory_mb, cpu_mhz=cpu_mhz, channel="c", address="a"),
        "onboard",
    )
