"""A peer as the peer table holds it (its last advert and heartbeat, as signed) and as the API
shows it (``to_api_peer``): the one conversion the network room and the consumer's matching
both read.
"""

from __future__ import annotations

from typing import Any

import msgspec

from engine.domain.offers import Peer, PeerGpu, PeerResources, Pool, ResourceSpec
from engine.domain.wire import Advert, Heartbeat, price_units_of

MISSED_HEARTBEATS = 3  # a peer silent this many heartbeat intervals is dropped


class PeerInfo(msgspec.Struct, frozen=True, kw_only=True):
    peer_id: str
    addrs: tuple[str, ...] = ()
    relayed: bool = False
    latency_ms: float | None = None
    channel: str = ""
    advert: Advert | None = None
    heartbeat: Heartbeat | None = None
    last_seen: float = 0.0
    verified: bool = False  # we talked to it directly (see the module docstring)

    @property
    def direct(self) -> bool:
        return not self.relayed


def to_api_peer(info: PeerInfo) -> Peer:
    advert, beat = info.advert, info.heartbeat
    resources: PeerResources | None = None
    if advert is not None or beat is not None:
        resources = PeerResources(
            cpu_mhz=advert.cpu_mhz if advert else (beat.cpu_mhz if beat else 0),
            memory_mb=advert.ram_mb if advert else (beat.ram_mb if beat else 0),
            disk_mb=advert.disk_mb if advert else 0,
            gpus=tuple(
                PeerGpu(vendor=g.vendor, model=g.model, vram_mb=g.vram_mb)
                for g in (advert.gpus if advert else ())
            ),
            price_units=price_units_of(advert.prices) if advert else {},
            executors=tuple(advert.executors) if advert else (),
            frameworks=tuple(advert.frameworks) if advert else (),
            version=advert.version if advert else "",
            slots=advert.slots if advert else 1,
            shell=not advert.no_shell if advert else True,
            free_cpu_mhz=beat.free_cpu_mhz if beat else None,
            free_memory_mb=beat.free_ram_mb if beat else None,
            free_gpus=beat.free_gpus if beat else None,
            free_vram_mb=beat.free_vram_mb if beat else None,
            running_jobs=beat.running_jobs if beat else None,
            claimed_units=beat.ntx_claimed if beat else None,
            uptime_s=beat.uptime_s if beat else None,
            specs=_convert(advert.specs, tuple[ResourceSpec, ...]) if advert else (),
            pools=_convert(advert.pools, tuple[Pool, ...]) if advert else (),
        )
    return Peer(
        peer_id=info.peer_id,
        addrs=tuple(info.addrs),
        relayed=info.relayed,
        latency_ms=info.latency_ms,
        channel=info.channel,
        resources=resources,
        last_seen=info.last_seen,
        last_heartbeat=beat.at if beat else None,
        verified=info.verified,
        display_name=advert.display_name if advert else "",
    )


def _convert(items: Any, into: Any) -> Any:
    """An advert's specs or pools as the facade's records (same fields, checked on decode)."""
    return msgspec.convert(items, into, from_attributes=True)
