"""A job's private IP network across providers (issue 25 §2; docs/cluster-overlay.md): the
replicas' containers, each with ``network_mode: none``, get a TUN device ``nunet0`` with an
address in the job's /24, and the providers' engines carry its packets over libp2p.

The members (which peer holds which address) are set by whoever schedules the job: for now
by the owner through ``OverlayJoin`` (the gang scheduling of §2 will send the same)."""

from __future__ import annotations

from typing import Annotated

import msgspec

from engine.api.base import Command, Record

# A job id as the job protocol takes it; an IPv4 address in dotted form.
JobId = Annotated[str, msgspec.Meta(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$")]
Ipv4 = Annotated[str, msgspec.Meta(min_length=7, max_length=15, pattern=r"^\d{1,3}(\.\d{1,3}){3}$")]
PeerId = Annotated[str, msgspec.Meta(min_length=1, max_length=128)]


class OverlayMember(Record, frozen=True):
    """One replica of the job: the provider running it and its address in the job's /24."""

    peer_id: PeerId
    address: Ipv4


class OverlayStats(Record, frozen=True):
    """What this node carried for one job's overlay: metered IP bytes (packets as the
    containers sent and received them, headers included) and what it refused."""

    job_id: str
    address: str  # this node's replica's address ("": not joined)
    subnet: str  # the job's /24, "10.x.y.0/24"
    members: tuple[OverlayMember, ...] = ()
    bytes_out: int = 0  # metered: from our replica, carried to the job's other members
    bytes_in: int = 0  # metered: from the job's other members, delivered to our replica
    packets_out: int = 0
    packets_in: int = 0
    dropped_out: int = 0  # our replica's packets refused (not IPv4, wrong source or subnet,
    # no such member, over the size, queue full)
    dropped_in: int = 0  # packets from members refused (spoofed source, wrong destination,
    # bad header, over the size or the rate)
    strangers_refused: int = 0  # streams from peers that are not members of this job
    peers_connected: int = 0  # members whose stream to us is open now
    carrying: bool = True  # False: ended (left, or its container exited); figures final


class OverlayStatusReply(Record, frozen=True):
    overlays: tuple[OverlayStats, ...] = ()


class OverlayJoin(Command, tag="overlay_join", frozen=True):
    """Give ``container`` (a running container of this node's engine, by id or name) the
    address ``address`` on ``nunet0`` in ``subnet`` and carry its packets to and from
    ``members`` only (``members`` includes this node's own entry)."""

    reply = OverlayStats
    job_id: JobId
    container: Annotated[str, msgspec.Meta(min_length=1, max_length=128)]
    subnet: Annotated[str, msgspec.Meta(max_length=18)]
    address: Ipv4
    members: Annotated[tuple[OverlayMember, ...], msgspec.Meta(min_length=2, max_length=64)]


class OverlayLeave(Command, tag="overlay_leave", frozen=True):
    """Remove the job's device and close its streams (its figures stay until the node stops)."""

    job_id: JobId


class OverlayStatus(Command, tag="overlay_status", frozen=True):
    reply = OverlayStatusReply
    job_id: str = ""  # "": every job's
