"""Matching one job against 10,000 provider adverts (goal: < 50 ms). Prints the figures.

The adverts are varied on purpose (RAM, CPU, GPUs of three vendors, prices, busy peers, missing
frameworks) so that both paths are timed: candidates ranked and exclusions explained.
Usage: python bench/jobs_matching.py [N] [ROUNDS]
"""

from __future__ import annotations

import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import summary
from engine.api import Peer, PeerGpu, PeerResources
from engine.domain.matching import match
from engine.domain.spec import JobSpec

VENDORS = ("nvidia", "amd", "intel")


def adverts(count: int, seed: int = 7) -> list[Peer]:
    rng = random.Random(seed)
    peers = []
    for i in range(count):
        gpus = tuple(
            PeerGpu(
                vendor=rng.choice(VENDORS), model="gpu", vram_mb=rng.choice((4096, 8192, 24576))
            )
            for _ in range(rng.choice((0, 0, 1, 2)))
        )
        resources = PeerResources(
            cpu_mhz=rng.choice((1000, 4000, 8000, 16000, 32000)),
            memory_mb=rng.choice((1024, 4096, 8192, 16384, 65536)),
            gpus=gpus,
            price_units={
                "low": rng.randint(500_000, 2_000_000),
                "moderate": rng.randint(1_000_000, 5_000_000),
                "high": 6_000_000,
            },
            executors=("docker",) if i % 7 else ("process",),
            frameworks=("pytorch", "tensorflow", "scikit-learn") if i % 11 else ("pytorch",),
            free_memory_mb=rng.choice((None, 512, 8192)),
            running_jobs=rng.choice((None, 0, 0, 1)),
        )
        peers.append(
            Peer(peer_id=f"12D3KooW{i:044d}", latency_ms=rng.uniform(1, 200), resources=resources)
        )
    return peers


def main() -> None:
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 10_000
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 20
    peers = adverts(count)
    jobs = {
        "cpu moderate": JobSpec(
            framework="scikit-learn", script_url="https://x/y.py", tier="moderate", budget_ntx=2.0
        ),
        "gpu nvidia high": JobSpec(
            framework="pytorch",
            script_url="https://x/y.py",
            device="gpu",
            gpu_vendor="nvidia",
            tier="high",
            expected_minutes=60,
        ),
    }
    for label, spec in jobs.items():
        samples = []
        for _ in range(rounds):
            began = time.perf_counter()
            result = match(spec, peers, executors=("docker",))
            samples.append((time.perf_counter() - began) * 1000)
        print(
            summary(f"match {count} adverts, {label}", samples, "ms", goal=50.0)
            + f"; {len(result.candidates)} candidates, {len(result.excluded)} excluded"
        )


if __name__ == "__main__":
    main()
