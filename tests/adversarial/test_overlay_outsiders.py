"""A job's overlay refuses whoever is not in it, and whatever its members forge (issue 25 §2;
docs/security.md): against a real daemon carrying a real container's overlay,
- a stranger's stream naming the job (or a job that is not there) is reset before anything is
  accepted, and counted;
- a member (here a hostile one) gets its own packets for the replica through, and nothing
  else: a forged source (another member's address), a destination outside the job's /24,
  IPv6, a header whose length lies, and a frame longer than the MTU (which also ends its
  stream) are dropped and counted, and the container receives only the honest datagram."""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
from typing import Any

from engine import api
from engine.network.overlay import ACCEPTED, OVERLAY_PROTOCOL
from tests.adversarial.hostile import HostilePeer
from tests.daemon_harness import Daemon, wait_for
from tests.docker_fixture import docker_host, sklearn_image
from tests.overlay_helpers import (
    DOCKER_JOBS,
    READY,
    containers,
    in_container,
    stats_of,
    udp_packet,
)

__all__ = ["docker_host", "sklearn_image"]


JOB = "ovl-victim"
REPLICA = "10.77.1.1"
HOSTILE = "10.77.1.9"
ABSENT = "10.77.1.2"  # a member whose provider is not here: its address is forged below

LISTENER = """
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("0.0.0.0", 7000))
open("/tmp/ready", "w").close()
while True:
    data, peer = s.recvfrom(2048)
    with open("/tmp/got", "a") as out:
        out.write(peer[0] + " " + data.decode(errors="replace") + "\\n")
"""
READ_GOT = """
import json, os
print(json.dumps(open("/tmp/got").read().splitlines() if os.path.exists("/tmp/got") else []))
"""


async def _drain(stream: Any) -> None:
    await stream.read(256)
    await stream.write(ACCEPTED)
    while await stream.read(65536):
        pass


def frame(packet: bytes) -> bytes:
    return struct.pack("!H", len(packet)) + packet


def hello(job_id: str) -> bytes:
    return bytes([len(job_id)]) + job_id.encode()


def test_strangers_and_forged_packets_get_nothing(
    daemons: Callable[..., Daemon],
    hostile: Callable[..., HostilePeer],
    docker_host: str,
    sklearn_image: str,
) -> None:
    victim = daemons("victim", 70, extra_toml=DOCKER_JOBS, env={"DOCKER_HOST": docker_host})
    member = hostile(seed=b"\x71" * 32, bootstrap=[victim.addrs()[0]])
    stranger = hostile(seed=b"\x72" * 32, bootstrap=[victim.addrs()[0]])
    member.wait_connected(victim.peer_id)
    # The hostile member speaks the overlay as a member would (the victim's own stream to it
    # is taken and drained): a peer that cannot negotiate a protocol has its connection closed.
    member.serve(OVERLAY_PROTOCOL, _drain)
    stranger.wait_connected(victim.peer_id)
    with containers(docker_host) as start:
        container = start(sklearn_image, ["python3", "-c", LISTENER])
        wait_for(
            lambda: in_container(docker_host, container, READY).strip(),
            "the container's listener never started",
        )
        victim.call(
            api.OverlayJoin(
                job_id=JOB,
                container=container,
                subnet="10.77.1.0/24",
                address=REPLICA,
                members=(
                    api.OverlayMember(peer_id=victim.peer_id, address=REPLICA),
                    api.OverlayMember(peer_id=member.peer_id, address=HOSTILE),
                    api.OverlayMember(peer_id="12D3KooWAbsentPeer", address=ABSENT),
                ),
            )
        )

        # Strangers: for the job, and for a job that is not there. Reset, nothing accepted.
        for job_id in (JOB, "no-such-job"):
            stream = stranger.open(victim.peer_id, OVERLAY_PROTOCOL)
            stream.write(hello(job_id))
            assert stream.read(1) == b""
            stream.reset()
        assert stats_of(victim, JOB).strangers_refused == 1

        # The hostile member: accepted, then its packets judged one by one.
        stream = member.open(victim.peer_id, OVERLAY_PROTOCOL)
        stream.write(hello(JOB))
        assert stream.read(1) == ACCEPTED
        ipv6 = bytes([0x60]) + bytes(39)
        lying = bytearray(udp_packet(HOSTILE, REPLICA, b"lying-length"))
        lying[2:4] = struct.pack("!H", 999)
        stream.write(
            frame(udp_packet(ABSENT, REPLICA, b"forged-source"))
            + frame(udp_packet(HOSTILE, "10.77.2.1", b"other-subnet"))
            + frame(udp_packet(HOSTILE, ABSENT, b"not-for-this-replica"))
            + frame(ipv6)
            + frame(bytes(lying))
            + frame(udp_packet(HOSTILE, REPLICA, b"honest"))
        )
        wait_for(lambda: stats_of(victim, JOB).packets_in == 1, "the honest datagram never came")
        got = wait_for(
            lambda: json.loads(in_container(docker_host, container, READ_GOT)),
            "the container never got the honest datagram",
        )
        assert got == [f"{HOSTILE} honest"]
        figures = stats_of(victim, JOB)
        assert figures.dropped_in == 5, figures

        # A frame over the MTU ends the stream (and is counted).
        stream.write(struct.pack("!H", 60000) + bytes(100))
        assert stream.read(1) == b""
        wait_for(lambda: stats_of(victim, JOB).dropped_in == 6, "the long frame was not counted")
        assert json.loads(in_container(docker_host, container, READ_GOT)) == got
