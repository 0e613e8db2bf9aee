"""Chat under many identities (issue 21): 150 fresh libp2p identities, 50 from each of
127.0.0.1, 127.0.0.2 and 127.0.0.3 (one /24), open chat streams to a real provider daemon
and send it 4 KiB messages as fast as it acks them, while its honest consumer (in good
standing: an accepted chat) chats with it and submits a job.

The provider serves strangers a few chat streams per address and per subnet (the honest
consumer's are reserved), closes their idle streams after seconds, and keeps what they send
in a small bounded quarantine in memory, not in its database. The honest chat and the job go
through, and the provider's RSS and database stay bounded.

Before the fix (the issue's figures, real daemons): 82 identities held 9,932 chat streams
(RSS +87 MB) and an honest `job submit` failed; 10 identities grew the database by 95 MB in
100 s. After (2 busy cores): the 150 identities were served 42 streams at most at once (16
per address; each loopback address is its own subnet), 4,641 refused, the provider's RSS went
115 -> 140 MB, its database grew by 1.5 MB (the honest job's rows) of which chat 3.6 KB
(request rows only), and the honest chat and job went through.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import trio
from nacl.signing import SigningKey

from engine.domain import wire
from engine.identity import Identity
from engine.network.chat import CHAT_PROTOCOL, STREAMS_PER_ADDRESS, direct_conversation
from tests.adversarial.test_stream_exhaustion import RssWatch
from tests.daemon_harness import Daemon, wait_for
from tests.daemons.test_jobs_e2e import _pair, _state, _submit, scripts

__all__ = ["scripts"]

SOURCES = ("127.0.0.1", "127.0.0.2", "127.0.0.3")
PER_SOURCE = 50
STREAMS_EACH = 8  # what each identity tries to hold (1,200 in all)
ATTACK_S = 12.0
TEXT = "x" * 4000  # just under the 4 KiB a chat message may have
RSS_GROWTH_LIMIT_MB = 40.0
CHAT_GROWTH_LIMIT_B = 64 << 10  # strangers' request rows, paced per address; no texts
DB_GROWTH_LIMIT_B = 8 << 20  # the files, WAL included (the honest job writes there too)


def _db_bytes(daemon: Daemon) -> int:
    """The database's files (with its WAL, which the honest job writes to as well)."""
    base = Path(daemon.home.database)
    return sum(p.stat().st_size for p in base.parent.glob(base.name + "*") if p.exists())


def _chat_bytes(daemon: Daemon) -> int:
    """What chat takes in the database: message texts and request rows (~100 bytes each)."""
    with contextlib.closing(
        sqlite3.connect(f"file:{daemon.home.database}?mode=ro", uri=True)
    ) as db:
        texts = db.execute("SELECT COALESCE(SUM(LENGTH(text)), 0) FROM chat_messages").fetchone()
        requests = db.execute("SELECT COUNT(*) FROM chat_requests").fetchone()
    return int(texts[0]) + 100 * int(requests[0])


class Swarm:
    """Many identities in one trio loop on a thread: bare hosts (no DHT, no gossip), each
    dialing out from its own source address, so the victim sees them as it would see
    thousands of identities from a few machines."""

    def __init__(
        self,
        victim_addr: str,
        victim_id: str,
        *,
        sources: tuple[str, ...] = SOURCES,
        per_source: int = PER_SOURCE,
        streams_each: int = STREAMS_EACH,
        attack_s: float = ATTACK_S,
    ) -> None:
        self.victim_addr = victim_addr
        self.victim_id = victim_id
        self.sources, self.per_source = sources, per_source
        self.streams_each, self.attack_s = streams_each, attack_s
        self.report: dict[str, Any] = {
            "connected": 0,
            "streams_taken": 0,
            "streams_refused": 0,
            "acked": 0,
            "held_max": 0,
        }
        self._held = 0
        self._thread = threading.Thread(target=lambda: trio.run(self._main), daemon=True)
        self.done = threading.Event()

    def start(self) -> None:
        self._thread.start()

    async def _main(self) -> None:
        try:
            await self._attack()
        except BaseException as exc:  # reported to the test thread
            self.report["error"] = repr(exc)
        finally:
            self.done.set()

    async def _attack(self) -> None:
        from engine.network.host import build_host, parse_peer_addr

        info = parse_peer_addr(self.victim_addr)
        hosts: list[Any] = []
        async with contextlib.AsyncExitStack() as stack:
            for source in self.sources:
                for _ in range(self.per_source):
                    host = build_host(Identity(SigningKey.generate()), [])
                    # Dial from this source address (127.0.0.x): the victim counts per address.
                    for transport in host.get_network().transport_manager.get_transports():
                        transport.dial = _from_source(transport, source)
                    await stack.enter_async_context(host.run([]))
                    hosts.append(host)
            gate = trio.Semaphore(8)  # handshakes at once: under the victim's pending cap

            async def connect(host: Any) -> None:
                async with gate:
                    with contextlib.suppress(Exception), trio.fail_after(10):
                        await host.connect(info)
                        self.report["connected"] += 1

            async with trio.open_nursery() as nursery:
                for host in hosts:
                    nursery.start_soon(connect, host)
            deadline = trio.current_time() + self.attack_s
            async with trio.open_nursery() as nursery:
                for host in hosts:
                    for _ in range(self.streams_each):
                        nursery.start_soon(self._flood, host, deadline)
            for host in hosts:
                with contextlib.suppress(Exception), trio.move_on_after(2):
                    await host.close()

    async def _flood(self, host: Any, deadline: float) -> None:
        """One stream: a hello, then 4 KiB messages as fast as the victim acks them; a new
        stream whenever the victim ends one, until the deadline."""
        from engine.network.host import peer_id_of

        me = str(host.get_id())
        conversation = direct_conversation(me, self.victim_id)
        seq = 0
        while trio.current_time() < deadline:
            with trio.move_on_at(deadline):
                try:
                    stream = await host.new_stream(peer_id_of(self.victim_id), [CHAT_PROTOCOL])
                except Exception:
                    self.report["streams_refused"] += 1
                    await trio.sleep(0.5)
                    continue
                counted = False
                try:
                    hello = wire.ChatHello(conversation=conversation)
                    await wire.write_frame(stream, wire.encode_chat(hello), 1 << 20)
                    if not await _acked(stream):
                        self.report["streams_refused"] += 1
                        continue
                    self.report["streams_taken"] += 1
                    self._held += 1
                    counted = True
                    self.report["held_max"] = max(self.report["held_max"], self._held)
                    while True:
                        seq += 1
                        text = wire.ChatText(
                            conversation=conversation, seq=seq, text=TEXT, at=time.time()
                        )
                        await wire.write_frame(stream, wire.encode_chat(text), 1 << 20)
                        if not await _acked(stream):
                            break
                        self.report["acked"] += 1
                except Exception:
                    pass
                finally:
                    if counted:
                        self._held -= 1
                    with contextlib.suppress(Exception):
                        await stream.reset()
            await trio.sleep(0.2)


