"""The markers of the fast inner loop come from what a test reaches (tests/conftest.py)."""

from __future__ import annotations

import subprocess

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
