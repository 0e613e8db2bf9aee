"""Median chat round trip on loopback: send -> peer's hook ran -> ack back, across processes.

Usage: python bench/network_chat_rtt.py [MESSAGES]
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.daemons.test_network_support import Node


def main() -> None:
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    a = Node("--heartbeat", "5").ready()
    b = Node("--bootstrap", a.addrs[0], "--heartbeat", "5").ready()
    try:
        b.wait_peers({a.peer_id}, timeout=30)
        first = b.command("send", peer=a.peer_id, text="warm-up")["rtt_ms"]
        rtts = []
        for i in range(count):
            reply = b.command("send", peer=a.peer_id, text=f"m{i}")
            if reply["event"] != "sent":
                raise SystemExit(f"send failed: {reply}")
            rtts.append(reply["rtt_ms"])
            time.sleep(0.03)  # stay under the receiver's flood limit (50 msgs/s per peer)
        pings = [b.command("ping", peer=a.peer_id)["rtt_ms"] for _ in range(50)]
    finally:
        a.stop()
        b.stop()
    rtts.sort()
    print(f"first message (opens the stream): {first:.2f} ms")
    print(
        f"chat rtt over {count}: median {statistics.median(rtts):.2f} ms, "
        f"p90 {rtts[int(0.9 * len(rtts))]:.2f} ms, max {rtts[-1]:.2f} ms (goal < 10 ms median)"
    )
    print(f"libp2p ping rtt: median {statistics.median(pings):.2f} ms")


if __name__ == "__main__":
    main()
