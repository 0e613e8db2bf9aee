"""The network: peers, their adverts and heartbeats, chat, the channel's dashboard.

Data and commands of engine/network/; handlers in engine/network/service.py.
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

from engine.api.base import Command, Done, Event, Record
from engine.domain.offers import Peer


class PeerList(Record, frozen=True):
    channel: str | None
    peers: tuple[Peer, ...] = ()


class ChatMessage(Record, frozen=True):
    peer_id: str  # the other side of the conversation
    sender: str = msgspec.field(name="from")
    text: str
    at: float
    seq: int | None = None
    direction: Literal["in", "out"] = "in"
    # delivered: acknowledged by the peer; queued: waiting for the peer to come back
    status: Literal["delivered", "queued", "received"] = "received"


class ChatRequest(Record, frozen=True):
    id: int
    peer_id: str
    at: float
    # The newest messages it sent meanwhile, held in memory until the request is accepted.
    preview: tuple[str, ...] = ()


class ChatConversation(Record, frozen=True):
    peer_id: str
    messages: int
    last_at: float


class ChatOverview(Record, frozen=True):
    requests: tuple[ChatRequest, ...] = ()
    conversations: tuple[ChatConversation, ...] = ()


class ChatHistoryReply(Record, frozen=True):
    peer_id: str
    messages: tuple[ChatMessage, ...] = ()


class ChannelTotals(Record, frozen=True):
    providers: int = 0
    cpu_mhz: int = 0
    free_cpu_mhz: int = 0
    memory_mb: int = 0
    free_memory_mb: int = 0
    gpus: int = 0
    free_gpus: int = 0
    vram_mb: int = 0
    free_vram_mb: int = 0
    running_jobs: int = 0
    paid_units: int = 0  # NTX base units providers on the channel have claimed from escrows


class NetworkStatus(Record, frozen=True):
    """NuNet's network-status dashboard, from the heartbeats this node has heard."""

    channel: str | None
    online: bool
    listen_addrs: tuple[str, ...] = ()
    connected_peers: int = 0
    totals: ChannelTotals = msgspec.field(default_factory=ChannelTotals)
    cpu_utilisation_percent: float | None = None
    memory_utilisation_percent: float | None = None
    peers: tuple[Peer, ...] = ()
    # This node's own ended jobs: what it ran and bought, and the metered NTX of each (its
    # escrow's, the signed receipt's charge, for a paid job: what its own views show),
    # base units.
    jobs_run: int = 0
    cpu_mticks_run: float = 0.0
    jobs_bought: int = 0
    metered_run_units: int = 0
    metered_bought_units: int = 0
    # This node's NTX that moved on chain through the escrow (paid jobs), base units:
    # claimed as provider, paid out to providers as consumer, in open locks.
    claimed_units: int = 0
    paid_out_units: int = 0
    locked_units: int = 0
    # Handler and task failures contained since the node started, by name (supervise.py).
    contained_failures: dict[str, int] = msgspec.field(default_factory=dict)


class ReachabilityEvidence(Record, frozen=True):
    """One peer's answer to a dial-back request (engine/network/autonat.py)."""

    peer_id: str
    addr: str  # what it dialled (or was asked to)
    # reached / failed: it dialled; refused / no answer: it proves nothing
    outcome: Literal["reached", "failed", "refused", "no answer"]
    detail: str = ""
    at: float = 0.0


class RelayReservation(Record, frozen=True):
    relay_peer_id: str
    circuit_addr: str  # what peers dial to reach us through it
    expires_at: float


class PeerConnection(Record, frozen=True):
    peer_id: str
    path: Literal["direct", "relayed"]
    transport: str  # tcp, ws, quic…; for a relayed one, the relay's
    remote_addr: str  # as seen on the wire (a relayed one: the circuit)
    via_relay: str | None = None  # the relay's peer id, relayed only


class NetworkDoctorReport(Record, frozen=True):
    """Can the internet reach this node, and if not, the one fix that would help most."""

    online: bool
    # AutoNAT's verdict: public (peers dialled us back), private (they tried and failed),
    # unknown (nobody has dialled yet)
    reachability: Literal["public", "private", "unknown"] = "unknown"
    reachability_since: float | None = None
    checked_at: float | None = None
    evidence: tuple[ReachabilityEvidence, ...] = ()
    listen_addrs: tuple[str, ...] = ()
    observed_addrs: tuple[str, ...] = ()  # how peers see us (the dial-back servers said)
    reservations: tuple[RelayReservation, ...] = ()
    # The home router's port forward, by UPnP or NAT-PMP (engine/network/port_mapping.py):
    # what it forwards, or why nothing ("not tried": upnp = false, or no offer out yet);
    # upnp_addr: the address advertised for it.
    upnp: str = "not tried"
    upnp_addr: str | None = None
    connections: tuple[PeerConnection, ...] = ()
    # reachable directly / through a relay only / not at all / not known yet
    consumers_reach: Literal["direct", "relayed", "no", "unknown"] = "unknown"
    fix: str | None = None  # one line, when something would help


class NetworkDoctor(Command, tag="network_doctor", frozen=True):
    reply = NetworkDoctorReport


class ListPeers(Command, tag="peer_list", frozen=True):
    reply = PeerList
    dht: bool = False  # look the channel up in the DHT first, not only what gossip brought


class ChatStart(Command, tag="chat_start", frozen=True):
    reply = Done
    peer_id: str


class ChatList(Command, tag="chat_list", frozen=True):
    reply = ChatOverview


class ChatJoin(Command, tag="chat_join", frozen=True):
    reply = Done
    request_id: Annotated[int, msgspec.Meta(ge=1, le=2**63 - 1)]  # a SQLite rowid


class ChatClear(Command, tag="chat_clear", frozen=True):
    reply = Done


class ChatSend(Command, tag="chat_send", frozen=True):
    reply = ChatMessage
    peer_id: str
    text: str
    queue: bool = True  # keep it for later when the peer is unreachable (else refuse)


class ChatHistory(Command, tag="chat_history", frozen=True):
    reply = ChatHistoryReply
    peer_id: str
    limit: Annotated[int, msgspec.Meta(ge=1, le=100_000)] = 500


class GetNetworkStatus(Command, tag="network_status", frozen=True):
    reply = NetworkStatus


class PeerChanged(Event, tag="peer_changed", frozen=True):
    peer_id: str
    peer: Peer | None  # None: the peer left the list


class ChatMessageEvent(Event, tag="chat_message", frozen=True):
    message: ChatMessage


class ChatRequestEvent(Event, tag="chat_request", frozen=True):
    request: ChatRequest


class NetworkChanged(Event, tag="network_changed", frozen=True):
    online: bool
    channel: str | None
    listen_addrs: tuple[str, ...] = ()
    error: str | None = None
