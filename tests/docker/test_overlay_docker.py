"""A job's overlay between two real daemons and two real containers (issue 25 §2): each
container runs with ``network_mode: none`` and no capabilities, gets ``nunet0`` in the job's
/24, and reaches the other by its 10.x address over TCP, carried by the daemons over libp2p;
the bytes are metered both ways. A third container, in another job's overlay on the same
node, reaches neither replica: its packets are dropped at its own node and counted."""

from __future__ import annotations

import json
from collections.abc import Callable

from engine import api
from tests.daemon_harness import Daemon, daemons, wait_for
from tests.docker_fixture import docker_host, sklearn_image
from tests.overlay_helpers import (
    READY,
    Replica,
    containers,
    docker,
    in_container,
    join,
    provider_pair,
    stats_of,
)

__all__ = ["daemons", "docker_host", "sklearn_image"]


ECHO_SERVER = """
import socket
srv = socket.socket()
srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("0.0.0.0", 5000))
srv.listen()
open("/tmp/ready", "w").close()
while True:
    conn, peer = srv.accept()
    with conn:
        data = b""
        while len(data) < 200000:
            chunk = conn.recv(65536)
            if not chunk:
                break
            data += chunk
        conn.sendall(peer[0].encode() + b" " + str(len(data)).encode() + b" " + data[-16:])
"""

ECHO_CLIENT = """
import json, os, socket
blob = os.urandom(200000)
with socket.create_connection(("{address}", 5000), timeout=20) as s:
    s.sendall(blob)
    answer = b""
    while chunk := s.recv(65536):
        answer += chunk
peer, size, tail = answer.split(b" ", 2)
print(json.dumps({{"peer": peer.decode(), "size": int(size), "tail_ok": tail == blob[-16:]}}))
"""

REFUSED = """
import json, socket
out = {{}}
for address in {addresses!r}:
    try:
        socket.create_connection((address, 5000), timeout=3).close()
        out[address] = "connected"
    except OSError as exc:
        out[address] = type(exc).__name__
print(json.dumps(out))
"""


def test_two_containers_reach_each_other_and_an_outsider_does_not(
    daemons: Callable[..., Daemon], docker_host: str, sklearn_image: str
) -> None:
    first, second = provider_pair(daemons, docker_host)
    with containers(docker_host) as start:
        server = Replica(first, start(sklearn_image, ["python3", "-c", ECHO_SERVER]), "10.77.1.1")
        client = Replica(second, start(sklearn_image), "10.77.1.2")
        join([server, client], "ovl-job-1")
        wait_for(
            lambda: in_container(docker_host, server.container, READY).strip(),
            "the echo server never started",
        )

        # TCP from the second provider's container to the first's, 200 kB each way's worth.
        answer = json.loads(
            in_container(docker_host, client.container, ECHO_CLIENT.format(address="10.77.1.1"))
        )
        assert answer == {"peer": "10.77.1.2", "size": 200000, "tail_ok": True}
        for daemon in (first, second):
            figures = stats_of(daemon, "ovl-job-1")
            assert figures.bytes_out > 0 and figures.bytes_in > 0, figures
            assert figures.strangers_refused == 0
        # Metered on both ends: what one sent is what the other received (TCP over a path
        # that drops nothing here).
        sent, got = stats_of(second, "ovl-job-1"), stats_of(first, "ovl-job-1")
        assert sent.bytes_out >= 200000 and got.bytes_in == sent.bytes_out
        # The same figures on the command line.
        [listed] = first.cli("overlay", "status", "ovl-job-1")
        assert listed["bytes_in"] == got.bytes_in and listed["address"] == "10.77.1.1"

        # An outsider: a container of another job on the first node, in a /24 of its own
        # subnet's numbers but not a member of job 1; its overlay names the second node,
        # which never joined it.
        outsider = start(sklearn_image)
        first.call(
            api.OverlayJoin(
                job_id="ovl-other",
                container=outsider,
                subnet="10.77.1.0/24",
                address="10.77.1.3",
                members=(
                    api.OverlayMember(peer_id=first.peer_id, address="10.77.1.3"),
                    api.OverlayMember(peer_id=second.peer_id, address="10.77.1.4"),
                ),
            )
        )
        refused = json.loads(
            in_container(
                docker_host,
                outsider,
                REFUSED.format(addresses=["10.77.1.1", "10.77.1.2", "10.77.1.4"]),
            )
        )
        assert "connected" not in refused.values(), refused
        other = stats_of(first, "ovl-other")
        assert other.bytes_out == 0 or other.peers_connected == 0
        assert other.dropped_out > 0  # for 10.77.1.1 and .2: not members of its job
        # Job 1's replicas heard nothing of it.
        assert stats_of(first, "ovl-job-1").dropped_in == 0
        assert stats_of(second, "ovl-job-1").dropped_in == 0

        # Leaving removes the device: the replica cannot reach the other any more.
        second.call(api.OverlayLeave(job_id="ovl-job-1"))
        gone = json.loads(
            in_container(docker_host, client.container, REFUSED.format(addresses=["10.77.1.1"]))
        )
        assert gone["10.77.1.1"] != "connected"
        assert not stats_of(second, "ovl-job-1").carrying

        # A container that exits ends its overlay on its node (nothing else would: its
        # device no longer reads once its namespace is gone).
        assert stats_of(first, "ovl-job-1").carrying
        docker(docker_host, "rm", "-f", server.container)
        wait_for(
            lambda: not stats_of(first, "ovl-job-1").carrying,
            "the overlay outlived its container",
        )
