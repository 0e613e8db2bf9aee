"""Each side of a tunnel waits longer than the other side may take (issue 20 §8): under load
the consumer gave up on the provider's answer after 10 s while the provider's forwarder in
the container had 15 s to connect, so `notebook open` and `job shell` failed although the
provider answered at 18 s."""

from __future__ import annotations

from engine.domain import tunnel_frames as tunnel
from engine.domain.tunnel_frames import JOB_CONNECT_S
from engine.jobs.executors import docker_exec
from nunet_tui.cli.job_tunnel import TUNNEL_WAIT_S


def test_the_consumer_waits_longer_than_the_provider_takes_to_reach_the_job() -> None:
    assert docker_exec.CONNECT_S == JOB_CONNECT_S  # the slowest executor's bound
    assert tunnel.ANSWER_S > JOB_CONNECT_S  # the provider answers once it reached the port
    assert tunnel.OPEN_S == tunnel.HEADER_S + tunnel.ANSWER_S  # dial, then the answer


def test_the_command_line_waits_longer_than_the_engine() -> None:
    """Its own timeout would hide the engine's error, which says what it waited for."""
    assert TUNNEL_WAIT_S > tunnel.OPEN_S
