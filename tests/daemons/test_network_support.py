"""Helpers for the multi-process network tests (no tests here): real nodes on 127.0.0.1,
each a ``python -m engine.network.standalone`` process driven over stdin/stdout JSON lines."""

from __future__ import annotations

import contextlib
import json
import os
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]

Event = dict[str, Any]


class Node:
    def __init__(self, *args: str) -> None:
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "engine.network.standalone", *args],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
            text=True,
        )
        self.events: list[Event] = []
        self._queue: queue.Queue[Event] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self._ref = 0
        self.peer_id = ""
        self.addrs: list[str] = []

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                event = json.loads(line)
            except ValueError:
                continue
            self._queue.put(event)

    def _drain(self) -> None:
        while True:
            try:
                self.events.append(self._queue.get_nowait())
            except queue.Empty:
                return

    def wait_for(self, match: Callable[[Event], bool], timeout: float = 15.0) -> Event:
        deadline = time.monotonic() + timeout
        seen = 0
        while True:
            self._drain()
            for event in self.events[seen:]:
                if match(event):
                    return event
            seen = len(self.events)
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no event matched in {timeout}s; last: {self.events[-5:]}")
            with contextlib.suppress(queue.Empty):
                self.events.append(self._queue.get(timeout=min(left, 0.1)))

    def ready(self, timeout: float = 20.0) -> Node:
        event = self.wait_for(lambda e: e["event"] == "listening", timeout)
        self.peer_id, self.addrs = event["peer_id"], event["addrs"]
        return self

    def command(self, cmd: str, timeout: float = 10.0, **fields: Any) -> Event:
        self._ref += 1
        ref = self._ref
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"cmd": cmd, "ref": ref, **fields}) + "\n")
        self.proc.stdin.flush()
        return self.wait_for(lambda e: e.get("ref") == ref, timeout)

    def peer_ids(self) -> set[str]:
        return {p["peer_id"] for p in self.command("peers")["peers"]}

    def advertised_peers(self) -> set[str]:
        return {p["peer_id"] for p in self.command("peers")["peers"] if p["advert"]}

    def wait_peers(self, wanted: set[str], timeout: float = 15.0, exact: bool = False) -> set[str]:
        deadline = time.monotonic() + timeout
        while True:
            have = self.advertised_peers()
            if (have == wanted) if exact else wanted <= have:
                return have
            if time.monotonic() > deadline:
                raise TimeoutError(f"peers {have} never became {wanted}")
            time.sleep(0.2)

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(5)

    def stop(self) -> None:
        if self.proc.poll() is not None:
            return
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.write(json.dumps({"cmd": "quit"}) + "\n")
            self.proc.stdin.flush()
            self.proc.wait(5)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait(5)


def start_nodes(count: int, bootstrap: Node | None, *extra: str) -> list[Node]:
    boot = ["--bootstrap", bootstrap.addrs[0]] if bootstrap is not None else []
    nodes = [Node(*boot, *extra) for _ in range(count)]
    return [node.ready() for node in nodes]
