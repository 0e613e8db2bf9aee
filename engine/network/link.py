"""The node's side of the network: what to advertise, what to keep, what to tell the UI.

``NodeNetwork`` runs a ``NetworkService`` for the node's channel (the onboarding's, or the
configured one for a consumer), restarts it when the channel changes, keeps running when the
listen port is taken (it says so and retries), persists peers and chat to the store before
anything is announced, and answers the peer, chat and network-status commands.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec
import trio

from engine import api
from engine.context import NodeContext
from engine.domain import wire
from engine.domain.peer_info import PeerInfo, to_api_peer
from engine.errors import EngineError
from engine.network import supervise
from engine.network.chat import (
    ChatFailure,
    MessageTooLarge,
    PeerUnreachable,
    check_text,
    direct_conversation,
)
from engine.network.chat_quarantine import ChatQuarantine
from engine.network.doctor import diagnose
from engine.network.heartbeat import HeartbeatFigures
from engine.network.host import peer_id_of
from engine.network.overlay import OVERLAY_PROTOCOL, OverlayCarrier
from engine.network.service import NetworkService
from engine.ports import DataPort, JobsPort, NodeFacts, TotalsPort
from engine.store import consumer_reputations

log = logging.getLogger("nunet.network.link")

RETRY_S = (1.0, 2.0, 5.0, 10.0, 30.0)
# Starts in a row that fail on the remembered port before going back to the configured one.
FALLBACK_AFTER_FAILURES = 3
QUEUE_RETRY_S = 2.0
JOB_PEERS_TTL_S = 5.0  # how stale the set of peers we have jobs with may be
NETWORK_RESTART = "network failed, restarting"
# Stored peers (issue 21): rows not heard from for a day go, and at most this many stay
# (pruned every PRUNE_EVERY saves): fresh identities cost an attacker nothing.
PEER_ROW_TTL_S = 24 * 3600.0
MAX_PEER_ROWS = 1024
PRUNE_EVERY = 64


DEFAULT_LISTEN = ("/ip4/0.0.0.0/tcp/9000",)  # engine/config.py's network.listen default


def listen_for(listen: list[str], onboarded: bool, mode: str | None) -> list[str]:
    """Where to listen: a node that only buys (not onboarded, not in provider mode) with the
    default, every-interface listen address keeps to loopback; it dials providers itself and
    needs no one to dial it. A listen address set in the config is used as it is."""
    if onboarded or mode == "provider" or tuple(listen) != DEFAULT_LISTEN:
        return list(listen)
    return [addr.replace("/ip4/0.0.0.0/", "/ip4/127.0.0.1/", 1) for addr in listen]


class NodeNetwork:
    """``jobs``: the jobs room (built on first use), served on each (re)started service;
    ``totals``: what this node ran, bought, earned and spent; ``facts``: its capacity and
    mode, for the advert and the listen address."""

    def __init__(
        self,
        ctx: NodeContext,
        *,
        facts: NodeFacts,
        jobs: Callable[[], JobsPort],
        totals: TotalsPort,
        data: Callable[[], DataPort] | None = None,
    ) -> None:
        self.ctx = ctx
        self._facts = facts
        self._jobs = jobs
        self._data = data
        self._totals = totals
        self.service: NetworkService | None = None
        self._scope: trio.CancelScope | None = None
        self._running_channel: str | None = None
        self._wake_queue = trio.Event()
        # Rows being sent right now by a command: the queue loop must not send them again.
        self._in_flight: set[int] = set()
        # Chat from peers not in good standing waits here, not in the database (issue 21).
        self.quarantine = ChatQuarantine()
        # Jobs' private networks across providers (issue 25 §2), carried while the network runs.
        self.overlay = OverlayCarrier(lambda: self.require_service("the overlay"))
        self._accepted: set[str] = set()  # peers the user accepted a chat with, as learnt
        self._job_peers: set[str] = set()
        self._job_peers_at = -JOB_PEERS_TTL_S
        # The addresses bound by the first start (tcp/0 resolved): a restart listens there
        # again, or peers that know our address would lose us for good.
        self._bound_listen: list[str] | None = None
        self._bound_listen_loopback = False
        self._saves = 0

    # --- lifecycle -------------------------------------------------------------------------

    def channel(self) -> str:
        onboarding = self.ctx.store.get_onboarding()
        return onboarding.channel if onboarding else self.ctx.settings.network.channel

    def mdns(self) -> bool:
        """mDNS only for an active provider onboarded with -l (local discovery)."""
        onboarding = self.ctx.store.get_onboarding()
        return bool(onboarding and onboarding.local_discovery and onboarding.state == "active")

    async def run(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Keep a service up for the current channel; never lets a network failure out."""
        task_status.started()
        failures = 0
        while True:
            channel = self.channel()
            mdns = self.mdns()
            settings = self.ctx.settings.network
            listen = listen_for(
                settings.listen, self.ctx.store.get_onboarding() is not None, self._facts.mode()
            )
            if listen != settings.listen:
                settings = msgspec.structs.replace(settings, listen=listen)
            if self._bound_listen is not None and self._bound_listen_loopback != (
                listen != self.ctx.settings.network.listen
            ):
                self._bound_listen = None  # a consumer became a provider, or back
            self._bound_listen_loopback = listen != self.ctx.settings.network.listen
            if self._bound_listen and failures >= FALLBACK_AFTER_FAILURES:
                log.warning(
                    "cannot listen on %s again; back to %s",
                    ", ".join(self._bound_listen),
                    ", ".join(settings.listen),
                )
                self._bound_listen = None
            if self._bound_listen:
                settings = msgspec.structs.replace(settings, listen=list(self._bound_listen))
            service = NetworkService(
                self.ctx.identity,
                settings,
                channel,
                self,
                chat_seq_floor=self.ctx.store.chat_seq_floor,
                mdns=mdns,
            )
            began = trio.current_time()
            with trio.CancelScope() as scope:
                self._scope = scope
                try:
                    async with trio.open_nursery() as nursery:
                        await nursery.start(service.run)
                        self._bound_listen = self._bound_listen or service.bound_listen()
                        self.service = service
                        self._running_channel = channel
                        self._jobs().attach(service)
                        if self._data is not None:
                            self._data().attach(service)
                        service.set_stream_handler(OVERLAY_PROTOCOL, self.overlay.handle)
                        failures = 0
                        self._announce(online=True, channel=channel)
                        nursery.start_soon(
                            supervise.supervised, "chat queue", self._deliver_queued_loop
                        )
                        await trio.sleep_forever()
                except Exception as exc:
                    message = _describe(exc)
                    supervise.FAILURES.count("network")
                    # Tests grep for NETWORK_RESTART: nothing a peer sends may lead here.
                    log.warning("%s on %s: %s", NETWORK_RESTART, channel, message)
                    self._announce(online=False, channel=channel, error=message)
            self.service = None
            self._running_channel = None
            if scope.cancelled_caught:
                continue  # restart on the new channel at once
            if trio.current_time() - began > 60:
                failures = 0
            await trio.sleep(RETRY_S[min(failures, len(RETRY_S) - 1)])
            failures += 1

    def onboarding_changed(self) -> None:
        """Called by the node after onboarding, pause, resume, resource-config, offboard."""
        public = listen_for(
            self.ctx.settings.network.listen,
            self.ctx.store.get_onboarding() is not None,
            self._facts.mode(),
        )
        if (
            self._scope is not None
            and self._bound_listen_loopback
            and (public == self.ctx.settings.network.listen)
        ):
            log.info("onboarded: listening on %s", ", ".join(public))
            self._scope.cancel()  # providers must be reachable: restart on the real address
        elif self._scope is not None and self._running_channel not in (None, self.channel()):
            log.info("channel changed to %s; restarting the network", self.channel())
            self._scope.cancel()
        elif self.service is not None:
            # Local discovery (-l, active) follows onboarding in place: a restart would drop
            # every connection and lose the withdrawal of our advert when pausing.
            if self.service.mdns != self.mdns():
                log.info("local discovery %s", "on" if self.mdns() else "off")
                self.service.set_mdns(self.mdns())
            self.service.republish_advert()

    def _announce(self, *, online: bool, channel: str | None, error: str | None = None) -> None:
        addrs = tuple(self.service.listen_addrs()) if online and self.service else ()
        self.ctx.emit(
            api.NetworkChanged(
                at=time.time(), online=online, channel=channel, listen_addrs=addrs, error=error
            )
        )

    def listen_addrs(self) -> tuple[str, ...]:
        return tuple(self.service.listen_addrs()) if self.service else ()

    def beat_now(self) -> None:
        """Free resources changed (a job started or ended): a heartbeat at once."""
        if self.service is not None:
            self.service.beat_now()

    def require_service(self, what: str) -> NetworkService:
        if self.service is None:
            if not self.ctx.network_enabled:
                raise EngineError(
                    "no_network",
                    f"{what} needs a running node: start `nunet-tui daemon` (or keep the TUI "
                    "open) for this home, and run the command again",
                )
            raise EngineError(
                "offline", f"{what}: the network is not up yet (see `nunet-tui info`); retry"
            )
        return self.service

    # --- NetworkCallbacks (trio thread) --------------------------------------------------

    def advert(self) -> wire.Advert | None:
        """The provider's own offer view (jobs/provider_offer.py), as the wire carries it:
        what consumers match on is what its admission judges."""
        offer = self._jobs().offer()
        if not offer.accepting:
            return None
        res = offer.resources
        return wire.Advert(
            peer_id="",
            channel="",
            cpu_mhz=res.cpu_mhz,
            ram_mb=res.memory_mb,
            disk_mb=res.disk_mb,
            gpus=tuple(
                wire.Gpu(vendor=g.vendor, model=g.model, vram_mb=g.vram_mb) for g in res.gpus
            ),
            prices=wire.wire_prices(res.price_units),
            executors=res.executors,
            frameworks=res.frameworks,
            version=self.ctx.version,
            slots=res.slots,
            no_shell=not res.shell,
            specs=tuple(
                msgspec.convert(s, wire.AdvertSpec, from_attributes=True) for s in res.specs
            ),
            pools=tuple(
                msgspec.convert(p, wire.AdvertPool, from_attributes=True) for p in res.pools
            ),
            display_name=self.ctx.settings.provider.display_name,
        )

    def heartbeat(self) -> HeartbeatFigures | None:
        """The load figures of the same offer view the advert carries."""
        offer = self._jobs().offer()
        if not offer.accepting:
            return None
        res = offer.resources
        return HeartbeatFigures(
            cpu_mhz=res.cpu_mhz,
            ram_mb=res.memory_mb,
            gpus=len(res.gpus),
            vram_mb=offer.vram_mb,
            free_cpu_mhz=res.free_cpu_mhz or 0,
            free_ram_mb=res.free_memory_mb or 0,
            free_gpus=res.free_gpus or 0,
            free_vram_mb=res.free_vram_mb or 0,
            running_jobs=res.running_jobs or 0,
            ntx_claimed=self._totals.ntx_claimed(),
        )

    def on_peer_changed(self, peer_id: str, info: PeerInfo | None) -> None:
        peer = to_api_peer(info) if info is not None else None
        if peer is not None:
            self.ctx.store.save_peer(
                peer_id, peer.channel, msgspec.json.encode(peer).decode(), peer.last_seen
            )
            self._saves += 1
            if self._saves % PRUNE_EVERY == 0:
                self.ctx.store.prune_peers(time.time() - PEER_ROW_TTL_S, MAX_PEER_ROWS)
        else:
            self.ctx.store.forget_unverified_peer(peer_id)
            if self.ctx.store.peers_with_queued_chat():
                self._wake_queue.set()
        self.ctx.emit(api.PeerChanged(at=time.time(), peer_id=peer_id, peer=peer))

    def in_good_standing(self, peer_id: str) -> bool:
        """An accepted chat, a job or an escrow with us: such a peer's chat is stored, it has
        streams and connections reserved that strangers (identities are free) cannot take,
        and the peer table never evicts it."""
        if peer_id in self._accepted:
            return True
        if self.ctx.store.chat_accepted(peer_id):
            self._accepted.add(peer_id)
            return True
        now = time.monotonic()
        if now - self._job_peers_at >= JOB_PEERS_TTL_S:
            self._job_peers, self._job_peers_at = self.ctx.store.job_peers(), now
        return peer_id in self._job_peers

    def accept_chat(self, peer_id: str) -> None:
        """The user accepted a chat with ``peer_id``: what it sent meanwhile is written now,
        before anything newer, and its messages are stored from now on."""
        store = self.ctx.store
        store.accept_chat(
            peer_id, direct_conversation(self.ctx.identity.peer_id, peer_id), time.time()
        )
        for held in self.quarantine.take(peer_id):
            store.add_chat_message(
                peer_id, held.conversation, "in", held.seq, held.text, held.at, "received"
            )
        self._accepted.add(peer_id)

    def on_chat_request(self, peer_id: str, conversation: str, at: float) -> None:
        if self.ctx.store.add_chat_request(peer_id, conversation, at):
            for request_id, pid, conv, when in self.ctx.store.chat_requests():
                if pid == peer_id and conv == conversation:
                    request = api.ChatRequest(
                        id=request_id, peer_id=pid, at=when, preview=self.quarantine.preview(pid)
                    )
                    self.ctx.emit(api.ChatRequestEvent(at=time.time(), request=request))

    def on_chat_join(self, peer_id: str, conversation: str, at: float) -> None:
        log.info("peer %s joined the chat", peer_id)

    def on_message(self, peer_id: str, conversation: str, text: str, seq: int, at: float) -> None:
        message = api.ChatMessage(
            peer_id=peer_id, sender=peer_id, text=text, at=at, seq=seq, direction="in"
        )
        if not self.in_good_standing(peer_id):
            # Nobody accepted this chat: held in memory (bounded) and shown as a request,
            # written once the user accepts. Identities are free; disk is not.
            self.quarantine.add(peer_id, conversation, seq, text, at)
            self.on_chat_request(peer_id, conversation, time.time())
            self.ctx.emit(api.ChatMessageEvent(at=time.time(), message=message))
            return
        # Stored before the chat layer acknowledges: an ack means "kept on this side".
        stored = self.ctx.store.add_chat_message(
            peer_id, conversation, "in", seq, text, at, "received"
        )
        if stored is not None:
            self.ctx.emit(api.ChatMessageEvent(at=time.time(), message=message))

    # --- commands --------------------------------------------------------------------------

    def commands(self) -> dict[type[api.Command], Callable[[Any], Awaitable[Any]]]:
        return {
            api.ListPeers: self._list_peers,
            api.ChatStart: self._chat_start,
            api.ChatList: self._chat_list,
            api.ChatJoin: self._chat_join,
            api.ChatClear: self._chat_clear,
            api.ChatSend: self._chat_send,
            api.ChatHistory: self._chat_history,
            api.GetNetworkStatus: self._network_status,
            api.NetworkDoctor: self._doctor,
        }

    async def _list_peers(self, command: api.ListPeers) -> api.PeerList:
        service = self.require_service("peer list")
        if command.dht and service.discovery is not None:
            with trio.move_on_after(10):
                await service.discovery.lookup()
        records = consumer_reputations(self.ctx.store)
        peers = tuple(
            msgspec.structs.replace(peer, reputation=records.get(peer.peer_id))
            for peer in (to_api_peer(info) for info in service.peers())
        )
        return api.PeerList(channel=service.channel, peers=peers)

    async def _chat_start(self, command: api.ChatStart) -> api.Done:
        peer_id = _check_peer_id(command.peer_id, self.ctx.identity.peer_id)
        service = self.require_service("chat start")
        try:
            await service.start_chat(peer_id)
        except ChatFailure as exc:
            raise EngineError("unreachable", f"chat request not delivered: {exc}") from exc
        self.accept_chat(peer_id)  # we asked: what it answers is kept
        return api.Done(message=f"chat request sent to {peer_id}")

    async def _chat_list(self, command: api.ChatList) -> api.ChatOverview:
        store = self.ctx.store
        return api.ChatOverview(
            requests=tuple(
                api.ChatRequest(id=i, peer_id=p, at=at, preview=self.quarantine.preview(p))
                for i, p, _, at in store.chat_requests()
            ),
            conversations=tuple(
                api.ChatConversation(peer_id=p, messages=n, last_at=last)
                for p, n, last in store.conversations()
            ),
        )

    async def _chat_join(self, command: api.ChatJoin) -> api.Done:
        found = self.ctx.store.chat_request(command.request_id)
        if found is None or found[2] == "cleared":
            raise EngineError(
                "not_found",
                f"no open chat request {command.request_id}; `nunet-tui chat list` shows them",
            )
        peer_id, conversation, _ = found
        service = self.require_service("chat join")
        try:
            await service.join_chat(peer_id, conversation)
        except ChatFailure as exc:
            raise EngineError("unreachable", f"could not join: {exc}") from exc
        self.ctx.store.set_chat_request_state(command.request_id, "joined")
        self.accept_chat(peer_id)
        return api.Done(message=f"joined the chat with {peer_id}")

    async def _chat_clear(self, command: api.ChatClear) -> api.Done:
        cleared = self.ctx.store.clear_chat_requests()
        return api.Done(message=f"cleared {cleared} open chat request(s)")

    async def _chat_send(self, command: api.ChatSend) -> api.ChatMessage:
        me = self.ctx.identity.peer_id
        peer_id = _check_peer_id(command.peer_id, me)
        try:
            check_text(command.text)
        except ChatFailure as exc:
            raise EngineError("invalid", f"text: {exc}") from exc
        store = self.ctx.store
        service = self.service
        if service is None and not command.queue:
            self.require_service("chat send")
        # Committed before it goes on the wire; delivered messages are marked afterwards.
        # Writing to a peer accepts its chat: what it sent before is kept, ahead of this.
        self.accept_chat(peer_id)
        conversation = direct_conversation(me, peer_id)
        now = time.time()
        row = store.add_chat_message(
            peer_id, conversation, "out", None, command.text, now, "queued"
        )
        assert row is not None  # seq is NULL while queued, so the insert cannot collide
        queued = api.ChatMessage(
            peer_id=peer_id, sender=me, text=command.text, at=now, direction="out", status="queued"
        )
        if service is None or len(store.queued_chat(peer_id)) > 1:
            # Behind other queued messages: keep the order, the queue loop delivers it.
            self._wake_queue.set()
            return queued
        self._in_flight.add(row)
        try:
            seq, at = await service.send_chat(peer_id, command.text, conversation)
        except MessageTooLarge as exc:
            store.delete_chat_message(row)
            raise EngineError("invalid", f"text: {exc}") from exc
        except ChatFailure as exc:
            if not command.queue:
                store.delete_chat_message(row)
                raise EngineError("unreachable", f"not sent: {exc}") from exc
            log.info("chat to %s queued: %s", peer_id, exc)
            return queued
        finally:
            self._in_flight.discard(row)
        store.mark_chat_delivered(row, seq, at)
        return api.ChatMessage(
            peer_id=peer_id,
            sender=me,
            text=command.text,
            at=at,
            seq=seq,
            direction="out",
            status="delivered",
        )

    async def _deliver_queued_loop(self) -> None:
        """Deliver queued chat in order when the peer is back; stop at a peer's first failure."""
        while True:
            with trio.move_on_after(QUEUE_RETRY_S):
                await self._wake_queue.wait()
            self._wake_queue = trio.Event()
            service = self.service
            if service is None:
                continue
            for peer_id in self.ctx.store.peers_with_queued_chat():
                for row, conversation, text in self.ctx.store.queued_chat(peer_id):
                    if row in self._in_flight:
                        break  # a command is sending it; later rows wait to keep the order
                    try:
                        seq, at = await service.send_chat(peer_id, text, conversation)
                    except PeerUnreachable:
                        break
                    except ChatFailure as exc:
                        log.warning("dropping undeliverable chat message to %s: %s", peer_id, exc)
                        self.ctx.store.delete_chat_message(row)
                        continue
                    self.ctx.store.mark_chat_delivered(row, seq, at)

    async def _chat_history(self, command: api.ChatHistory) -> api.ChatHistoryReply:
        me = self.ctx.identity.peer_id
        peer_id = _check_peer_id(command.peer_id, me)
        limit = max(1, min(command.limit, 10_000))
        messages = tuple(
            api.ChatMessage(
                peer_id=peer_id,
                sender=me if direction == "out" else peer_id,
                text=text,
                at=at,
                seq=seq,
                direction="out" if direction == "out" else "in",
                status=status,  # type: ignore[arg-type]
            )
            for _, _, direction, seq, text, at, status in self.ctx.store.chat_messages(
                peer_id, limit
            )
        )
        # Not accepted yet: what it sent is held in memory, shown all the same.
        held = tuple(
            api.ChatMessage(
                peer_id=peer_id, sender=peer_id, text=h.text, at=h.at, seq=h.seq, direction="in"
            )
            for h in self.quarantine.messages(peer_id)
        )
        messages = (messages + held)[-limit:]
        return api.ChatHistoryReply(peer_id=peer_id, messages=messages)

    async def _network_status(self, command: api.GetNetworkStatus) -> api.NetworkStatus:
        service = self.service
        jobs = self._totals.job_totals()
        if service is None:
            return api.NetworkStatus(channel=self.channel(), online=False, **jobs)
        peers = [to_api_peer(info) for info in service.peers()]
        rows = [p.resources for p in peers if p.resources is not None and p.resources.cpu_mhz]
        offer = self._jobs().offer()  # this node's own row: its offer, as it beats it
        if offer.accepting:
            rows.append(
                msgspec.structs.replace(offer.resources, claimed_units=self._totals.ntx_claimed())
            )
        totals = _totals(rows)
        return api.NetworkStatus(
            channel=service.channel,
            online=True,
            listen_addrs=tuple(service.listen_addrs()),
            connected_peers=len(service.connected_peers()),
            totals=totals,
            cpu_utilisation_percent=_used_percent(totals.cpu_mhz, totals.free_cpu_mhz),
            memory_utilisation_percent=_used_percent(totals.memory_mb, totals.free_memory_mb),
            peers=tuple(sorted(peers, key=lambda p: p.last_seen, reverse=True)),
            contained_failures=supervise.FAILURES.snapshot(),
            **jobs,
        )

    async def _doctor(self, command: api.NetworkDoctor) -> api.NetworkDoctorReport:
        return diagnose(self.service)


