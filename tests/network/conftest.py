"""The NAT lab fixture: built once a module, torn down after; skipped where it cannot run."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests import netlab


@pytest.fixture(scope="module")
def nat_lab() -> Iterator[netlab.Lab]:
    reason = netlab.unavailable_reason()
    if reason:
        pytest.skip(reason)
    with netlab.lab() as built:
        yield built
