"""Hostile peers run every attack in a loop against a provider while an honest consumer
chats with it and runs jobs on it; prints what the honest side got and what the victim paid.

Real daemons on 127.0.0.1 (a provider with the process executor, a consumer), the hostile
peer of tests/adversarial/hostile.py (plain py-libp2p, sending what our own encoders would
refuse to produce) and, since issue 21, many identities at once: 300 identities from
127.0.0.2-4 holding connections and idle job streams, chat floods from 90 more on
127.0.0.5-7, DHT floods from 50 more on 127.0.0.8-9 (valid advert records and provider
records), and Sybil adverts (fresh identities' signed adverts relayed over the hostile peer's
gossip, each naming an address this bench counts connects to). The attackers run at the
lowest CPU priority: on one 2-core machine they would otherwise measure how little CPU is
left to the victim, not what the victim does with what arrives. Half-way through, a
newcomer node starts, bootstrapped from the victim, and must list it.

Goals (issues 10 and 21): >= 99 % of chat messages delivered, the honest jobs complete, a
newcomer lists the victim within 10 s, the provider's RSS grows < 50 MB and its database
< 10 MB over the soak.
Usage: python bench/hostile_soak.py [SECONDS] [IDENTITIES]   (defaults 60 and 300; 0
identities runs the one-peer attacks only)
"""

from __future__ import annotations

import collections
import contextlib
import functools
import http.server
import logging
import os
import secrets
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import DaemonPair
from engine import api
from engine.config import Paths
from engine.domain import wire
from engine.domain.spec import JobSpec
from engine.errors import EngineError
from engine.network import adverts
from engine.network.discovery import topic_name
from tests.adversarial.hostile import JOB_PROTOCOL, HostilePeer, provider_advert, seal_job
from tests.adversarial.test_chat_identities import Swarm
from tests.adversarial.test_dht_flood import Flooder
from tests.adversarial.test_many_identities_connections import Dialer
from tests.adversarial.test_sybil_adverts import Trap, _fake_messages, _relay

CHANNEL = "nunet-demo-test"
HONEST_JOB = (
    "import time\nfor i in range(20):\n    print('tick', i, flush=True)\n    time.sleep(0.1)\n"
)
SPEC = JobSpec(framework="scikit-learn", expected_minutes=1)


def serve(root: Path) -> str:
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    handler.log_message = lambda *a: None  # type: ignore[attr-defined]
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_address[1]}"


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def db_mb(paths: Paths) -> float:
    files = [paths.database, paths.database.with_name(paths.database.name + "-wal")]
    return sum(f.stat().st_size for f in files if f.exists()) / (1 << 20)


# --- the attacks: each one round, from the hostile peer --------------------------------------


def idle_streams(peer: HostilePeer, victim: str) -> None:
    """Open many /nunet/job streams and say nothing on them."""
    opened = []
    for _ in range(200):
        try:
            opened.append(peer.open(victim, JOB_PROTOCOL, timeout=2))
        except Exception:
            break  # the victim's stream limit: what we want to see
    for stream in opened:
        stream.reset()


def partial_frames(peer: HostilePeer, victim: str) -> None:
    """Announce 1 MiB frames and send half of each."""
    held = []
    for _ in range(20):
        try:
            stream = peer.open(victim, JOB_PROTOCOL, timeout=2)
            stream.write(wire.encode_varint(1 << 20) + b"\0" * (512 << 10))
            held.append(stream)
        except Exception:
            break
    for stream in held:
        stream.reset()


def offer_flood(peer: HostilePeer, victim: str) -> None:
    for _ in range(100):
        offer = {
            "t": "offer",
            "v": 1,
            "job_id": secrets.token_hex(6),
            "spec": {"script_url": "http://127.0.0.1:9/x.py", "framework": "scikit-learn"},
            "consumer": peer.peer_id,
        }
        with contextlib.suppress(Exception):
            peer.request(victim, JOB_PROTOCOL, [seal_job(peer.identity, offer)], timeout=2)


