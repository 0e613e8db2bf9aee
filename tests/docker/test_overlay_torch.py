"""torch.distributed over a job's overlay (issue 25 §2-3): two replicas in two containers
(``network_mode: none``) on two real daemons, gloo's TCPStore and pair connections carried
over libp2p. A gloo all-reduce returns the right sums; a seeded DDP training on synthetic data
ends with the weights of the same training in one process, within float tolerance."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.daemon_harness import Daemon, daemons
from tests.docker_fixture import docker_host, sklearn_image, torch_image
from tests.overlay_helpers import Replica, containers, join, provider_pair, run_ranks, stats_of

__all__ = ["daemons", "docker_host", "sklearn_image", "torch_image"]


def test_gloo_all_reduce_and_ddp_across_two_providers(
    daemons: Callable[..., Daemon], docker_host: str, torch_image: str
) -> None:
    first, second = provider_pair(daemons, docker_host)
    with containers(docker_host) as start:
        replicas = [
            Replica(first, start(torch_image), "10.77.1.1"),
            Replica(second, start(torch_image), "10.77.1.2"),
        ]
        join(replicas, "ovl-ddp")

        reduced = run_ranks(docker_host, replicas, "allreduce")
        expected_big = 3 * sum(range(1_000_000))
        for result in reduced:
            assert result["small"] == [3.0, 3.0, 3.0, 3.0]
            assert result["big_sum"] == expected_big
        # 8 MB each way at least went through the daemons, metered.
        assert stats_of(first, "ovl-ddp").bytes_out > 8_000_000
        assert stats_of(second, "ovl-ddp").bytes_in > 8_000_000

        distributed = run_ranks(docker_host, replicas, "ddp")
        assert distributed[0] == distributed[1]  # DDP keeps the replicas' weights equal
        [alone] = run_ranks(docker_host, replicas[:1], "ddp")
        assert alone.keys() == distributed[0].keys()
        for name, values in alone.items():
            assert values == pytest.approx(distributed[0][name], rel=1e-5, abs=1e-6), name