def _totals(rows: list[api.PeerResources]) -> api.ChannelTotals:
    return api.ChannelTotals(
        providers=len(rows),
        cpu_mhz=sum(r.cpu_mhz for r in rows),
        free_cpu_mhz=sum(r.free_cpu_mhz or 0 for r in rows),
        memory_mb=sum(r.memory_mb for r in rows),
        free_memory_mb=sum(r.free_memory_mb or 0 for r in rows),
        gpus=sum(len(r.gpus) for r in rows),
        free_gpus=sum(r.free_gpus or 0 for r in rows),
        vram_mb=sum(g.vram_mb for r in rows for g in r.gpus),
        free_vram_mb=sum(r.free_vram_mb or 0 for r in rows),
        running_jobs=sum(r.running_jobs or 0 for r in rows),
        paid_units=sum(r.claimed_units or 0 for r in rows),
    )


def _used_percent(total: int, free: int) -> float | None:
    return None if total <= 0 else round(100.0 * (total - free) / total, 1)


def _check_peer_id(peer_id: str, me: str) -> str:
    peer_id = peer_id.strip()
    try:
        peer_id_of(peer_id)
    except Exception as exc:
        raise EngineError(
            "invalid",
            f"peer: {peer_id[:60]!r} is not a libp2p peer id (like 12D3KooW…); "
            "`nunet-tui peer list` shows them",
        ) from exc
    if peer_id == me:
        raise EngineError("invalid", "peer: that is this node's own peer id")
    return peer_id


def _describe(exc: BaseException) -> str:
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    text = str(exc) or type(exc).__name__
    if "Address already in use" in text or "in use" in text:
        return f"cannot listen: {text} (another node uses the port; set network.listen)"
    return text
