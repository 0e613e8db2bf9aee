"""Two real daemons, each with a container of its own (``network_mode: none``, every
capability dropped, as jobs run), joined by a job's overlay (issue 25 §2): shared by the
overlay's Docker, adversarial and distributed-training tests and bench/cluster_allreduce.py."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine import api
from tests.daemon_harness import Daemon, wait_for

DOCKER_JOBS = '[jobs]\nexecutors = ["docker"]\ncheckpoint_interval_s = 0\n'
SUBNET = "10.77.1.0/24"
IDLE = ["python3", "-c", "import time; time.sleep(3600)"]
# Prints "yes" once a container's service has written /tmp/ready (it is listening).
READY = 'import os; print("yes" if os.path.exists("/tmp/ready") else "")'


def docker(docker_host: str, *args: str, timeout: float = 120.0) -> str:
    done = subprocess.run(
        ["docker", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "DOCKER_HOST": docker_host},
    )
    assert done.returncode == 0, (args, done.stdout[-2000:], done.stderr[-2000:])
    return done.stdout


@dataclass
class Replica:
    """A daemon, its container and the container's address on the overlay."""

    daemon: Daemon
    container: str
    address: str

    @property
    def member(self) -> api.OverlayMember:
        return api.OverlayMember(peer_id=self.daemon.peer_id, address=self.address)


@contextmanager
def containers(docker_host: str) -> Iterator[Callable[..., str]]:
    """``start(image, command=IDLE, volume=None)``: a running container with no network and
    no capabilities, as the Docker executor runs jobs; all removed afterwards."""
    started: list[str] = []

    def start(image: str, command: Sequence[str] = IDLE, volume: str | None = None) -> str:
        name = f"nunet-overlay-test-{uuid.uuid4().hex[:10]}"
        extra = ["-v", volume] if volume else []
        docker(
            docker_host,
            "run",
            "-d",
            "--name",
            name,
            "--network",
            "none",
            "--cap-drop",
            "ALL",
            "--security-opt",
            "no-new-privileges",
            "--user",
            "65534:65534",
            "--label",
            "nunet.test=overlay",
            *extra,
            image,
            *command,
        )
        started.append(name)
        return name

    try:
        yield start
    finally:
        for name in started:
            subprocess.run(
                ["docker", "rm", "-f", name],
                capture_output=True,
                timeout=60,
                env={**os.environ, "DOCKER_HOST": docker_host},
            )


def provider_pair(daemons: Callable[..., Daemon], docker_host: str) -> tuple[Daemon, Daemon]:
    """Two daemons running Docker jobs, the second bootstrapped from the first."""
    env = {"DOCKER_HOST": docker_host}
    first = daemons("rank0", 60, extra_toml=DOCKER_JOBS, env=env)
    second = daemons("rank1", 61, bootstrap=first.addrs()[0], extra_toml=DOCKER_JOBS, env=env)
    return first, second


def join(replicas: Sequence[Replica], job_id: str, subnet: str = SUBNET) -> None:
    """Each replica's daemon joins the job's overlay with every replica as a member."""
    members = tuple(r.member for r in replicas)
    for replica in replicas:
        stats = replica.daemon.call(
            api.OverlayJoin(
                job_id=job_id,
                container=replica.container,
                subnet=subnet,
                address=replica.address,
                members=members,
            )
        )
        assert stats.address == replica.address
    for replica in replicas:
        wait_for(
            lambda r=replica: stats_of(r.daemon, job_id).peers_connected == len(replicas) - 1,  # type: ignore[misc]
            f"the overlay of {job_id} never connected on {replica.daemon.home.home}",
            timeout=30,
        )


def stats_of(daemon: Daemon, job_id: str) -> api.OverlayStats:
    found = daemon.call(api.OverlayStatus(job_id=job_id)).overlays
    assert found, f"no overlay for {job_id}"
    return found[0]


def in_container(docker_host: str, container: str, code: str, timeout: float = 120.0) -> str:
    """Python run in the container (docker exec), its stdout."""
    return docker(docker_host, "exec", container, "python3", "-c", code, timeout=timeout)


DDP_SCRIPT = Path(__file__).parent / "docker" / "overlay_ddp.py"
MASTER_PORT = 29500


def torch_command(
    docker_host: str, replica: Replica, master: str, *args: str, env: dict[str, str] | None = None
) -> list[str]:
    """The docker exec command line running tests/docker/overlay_ddp.py in ``replica``'s
    container, its gloo bound to the overlay's device."""
    environment = {
        "MASTER_ADDR": master,
        "MASTER_PORT": str(MASTER_PORT),
        "GLOO_SOCKET_IFNAME": "nunet0",
        "HOME": "/tmp",
        **(env or {}),
    }
    flags = [f"--env={k}={v}" for k, v in environment.items()]
    code = DDP_SCRIPT.read_text()
    return ["docker", "exec", *flags, replica.container, "python3", "-c", code, *args]


def run_ranks(
    docker_host: str,
    replicas: Sequence[Replica],
    *args: str,
    timeout: float = 240.0,
    env: dict[str, str] | None = None,
) -> list[dict[str, Any]]:
    """Every replica runs overlay_ddp.py with ``args`` as its rank of ``len(replicas)``, at
    once (gloo's rendezvous waits for all); their printed JSON, by rank."""
    master = replicas[0].address
    procs = [
        subprocess.Popen(
            torch_command(
                docker_host, replica, master, *args, str(rank), str(len(replicas)), env=env
            ),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "DOCKER_HOST": docker_host},
        )
        for rank, replica in enumerate(replicas)
    ]
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=timeout)
        assert proc.returncode == 0, err[-3000:]
        results.append(json.loads(out.strip().splitlines()[-1]))
    return results


def _checksum(header: bytes) -> int:
    total = sum(struct.unpack(f"!{len(header) // 2}H", header))
    while total > 0xFFFF:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def udp_packet(source: str, destination: str, payload: bytes, port: int = 7000) -> bytes:
    """An IPv4 UDP datagram (UDP checksum 0: none, as IPv4 allows)."""
    udp = struct.pack("!HHHH", 40000, port, 8 + len(payload), 0) + payload
    src = bytes(int(x) for x in source.split("."))
    dst = bytes(int(x) for x in destination.split("."))
    header = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), 1, 0, 64, 17, 0, src, dst)
    header = header[:10] + struct.pack("!H", _checksum(header)) + header[12:]
    return header + udp
