"""``NodeContext``: what every subsystem of the node shares, handed to each one by ``Node``.

Paths, settings, identity, store, the event fan-out, the host probes and the version: the
facts of this node that do not belong to any one subsystem. What a subsystem needs from
another one is not here: it asks for it by a narrow port (engine/ports.py) in its constructor.
Only ever touched from the engine's trio thread, like the node itself.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from engine import api
from engine.config import Paths, Settings
from engine.identity import Identity
from engine.store import Store

if TYPE_CHECKING:
    # The probes (engine/probes.py) import the resources and jobs rooms; the composition root
    # (node.py) builds them: the rooms that share this context do not import them for a type.
    from engine.probes import HostProbes

EventSink = Callable[[api.Event], None]


@dataclass
class NodeContext:
    paths: Paths
    settings: Settings
    identity: Identity
    store: Store
    emit: EventSink
    probes: HostProbes
    version: str
    # One-shot CLI engines run without the network (it would only join to leave again).
    network_enabled: bool = True
    # Filled in by Node.prepare(): GPU libraries may take a while to answer.
    gpus: tuple[api.GpuInfo, ...] = ()
    gpu_reason: str | None = None

    @property
    def payments_enabled(self) -> bool:
        """Paid jobs: a chain backend and an oracle are configured."""
        payments = self.settings.payments
        return payments.backend != "none" and bool(payments.oracle_url)
