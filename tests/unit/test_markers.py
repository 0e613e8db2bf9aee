"""The markers of the fast inner loop come from what a test reaches (tests/conftest.py)."""

from __future__ import annotations

import subprocess

import pytest

from tests.conftest import _starts_processes, run_cli


def _helper_that_spawns() -> None:
    subprocess.run(["true"], check=True)


class _Harness:
    def start(self) -> None:
        _helper_that_spawns()


def _calls_cli() -> None:
    run_cli("--help")


def _calls_a_helper() -> None:
    _helper_that_spawns()


def _builds_a_harness() -> None:
    _Harness().start()


def _pure() -> None:
    assert sorted([2, 1]) == [1, 2]


# Held in a tuple, which the marker hook does not follow: these tests themselves start nothing.
_SPAWNING = (_calls_cli, _calls_a_helper, _builds_a_harness)
_PURE = (_pure,)


def test_a_test_that_runs_the_cli_or_a_subprocess_starts_processes() -> None:
    for func in _SPAWNING:
        assert _starts_processes(func, set()), func.__name__


def test_a_test_of_pure_code_starts_none() -> None:
    assert not _starts_processes(_PURE[0], set())


def test_the_forked_cli_and_daemons_start_processes() -> None:
    """run_cli and Daemon fork from the suite's zygote (tests/forkserver.py), not through
    subprocess: the hook knows them too, so the fast loop still leaves them out."""
    from tests import daemon_harness

    assert _starts_processes(_calls_cli, set())
    assert _starts_processes(daemon_harness.Daemon.start, set())


def test_every_test_has_a_time_limit(pytestconfig: pytest.Config) -> None:
    """A hang fails within minutes with every thread's stack (pyproject.toml, pytest-timeout),
    and a worker stuck past that prints its threads (faulthandler)."""
    assert 0 < float(pytestconfig.getini("timeout")) <= 300
    assert float(pytestconfig.getini("faulthandler_timeout")) > 0


def test_tests_that_share_the_machine_run_on_one_worker(request: pytest.FixtureRequest) -> None:
    """The Docker engine and mDNS on loopback are shared: their tests form one xdist group."""
    from tests.conftest import _SHARED, _SHARED_FILES

    assert _SHARED["docker"] == "docker" and "test_network_mdns.py" in _SHARED_FILES
    assert request.config.getini("addopts").count("loadgroup") == 1