def traversal_ids(peer: HostilePeer, victim: str) -> None:
    for job_id in ("../../../../tmp/x", "x/../" + "0" * 12, "/etc", "\0", "é" * 12):
        for kind in ("follow", "confirm", "fetch_results", "cancel"):
            message: dict[str, Any] = {"t": kind, "v": 1, "job_id": job_id}
            if kind == "confirm":
                message["total_ntx"] = 0.0
            with contextlib.suppress(Exception):
                peer.request(victim, JOB_PROTOCOL, [seal_job(peer.identity, message)], timeout=2)


def malformed_gossip(peer: HostilePeer, victim: str) -> None:
    for junk in (b"\x05\x0a\x03\xff\xff\xff", b"\xff\xff\xff\xff\x0f", secrets.token_bytes(64)):
        with contextlib.suppress(Exception):
            stream = peer.open(victim, "/meshsub/1.1.0", timeout=2)
            stream.write(junk)
            stream.reset()


def addressless_advert(peer: HostilePeer, victim: str) -> None:
    base = provider_advert(peer, channel=CHANNEL)
    stamped = adverts.stamp(
        base,
        peer_id=peer.peer_id,
        channel=CHANNEL,
        seq=int(time.time() * 1000),
        addrs=(),
        ttl_s=60,
    )
    sealed = wire.seal(peer.identity, "advert", stamped)

    async def publish() -> None:
        await peer.service.pubsub.publish(topic_name(CHANNEL, "adverts"), sealed)

    with contextlib.suppress(Exception):
        peer.call(publish)


ATTACKS: list[Callable[[HostilePeer, str], None]] = [
    idle_streams,
    partial_frames,
    offer_flood,
    traversal_ids,
    malformed_gossip,
    addressless_advert,
]


# --- many identities (issue 21): from several addresses at once, for the whole soak ----------

DIALER_SOURCES = ("127.0.0.2", "127.0.0.3", "127.0.0.4")
DIALER_STREAMS = 4  # idle /nunet/job streams each dialling identity keeps open
CHAT_SOURCES = ("127.0.0.5", "127.0.0.6", "127.0.0.7")
CHAT_PER_SOURCE = 30
FAKE_ADVERTS_PER_ROUND = 200
NEWCOMER_GOAL_S = 10.0


DHT_SOURCES = ("127.0.0.8", "127.0.0.9")
DHT_IDENTITIES = 25  # per source address
DHT_PUTS = 120  # valid advert records each identity PUTs (6,000 in all), and provider records


class DhtFlood(Flooder):
    """One ``dht_flooder`` process of the soak's size."""

    def __init__(self, target: str, source: str, trap: str) -> None:
        self.sent = self.acked = self.providers = 0
        self.held: tuple[int, int] | None = None
        args = [target, str(DHT_IDENTITIES), source, str(DHT_PUTS), CHANNEL, trap]
        self._start("tests.adversarial.dht_flooder", args)


class ManyIdentities:
    """Identities from several addresses, each attack in its own process or thread: dialers
    holding connections and idle job streams, a chat swarm, and Sybil adverts relayed through
    the hostile peer every few seconds (each naming the trap's address)."""

    def __init__(
        self, victim_addr: str, victim: str, peer: HostilePeer, identities: int, seconds: float
    ) -> None:
        per_source = identities // len(DIALER_SOURCES)
        self.dialers = [
            Dialer(victim_addr, per_source, source, protocol=JOB_PROTOCOL, streams=DIALER_STREAMS)
            for source in DIALER_SOURCES
        ]
        self.chat = Swarm(
            victim_addr,
            victim,
            sources=CHAT_SOURCES,
            per_source=CHAT_PER_SOURCE,
            streams_each=4,
            attack_s=seconds,
        )
        self.chat.start()
        self.trap = Trap()
        trap = f"{self.trap.sock.getsockname()[0]}:{self.trap.port}"
        self.dht = [DhtFlood(victim_addr, source, trap) for source in DHT_SOURCES]
        self.relayed = 0
        self._peer = peer
        self._stop = threading.Event()
        self._adverts = threading.Thread(target=self._advertise, daemon=True)
        self._adverts.start()

    def _advertise(self) -> None:
        while not self._stop.is_set():
            messages = _fake_messages(
                self._peer, self.trap.port, FAKE_ADVERTS_PER_ROUND, channel=CHANNEL
            )
            with contextlib.suppress(Exception):
                self._peer.call(_relay, self._peer, messages)
                self.relayed += len(messages)
            self._stop.wait(5.0)

    def close(self) -> None:
        if self._stop.is_set():
            return  # closed already
        self._stop.set()
        self._adverts.join(30)
        for dialer in [*self.dialers, *self.dht]:
            dialer.close()
        self.chat.done.wait(30)
        self.trap.close()

    def report(self) -> str:
        held = sum(d.held for d in self.dialers)
        tried = sum(d.tried for d in self.dialers)
        streams = sum(d.streams for d in self.dialers)
        chat = self.chat.report
        return (
            f"many identities: {tried} dialled from {len(DIALER_SOURCES)} addresses, {held} "
            f"connections and {streams} idle job streams held at the end; chat swarm of "
            f"{len(CHAT_SOURCES) * CHAT_PER_SOURCE}: {chat['connected']} connected, "
            f"{chat['streams_taken']} streams served ({chat['held_max']} at most at once), "
            f"{chat['streams_refused']} refused, {chat['acked']} messages acked; "
            f"{self.relayed} Sybil adverts relayed; DHT flood from "
            f"{len(DHT_SOURCES) * DHT_IDENTITIES} identities: "
            f"{sum(f.sent for f in self.dht)} records sent, {sum(f.acked for f in self.dht)} "
            f"acknowledged; {self.trap.accepts} connects to the address the adverts and "
            f"provider records named"
        )