def _from_source(transport: Any, source: str) -> Callable[[Any], Any]:
    async def dial(maddr: Any) -> Any:
        return await transport.dial_with_source(maddr, (source, 0))

    return dial


async def _acked(stream: Any) -> bool:
    with trio.move_on_after(5):
        try:
            data = await wire.read_frame(stream, 1 << 20)
        except Exception:
            return False
        return data is not None and isinstance(wire.decode_chat(data), wire.ChatAck)
    return False


def test_chat_from_many_identities_leaves_honest_chat_and_jobs_alone(
    daemons: Callable[..., Daemon], scripts: str
) -> None:
    provider, consumer = _pair(daemons)
    # The honest consumer is in good standing: the provider wrote to it (an accepted chat).
    assert provider.cli("chat", "send", consumer.peer_id, "welcome")["status"] == "delivered"
    assert provider.proc is not None
    watch = RssWatch(provider.proc.pid)
    baseline, db_before, chat_before = watch.peak, _db_bytes(provider), _chat_bytes(provider)

    swarm = Swarm(provider.addrs()[0], provider.peer_id)
    swarm.start()
    wait_for(lambda: swarm.report["streams_taken"] > 0 or swarm.done.is_set(), "no attack", 90)
    time.sleep(2)  # the attack at full strength
    sent = consumer.cli("chat", "send", provider.peer_id, "honest words")
    assert sent["status"] == "delivered", sent
    job = _submit(consumer, f"{scripts}/iris.py", name="honest")
    assert job["state"] == "accepted" and job["provider"] == provider.peer_id, job
    assert swarm.done.wait(ATTACK_S + 60), "the attack never finished"
    wait_for(lambda: _state(consumer, job["job_id"]) == "completed", "honest job failed", 60)
    peak = watch.stop()
    db_after, chat_after = _db_bytes(provider), _chat_bytes(provider)
    report = swarm.report
    print(
        f"\nchat identities: {report}; RSS {baseline:.0f} -> {peak:.0f} MB; "
        f"database {db_before} -> {db_after} bytes, chat in it {chat_before} -> {chat_after}"
    )
    assert "error" not in report, report
    assert report["connected"] >= len(SOURCES) * PER_SOURCE * 0.9, report
    assert report["streams_taken"] > 0  # the attack ran and was served, up to the caps
    # Each loopback address is its own subnet: at most its address's share each.
    assert report["held_max"] <= len(SOURCES) * STREAMS_PER_ADDRESS, report

    history = [m["text"] for m in provider.cli("chat", "history", consumer.peer_id)["messages"]]
    assert history[-2:] == ["welcome", "honest words"]
    # Strangers' chat is shown as requests with a preview, and none of it is on disk.
    overview = provider.cli("chat", "list")
    stored = {c["peer_id"] for c in overview["conversations"]}
    assert stored == {consumer.peer_id}, stored
    assert any(r.get("preview") for r in overview["requests"]), overview["requests"][:3]
    assert chat_after - chat_before < CHAT_GROWTH_LIMIT_B, (chat_before, chat_after)
    assert db_after - db_before < DB_GROWTH_LIMIT_B, (db_before, db_after)
    assert peak - baseline < RSS_GROWTH_LIMIT_MB, (baseline, peak)
