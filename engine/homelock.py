"""One engine per home: an exclusive ``flock`` held for the engine's whole life.

Two processes opening the same home would interleave writes to one SQLite file and one
identity; the lock turns that into a clear error (or, in ``engine.connect``, into attaching
to the process that holds it). The kernel drops the lock when the holder dies, so a crash
never leaves a home locked.
"""

from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path


class HomeLock:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    def try_acquire(self) -> bool:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._fd = fd
        return True

    def acquire(self, wait: float) -> bool:
        """``try_acquire`` for up to ``wait`` seconds: a command that only checks whether the
        home is free holds the lock for an instant, and must not make a starting daemon fail."""
        deadline = time.monotonic() + wait
        while not self.try_acquire():
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.02)
        return True

    @property
    def held(self) -> bool:
        return self._fd is not None

    def holder_pid(self) -> int | None:
        try:
            text = self.path.read_text().strip()
        except OSError:
            return None
        return int(text) if text.isdigit() else None

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None