def newcomer_lists(root: Path, boot: str, victim: str, timeout: float = 30.0) -> float | None:
    """Seconds from a fresh node's start (bootstrapped from the victim) until it lists the
    victim; None if it never did within ``timeout``."""
    from nunet_tui.cli.demo_sandbox import daemon_argv, daemon_env, node_client, node_config

    home = Paths.for_home(root / "newcomer")
    home.ensure()
    home.config_file.write_text(node_config(4, 3000, 16_000, boot, (1.0, 2.0, 4.0)))
    began = time.monotonic()
    proc = subprocess.Popen(
        daemon_argv(home),
        stdout=subprocess.DEVNULL,
        stderr=(root / "newcomer.log").open("ab"),
        env=daemon_env(),
        # An honest node: back to the normal priority the attackers here do not have.
        preexec_fn=lambda: os.setpriority(os.PRIO_PROCESS, 0, 0),
    )
    client = None
    try:
        client = node_client(home, proc)
        while time.monotonic() - began < timeout:
            with contextlib.suppress(EngineError):
                if any(p.peer_id == victim for p in client.call_blocking(api.ListPeers()).peers):
                    return time.monotonic() - began
            time.sleep(0.2)
        return None
    finally:
        if client is not None:
            client.close()
        proc.terminate()
        with contextlib.suppress(Exception):
            proc.wait(10)


