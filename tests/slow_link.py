"""A provider behind a slow, lossy link: its own network namespace, reachable only through a
relay of ours (tests/latency_relay.py) that delays and cuts what crosses it.

The namespace has nothing but loopback, so the provider's daemon can reach the consumer, the
ledger and the oracle only through the relay's ports inside it, and nobody outside can dial it
at all (as behind a home router): every connection crosses the relay, and one the relay cut is
dialled again by the provider.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import count

import pytest

from tests.conftest import REPO

_names = count()


@contextlib.contextmanager
def namespace() -> Iterator[str]:
    """A fresh network namespace with loopback up, deleted at the end."""
    if os.geteuid() != 0:
        pytest.skip("network namespaces need root")
    name = f"nunet-slow-{os.getpid()}-{next(_names)}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        subprocess.run(["ip", "-n", name, "link", "set", "lo", "up"], check=True)
        yield name
    finally:
        subprocess.run(["ip", "netns", "delete", name], check=False)


@dataclass
class Relay:
    proc: subprocess.Popen[str]
    ports: list[int]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


@contextlib.contextmanager
def relay(*routes: str, seed: int = 1) -> Iterator[Relay]:
    """tests/latency_relay.py's routes (its docstring says how to write one), as a process."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.latency_relay", *routes, "--seed", str(seed)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line, "the relay did not start"
        running = Relay(proc, json.loads(line)["ports"])
        yield running
    finally:
        if proc.poll() is None:
            proc.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(10)
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
