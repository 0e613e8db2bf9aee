"""The embedded engine: commands across the bridge, events back, clean start and stop."""

from __future__ import annotations

import asyncio
import gc
import os
import threading
import time

import pytest

from engine import api
from engine.config import Paths
from engine.errors import EngineError
from engine.facade import Engine
from tests.conftest import TEST_ADDRESS


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_twenty_start_stop_cycles_leave_nothing_behind(node_home: Paths) -> None:
    # One warm-up cycle: first imports and lazily created module state are not leaks.
    Engine(node_home).start().close()
    gc.collect()  # sockets of the warm-up cycle that only the collector closes
    threads, fds = threading.active_count(), _fds()
    for _ in range(20):
        engine = Engine(node_home).start()
        # Wait for libp2p to listen, so each cycle also takes the network up and down.
        deadline = time.monotonic() + 10
        while not engine.call_blocking(api.GetPeerSelf()).addrs:
            assert time.monotonic() < deadline, "the network never came up"
            time.sleep(0.02)
        began = time.monotonic()
        engine.close()
        assert time.monotonic() - began < 2.0
    gc.collect()
    assert threading.active_count() == threads
    assert _fds() <= fds, "file descriptors leaked over 20 cycles"
    assert not node_home.control_socket.exists()


def test_commands_from_asyncio_and_events_back(engine_client: Engine) -> None:
    events: list[api.Event] = []
    engine_client.subscribe(events.append)

    async def scenario() -> api.Onboarding:
        return await engine_client.call(
            api.OnboardRequest(memory_mb=8000, cpu_mhz=4000, address=TEST_ADDRESS)
        )

    onboarding = asyncio.run(scenario())
    assert onboarding.state == "active"
    deadline = time.monotonic() + 2
    while not events and time.monotonic() < deadline:
        time.sleep(0.01)
    assert isinstance(events[0], api.OnboardingChanged)
    assert events[0].onboarding == onboarding


def test_engine_error_crosses_the_bridge(engine_client: Engine) -> None:
    with pytest.raises(EngineError) as caught:
        engine_client.call_blocking(api.Pause())
    assert caught.value.code == "not_onboarded"


def test_onboarding_survives_restart(node_home: Paths) -> None:
    with Engine(node_home) as engine:
        engine.call_blocking(api.OnboardRequest(memory_mb=8000, cpu_mhz=4000, address=TEST_ADDRESS))
        engine.call_blocking(api.Pause())
    with Engine(node_home) as engine:
        info = engine.call_blocking(api.GetInfo())
        assert info.onboarded is not None and info.onboarded.state == "paused"
        assert info.onboarded.memory_mb == 8000


def test_second_engine_on_one_home_is_refused(engine_client: Engine, node_home: Paths) -> None:
    with pytest.raises(EngineError, match=r"has .* open"):
        Engine(node_home).start()
    # ... and the first one is untouched.
    assert engine_client.call_blocking(api.GetPeerSelf()).peer_id


def test_calls_after_close_fail_cleanly(node_home: Paths) -> None:
    engine = Engine(node_home).start()
    engine.close()
    engine.close()  # idempotent
    with pytest.raises(EngineError, match="not running"):
        engine.call_blocking(api.GetInfo())


def test_startup_failure_releases_the_home(node_home: Paths) -> None:
    node_home.config_file.write_text("[jobs]\nslots = 0\n")
    with pytest.raises(EngineError, match="slots"):
        Engine(node_home).start()
    node_home.config_file.write_text("")
    Engine(node_home).start().close()