def main() -> None:
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 60.0
    identities = int(sys.argv[2]) if len(sys.argv) > 2 else 300
    logging.basicConfig(level=logging.CRITICAL)  # the hostile peer's own libp2p noise
    logging.getLogger("libp2p").setLevel(logging.CRITICAL)
    root = Path(tempfile.mkdtemp(prefix="nunet-bench-soak-"))
    (root / "www").mkdir()
    (root / "www" / "honest.py").write_text(HONEST_JOB)
    url = serve(root / "www")
    peer: HostilePeer | None = None
    many: ManyIdentities | None = None
    pair = DaemonPair(root, channel=CHANNEL)
    client, pclient, boot, provider = pair.consumer, pair.provider, pair.boot, pair.provider_home
    try:
        victim = pclient.call_blocking(api.GetPeerSelf()).peer_id
        peer = HostilePeer(bootstrap=[boot], channel=CHANNEL).start()
        peer.wait_connected(victim)
        time.sleep(2)  # let both daemons settle before the baseline
        rss_before, db_before = rss_mb(pair.procs[0].pid), db_mb(provider)

        stop = threading.Event()
        attack_rounds = {a.__name__: 0 for a in ATTACKS}

        def attack() -> None:
            assert peer is not None
            while not stop.is_set():
                for fn in ATTACKS:
                    if stop.is_set():
                        return
                    with contextlib.suppress(Exception):
                        fn(peer, victim)
                    attack_rounds[fn.__name__] += 1

        attacker = threading.Thread(target=attack, daemon=True)
        attacker.start()
        if identities:
            # One machine holds the attackers and their victims; on a network the attackers'
            # CPU is not the victim's. This process (the hostile peer, the chat swarm) and
            # the dialer processes it starts run at the lowest priority, so what the victim
            # pays is its own work on what arrives, not a share of two cores lost to them.
            os.nice(19)
            many = ManyIdentities(boot, victim, peer, identities, seconds)
        newcomer: dict[str, float | None] = {}
        newcomer_at = time.monotonic() + seconds / 2

        def join_newcomer() -> None:
            newcomer["seconds"] = newcomer_lists(root, boot, victim)

        joiner = threading.Thread(target=join_newcomer, daemon=True)
        sent = delivered = 0
        chat_failures: collections.Counter[str] = collections.Counter()
        jobs: dict[str, str] = {}
        current: str | None = None
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if joiner.ident is None and time.monotonic() >= newcomer_at:
                joiner.start()
            sent += 1
            try:
                client.call_blocking(
                    api.ChatSend(peer_id=victim, text=f"honest {sent}", queue=False), timeout=10
                )
                delivered += 1
            except EngineError as exc:
                chat_failures[exc.message[:80]] += 1
            if current is None or jobs.get(current) in api.TERMINAL_STATES:
                with contextlib.suppress(EngineError):
                    job = client.call_blocking(
                        api.SubmitJob(
                            spec=msgspec.structs.replace(SPEC, script_url=f"{url}/honest.py"),
                            peer_id=victim,
                        ),
                        timeout=30,
                    )
                    current = job.job_id
                    jobs[current] = job.state
            for job_id in list(jobs):
                if jobs[job_id] not in api.TERMINAL_STATES:
                    jobs[job_id] = client.call_blocking(api.GetJob(job_id=job_id)).state
            time.sleep(0.5)
        stop.set()
        attacker.join(30)
        if joiner.ident is not None:
            joiner.join(60)
        if many is not None:
            many.close()
        # The last job may still be running when the clock ran out: give it its time.
        finish_by = time.monotonic() + 60
        while any(s not in api.TERMINAL_STATES for s in jobs.values()):
            if time.monotonic() > finish_by:
                break
            for job_id in list(jobs):
                jobs[job_id] = client.call_blocking(api.GetJob(job_id=job_id)).state
            time.sleep(0.5)
        rss_after, db_after = rss_mb(pair.procs[0].pid), db_mb(provider)
        alive = pair.procs[0].poll() is None
        completed = sum(1 for s in jobs.values() if s == "completed")
        rate = 100.0 * delivered / max(sent, 1)
        print(f"hostile soak: {seconds:.0f} s; attack rounds: {attack_rounds}")
        if many is not None:
            print(many.report())
        joined = newcomer.get("seconds")
        print(
            "newcomer lists the victim: "
            + (f"after {joined:.1f} s" if joined is not None else "never (30 s)")
            + f" (goal <= {NEWCOMER_GOAL_S:.0f} s: "
            + ("met" if joined is not None and joined <= NEWCOMER_GOAL_S else "MISSED")
            + ")"
        )
        print(
            f"honest chat delivered: {delivered}/{sent} = {rate:.1f} % "
            f"(goal >= 99 %: {'met' if rate >= 99 else 'MISSED'})"
            + (f"; failures: {dict(chat_failures)}" if chat_failures else "")
        )
        print(
            f"honest jobs: {completed}/{len(jobs)} completed "
            f"({'met' if jobs and completed == len(jobs) else 'MISSED'}); states {jobs}"
        )
        print(
            f"provider RSS: {rss_before:.0f} -> {rss_after:.0f} MB "
            f"(+{rss_after - rss_before:.1f} MB; goal < 50 MB: "
            f"{'met' if rss_after - rss_before < 50 else 'MISSED'})"
        )
        print(
            f"provider database: {db_before:.2f} -> {db_after:.2f} MB "
            f"(+{db_after - db_before:.2f} MB; goal < 10 MB: "
            f"{'met' if db_after - db_before < 10 else 'MISSED'})"
        )
        print(f"provider still running: {alive}; logs in {root}")
    finally:
        if many is not None:
            many.close()
        if peer is not None:
            peer.stop()
        pair.close()


if __name__ == "__main__":
    main()
