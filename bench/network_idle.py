"""CPU of an idle node with 10 peers at the default 60 s heartbeat (goal < 2% of one core).

Real processes on 127.0.0.1 (python -m engine.network.standalone): a bootstrap node and 10
more, all providers on one channel, so every node has 10 peers it gossips, pings and keeps in
its DHT routing table. After a warm-up (everyone listed everyone), the CPU time (user +
system, from /proc) of the bootstrap node and of one provider is sampled over a window.
Usage: python bench/network_idle.py [WINDOW_S] [PEERS] [HEARTBEAT_S]
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.daemons.test_network_support import Node, start_nodes

TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime


def main() -> None:
    window = float(sys.argv[1]) if len(sys.argv) > 1 else 60.0
    peers = int(sys.argv[2]) if len(sys.argv) > 2 else 10
    heartbeat = sys.argv[3] if len(sys.argv) > 3 else "60"
    boot = Node("--heartbeat", heartbeat).ready()
    others = start_nodes(peers, boot, "--heartbeat", heartbeat)
    nodes = [boot, *others]
    try:
        everyone = {n.peer_id for n in nodes}
        for node in nodes:
            node.wait_peers(everyone - {node.peer_id}, timeout=60)
        time.sleep(10)  # settle: the joins' republishing, DHT puts and lookups are done
        watched = {"bootstrap": boot, "provider": others[-1]}
        before = {name: cpu_seconds(n.proc.pid) for name, n in watched.items()}
        started = time.monotonic()
        time.sleep(window)
        elapsed = time.monotonic() - started
        for name, node in watched.items():
            assert len(node.peer_ids()) == peers, "a peer was lost during the window"
            used = cpu_seconds(node.proc.pid) - before[name]
            percent = 100.0 * used / elapsed
            verdict = "met" if percent < 2.0 else "MISSED"
            print(
                f"idle CPU of the {name} node with {peers} peers (heartbeat {heartbeat} s): "
                f"{percent:.2f}% of a core over {elapsed:.0f} s; goal < 2%: {verdict}"
            )
    finally:
        for node in nodes:
            node.stop()


if __name__ == "__main__":
    main()
