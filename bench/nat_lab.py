"""Behind NAT, in the NAT lab (tests/netlab.py; root, `ip`, `nft`): reachability, hole punching
and job latency through a relay against a direct connection (issue 24 §4).

1. Direct upgrade per NAT pair: plain py-libp2p hosts (tests/network/dcutr_probe.py) with our
   hole punching (engine/network/dcutr.py; --library: py-libp2p's dcutr.py as shipped): a
   fresh relay, listener and dialer per attempt, K attempts per pair; success, and the time
   from the dialer's first contact (its relayed dial) to a direct connection.
2. Reachability: real daemons (a relay on the public segment, a provider on the public segment
   and one behind each NAT, consumers behind the port-restricted and symmetric NATs); each
   consumer chats with each provider: delivered or not, and the path a few seconds later.
3. Submit -> first log line at the consumer (process executor, script on the public
   segment): a provider reached through the relay only (symmetric) against one upgraded to a
   direct connection (full cone); consumer behind the port-restricted NAT.

Usage: python bench/nat_lab.py [K] [--library] [--skip-daemons]
"""

from __future__ import annotations

import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engine import api
from engine.domain.spec import JobSpec
from engine.errors import EngineError
from tests import netlab
from tests.conftest import TEST_ADDRESS
from tests.daemon_harness import Daemon, spawner, wait_for
from tests.netlab import Host, Lab, NatKind
from tests.network.probes import next_event, start

KINDS = (NatKind.FULL_CONE, NatKind.PORT_RESTRICTED, NatKind.SYMMETRIC)
RELAY_PORT = 4001
ANYWHERE = {"NUNET_NETWORK_LISTEN": "/ip4/0.0.0.0/tcp/9001"}
PROCESS_JOBS = '\n[jobs]\nexecutors = ["process"]\n'
HELLO = 'print("hello from the provider", flush=True)\n'


def _kind(label: str) -> str:
    return {"full-cone": "cone", "port-restricted": "restricted", "symmetric": "symmetric"}.get(
        label, label
    )


# --- 1. hole punching per pair, plain hosts ---------------------------------------------------


_attempts = iter(range(1_000_000))


def upgrade_attempt(lab: Lab, listener: Host, dialer: Host, impl: str) -> float | None:
    """Seconds from the dialer's relayed dial to a direct connection; None if none came.

    Each attempt's hosts listen on ports of their own: new nodes, not a node meeting the
    same peer again within TIME_WAIT (the same 4-tuple refuses a new connection for 60 s)
    or the full-cone router's mapping of an earlier one."""
    port = 20000 + 2 * next(_attempts)
    env = {"PROBE_IMPL": impl, "PROBE_UPGRADE_S": "10"}
    procs: list[subprocess.Popen[str]] = []
    try:
        relay = start(lab, lab.relay, "tests.network.relay_probe", "relay", lab.relay.addr)
        procs.append(relay)
        ready = next_event(relay)
        lis = start(
            lab, listener, "tests.network.dcutr_probe", "listener", ready["addr"],
            PROBE_PORT=str(port), **env,
        )  # fmt: skip
        procs.append(lis)
        reserved = next_event(lis)
        dial = start(
            lab, dialer, "tests.network.dcutr_probe", "dialer", reserved["circuit"],
            PROBE_PORT=str(port + 1), **env,
        )  # fmt: skip
        procs.append(dial)
        next_event(dial)  # dialled
        upgrade = next_event(dial)
        echo = next_event(dial)
        if not echo.get("ok"):
            return None
        return float(upgrade["seconds"]) if upgrade.get("direct") else None
    except AssertionError:
        return None
    finally:
        for proc in procs:
            proc.kill()
            proc.wait(timeout=10)


def pairs_table(lab: Lab, k: int, impl: str) -> None:
    listeners: list[tuple[str, Host]] = [("public", lab.public[1])]
    listeners += [(str(kind), lab.homes[kind].hosts[0]) for kind in KINDS]
    print(f"\n1. Direct upgrade per NAT pair ({impl}; {k} attempts each; plain hosts)")
    print(f"{'provider (listener)':<22}{'consumer (dialer)':<20}{'direct':>8}{'to direct':>12}")
    for label, listener in listeners:
        for kind in KINDS:
            dialer = lab.homes[kind].hosts[1]
            times = [upgrade_attempt(lab, listener, dialer, impl) for _ in range(k)]
            ok = [t for t in times if t is not None]
            took = f"{statistics.median(ok):.2f} s" if ok else "-"
            note = " (same router: hairpin)" if label == str(kind) else ""
            print(f"{_kind(label):<22}{_kind(str(kind)):<20}{len(ok):>5}/{k:<2}{took:>12}{note}")


# --- 2 and 3. real daemons ----------------------------------------------------------------------


def listed(daemon: Daemon, peer_id: str) -> dict[str, Any] | None:
    for peer in daemon.cli("peer", "list")["peers"]:
        if peer["peer_id"] == peer_id:
            return dict(peer)
    return None


def wait_listed(consumer: Daemon, peer_id: str) -> None:
    wait_for(lambda: listed(consumer, peer_id) is not None, "a provider was never listed", 120)


