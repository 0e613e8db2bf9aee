"""The node as the header and the dashboards show it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from engine.api import Capacity, NodeInfo, Onboarding


@dataclass(frozen=True)
class NodeView:
    """One consistent reading of the node: info plus the full and onboarded capacity."""

    info: NodeInfo
    full: Capacity
    onboarded: Capacity | None = None

    @property
    def onboarding(self) -> Onboarding | None:
        return self.info.onboarded


NetworkState = Literal["unknown", "off", "offline", "online"]


@dataclass(frozen=True)
class NetworkView:
    """The node's place on the network, as the header shows it."""

    state: NetworkState = "unknown"
    channel: str | None = None
    peers: int = 0
    error: str | None = None
