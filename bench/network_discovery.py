"""Time for a newly started node to list all N providers after connecting to a bootstrap peer.

Real processes on 127.0.0.1 (python -m engine.network.standalone). Prints the figures.
Usage: python bench/network_discovery.py [N] [ROUNDS] [HEARTBEAT_S]

The channel runs at the default 60 s heartbeat and has settled (every node lists every other)
before a newcomer joins, as a real one would find it: with 1 s heartbeats, ten interpreters
starting at once kept the two cores of the development machine busy, and the bench timed the
machine, not discovery. The cluster's CPU over the rounds is printed beside the figure.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.daemons.test_network_support import Node

SETTLE_S = 3.0
TICKS = os.sysconf("SC_CLK_TCK")
# Ten interpreters importing py-libp2p at once on 2 busy cores take longer than the tests'
# 20 s to listen: the bench waits for them, and times only the newcomer.
START_TIMEOUT_S = 180.0


def cpu_seconds(nodes: list[Node]) -> float:
    total = 0.0
    for node in nodes:
        fields = Path(f"/proc/{node.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime
    return total


def main() -> None:
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 10
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    heartbeat = sys.argv[3] if len(sys.argv) > 3 else "60"
    boot = Node("--heartbeat", heartbeat).ready(START_TIMEOUT_S)
    providers = [
        Node("--bootstrap", boot.addrs[0], "--heartbeat", heartbeat) for _ in range(count - 1)
    ]
    for provider in providers:
        provider.ready(START_TIMEOUT_S)
    everyone = {boot.peer_id} | {p.peer_id for p in providers}
    for node in [boot, *providers]:
        node.wait_peers(everyone - {node.peer_id}, timeout=START_TIMEOUT_S)
    figures = []
    cpu_before, clock_before = cpu_seconds([boot, *providers]), time.monotonic()
    try:
        for _ in range(rounds):
            # A newcomer joins a settled channel, not one still busy with the last one's
            # departure or its own start-up (10 processes share 2 cores here).
            time.sleep(SETTLE_S)
            newcomer = Node("--bootstrap", boot.addrs[0], "--heartbeat", heartbeat, "--consumer")
            newcomer.ready(START_TIMEOUT_S)
            listening = newcomer.wait_for(lambda e: e["event"] == "listening")["t"]
            arrivals: dict[str, float] = {}

            def new_listing(e: dict[str, object], seen: dict[str, float] = arrivals) -> bool:
                return e["event"] == "peer" and bool(e["advert"]) and e["peer_id"] not in seen

            while set(arrivals) != everyone:
                event = newcomer.wait_for(new_listing, timeout=60)
                arrivals[event["peer_id"]] = event["t"] - listening
            figures.append(max(arrivals.values()))
            print("arrivals (s):", " ".join(f"{t:.2f}" for t in sorted(arrivals.values())))
            newcomer.stop()
        cluster_cpu = (cpu_seconds([boot, *providers]) - cpu_before) / (
            time.monotonic() - clock_before
        )
    finally:
        for node in [boot, *providers]:
            node.stop()
    print(f"providers: {count}; rounds: {rounds}; heartbeat {heartbeat} s")
    print(f"the {count} providers' CPU over the rounds: {100 * cluster_cpu:.0f}% of one core")
    print("time from listening to listing all (s): " + ", ".join(f"{f:.3f}" for f in figures))
    print(f"median {statistics.median(figures):.3f} s (goal < 0.5 s)")


if __name__ == "__main__":
    started = time.time()
    main()
    print(f"bench wall time {time.time() - started:.1f} s")