def serve_script(lab: Lab, root: Path) -> tuple[str, subprocess.Popen[bytes]]:
    (root / "www").mkdir()
    (root / "www" / "hello.py").write_text(HELLO)
    server = lab.public[1]
    argv = [sys.executable, "-m", "http.server", "8080", "--bind", server.addr]
    proc = lab.popen(
        server,
        [*argv, "-d", str(root / "www")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )

    def up() -> bool:
        with lab.socket(lab.public[2], socket.SOCK_STREAM) as probe:
            probe.settimeout(1)
            return probe.connect_ex((server.addr, 8080)) == 0

    wait_for(up, "the lab's HTTP server never listened")
    return f"http://{server.addr}:8080", proc


def first_log_line(consumer: Daemon, provider_id: str, url: str) -> float:
    """Seconds from SubmitJob to the consumer's first JobLogEvent of that job."""
    assert consumer.client is not None
    seen: dict[str, float] = {}

    def on_event(event: api.Event) -> None:
        if isinstance(event, api.JobLogEvent):
            seen.setdefault(event.job_id, time.perf_counter())

    unsubscribe = consumer.client.subscribe(on_event)
    try:
        spec = JobSpec(script_url=f"{url}/hello.py", framework="scikit-learn", expected_minutes=1)
        for _ in range(100):
            began = time.perf_counter()
            try:
                job = consumer.call(api.SubmitJob(spec=spec, peer_id=provider_id), timeout=60)
                break
            except EngineError as exc:
                if "busy" not in str(exc):
                    raise
                time.sleep(0.2)
        else:
            raise SystemExit("the provider stayed busy")
        wait_for(lambda: job.job_id in seen, f"no log line of {job.job_id}", 120)
        wait_for(
            lambda: consumer.call(api.GetJob(job_id=job.job_id)).state in api.TERMINAL_STATES,
            f"{job.job_id} never ended",
            120,
        )
        return seen[job.job_id] - began
    finally:
        unsubscribe()


def daemons_tables(lab: Lab, k: int) -> None:
    root = Path(tempfile.mkdtemp(prefix="nunet-bench-nat-"))
    started: list[Daemon] = []
    spawn = spawner(root, started)
    url, server = serve_script(lab, root)
    try:
        relay = spawn(
            "relay",
            80,
            env={
                "NUNET_NETWORK_LISTEN": f"/ip4/{lab.relay.addr}/tcp/{RELAY_PORT}",
                "NUNET_NETWORK_RELAY_SERVICE": "true",
            },
            netns=lab.relay.ns,
        )
        boot = f"/ip4/{lab.relay.addr}/tcp/{RELAY_PORT}/p2p/{relay.peer_id}"
        provider_env = {**ANYWHERE, "NUNET_JOBS_FETCH_ALLOW_NETWORKS": "198.18.0.0/15"}
        places: list[tuple[str, Host]] = [("public", lab.public[1])]
        places += [(str(kind), lab.homes[kind].hosts[0]) for kind in KINDS]
        providers: dict[str, Daemon] = {}
        for n, (label, host) in enumerate(places):
            providers[label] = spawn(
                f"provider-{label}",
                81 + n,
                bootstrap=boot,
                extra_toml=PROCESS_JOBS,
                env=provider_env,
                netns=host.ns,
            )
        consumers = {
            str(kind): spawn(
                f"consumer-{kind}",
                90 + n,
                bootstrap=boot,
                env=ANYWHERE,
                netns=lab.homes[kind].hosts[1].ns,
            )
            for n, kind in enumerate((NatKind.PORT_RESTRICTED, NatKind.SYMMETRIC))
        }
        for provider in providers.values():
            provider.cli("onboard", "-m", "8000", "-c", "4000", "-a", TEST_ADDRESS)
        for consumer in consumers.values():
            for provider in providers.values():
                wait_listed(consumer, provider.peer_id)
        print("\n2. Reachability: each consumer chats with each provider (real daemons)")
        print(f"{'consumer':<14}{'provider':<14}{'delivered':>10}{'path (after 10 s)':>20}")
        reached = total = 0
        for c_label, consumer in consumers.items():
            for p_label, provider in providers.items():
                total += 1
                try:
                    ok = consumer.cli("chat", "send", provider.peer_id, "hi")["status"]
                except AssertionError:
                    ok = "failed"
                reached += ok == "delivered"
                time.sleep(10)  # the hole punch, if any, has ended by then
                peer = listed(consumer, provider.peer_id) or {}
                path = "relayed" if peer.get("relayed") else "direct"
                print(f"{_kind(c_label):<14}{_kind(p_label):<14}{ok:>10}{path:>20}")
        print(f"reachable: {reached}/{total} ({100 * reached / total:.0f} %; goal 100 %)")

        consumer = consumers[str(NatKind.PORT_RESTRICTED)]
        print("\n3. Submit -> first log line at the consumer (process executor; consumer behind")
        print("   the port-restricted NAT)")
        for label, path in ((str(NatKind.SYMMETRIC), "relay"), (str(NatKind.FULL_CONE), "direct")):
            provider = providers[label]
            samples = [first_log_line(consumer, provider.peer_id, url) for _ in range(k)]
            peer = listed(consumer, provider.peer_id) or {}
            now = "relayed" if peer.get("relayed") else "direct"
            print(
                f"   provider behind {_kind(label)} ({path}; path now {now}): median "
                f"{statistics.median(samples):.3f} s, min {min(samples):.3f}, "
                f"max {max(samples):.3f} (n={k})"
            )
    finally:
        for daemon in started:
            daemon.stop(kill=True)
        server.kill()
        server.wait(timeout=10)


def main() -> None:
    reason = netlab.unavailable_reason()
    if reason:
        raise SystemExit(f"the NAT lab cannot run here: {reason}")
    numbers = [a for a in sys.argv[1:] if a.isdigit()]
    k = int(numbers[0]) if numbers else 3
    impl = "library" if "--library" in sys.argv else "ours"
    cpus = os.cpu_count()
    print(f"NAT lab bench, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {cpus} CPUs")
    with netlab.lab() as lab:
        pairs_table(lab, k, impl)
        if "--skip-daemons" not in sys.argv:
            daemons_tables(lab, k)


if __name__ == "__main__":
    main()
