"""All-reduce through a job's overlay (issue 25 §3): gloo between 2 replicas in 2 containers
(``network_mode: none``) on 2 daemons, their packets carried over libp2p, against the same
all-reduce between 2 processes on direct loopback TCP (both ranks in one container, gloo on
``lo``), in one run, as a ratio.

    DOCKER_HOST=unix:///tmp/nunet-dockerd/docker.sock \
        .venv/bin/python bench/cluster_allreduce.py [--rounds 50]

Needs root (the daemons make the containers' TUN devices), a Docker engine
(scripts/dockerd.sh start) and the torch image (scripts/build_torch_image.sh). Latency: the
mean time of an all-reduce of 4 floats; bandwidth: 4 MiB of float32 per all-reduce over its
mean time (what one rank contributes, not the bytes on the wire). Both machines of the market
are this one machine here, so the overlay's figure is the cost of the engines' carriage
(TUN, framing, the libp2p stream's noise encryption and yamux), not of a network between
them.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.daemon_harness import Daemon, spawner
from tests.docker_fixture import TORCH_IMAGE
from tests.overlay_helpers import (
    DDP_SCRIPT,
    DOCKER_JOBS,
    MASTER_PORT,
    Replica,
    containers,
    join,
    run_ranks,
    stats_of,
)


def loopback(docker_host: str, container: str, rounds: int) -> dict[str, Any]:
    """Both ranks in one container, gloo over its loopback: the direct baseline."""
    env = {
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(MASTER_PORT + 1),
        "GLOO_SOCKET_IFNAME": "lo",
        "HOME": "/tmp",
        "ROUNDS": str(rounds),
    }
    flags = [f"--env={k}={v}" for k, v in env.items()]
    code = DDP_SCRIPT.read_text()
    procs = [
        subprocess.Popen(
            ["docker", "exec", *flags, container, "python3", "-c", code, "bench", str(r), "2"],
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "DOCKER_HOST": docker_host},
        )
        for r in range(2)
    ]
    outs = [proc.communicate(timeout=600)[0] for proc in procs]
    result: dict[str, Any] = json.loads(outs[0].strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=50)
    args = parser.parse_args()
    docker_host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    root = Path(tempfile.mkdtemp(prefix="nunet-bench-overlay-"))
    started: list[Daemon] = []
    spawn = spawner(root, started)
    try:
        env = {"DOCKER_HOST": docker_host}
        first = spawn("rank0", 60, extra_toml=DOCKER_JOBS, env=env)
        second = spawn("rank1", 61, bootstrap=first.addrs()[0], extra_toml=DOCKER_JOBS, env=env)
        with containers(docker_host) as start:
            replicas = [
                Replica(first, start(TORCH_IMAGE), "10.77.1.1"),
                Replica(second, start(TORCH_IMAGE), "10.77.1.2"),
            ]
            join(replicas, "bench-allreduce")
            overlay = run_ranks(
                docker_host, replicas, "bench", timeout=600, env={"ROUNDS": str(args.rounds)}
            )[0]
            carried = stats_of(first, "bench-allreduce")
            direct = loopback(docker_host, replicas[0].container, args.rounds)
    finally:
        for daemon in started:
            daemon.stop(kill=True)
        shutil.rmtree(root, ignore_errors=True)
    mib = 1024 * 1024
    print(f"all-reduce, gloo, world size 2, {args.rounds} rounds (this machine: both providers)")
    print(f"{'':24}{'latency (4 floats)':>20}{'bandwidth (4 MiB)':>20}")
    for name, figures in (("overlay (2 providers)", overlay), ("loopback (1 host)", direct)):
        print(
            f"{name:24}{figures['latency_s'] * 1e3:>17.2f} ms"
            f"{figures['bytes_per_s'] / mib:>15.1f} MiB/s"
        )
    print(
        f"{'overlay / loopback':24}{overlay['latency_s'] / direct['latency_s']:>18.1f} x"
        f"{overlay['bytes_per_s'] / direct['bytes_per_s']:>18.3f} x"
    )
    print(
        f"metered on rank 0's provider: {carried.bytes_out / mib:.1f} MiB out, "
        f"{carried.bytes_in / mib:.1f} MiB in; dropped {carried.dropped_out} out, "
        f"{carried.dropped_in} in"
    )


if __name__ == "__main__":
    main()
