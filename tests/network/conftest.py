"""The NAT lab fixture: built once a module, torn down after; skipped where it cannot run.
``lab_daemons`` starts daemons in it (``spawner``'s arguments, ``netns=`` a lab host's) and
kills them after the test."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests import netlab
from tests.daemon_harness import Daemon, spawner


@pytest.fixture(scope="module")
def nat_lab() -> Iterator[netlab.Lab]:
    reason = netlab.unavailable_reason()
    if reason:
        pytest.skip(reason)
    with netlab.lab() as built:
        yield built


@pytest.fixture
def lab_daemons(nat_lab: netlab.Lab, tmp_path: Path) -> Iterator[Any]:
    started: list[Daemon] = []
    yield spawner(tmp_path, started)
    for daemon in started:
        daemon.stop(kill=True)
