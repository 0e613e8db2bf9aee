"""The node's ``resources.json``: the provider's specs, pools, groups and custom resources,
read (cached) and written atomically. What may be in it is the domain's (engine/domain/specs.py
``ResourceBook``, ``book_problems``).
"""

from __future__ import annotations

import os
from pathlib import Path

import msgspec

from engine.domain.specs import MAX_FILE_BYTES, ResourceBook, book_problems
from engine.errors import EngineError


class ResourceFile:
    """The node's ``resources.json``: read (cached by size and mtime: adverts and every
    offer read it) and written atomically."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._cached: tuple[tuple[int, int], ResourceBook] | None = None

    def load(self) -> ResourceBook:
        """The book (empty when there is no file); EngineError naming the file when it does
        not read or holds what no door would have let in."""
        try:
            stat = self.path.stat()
        except FileNotFoundError:
            return ResourceBook()
        except OSError as exc:
            raise self._bad(exc.strerror or str(exc)) from None
        key = (stat.st_size, stat.st_mtime_ns)
        if self._cached is not None and self._cached[0] == key:
            return self._cached[1]
        if stat.st_size > MAX_FILE_BYTES:
            raise self._bad(f"{stat.st_size} bytes: at most {MAX_FILE_BYTES}")
        try:
            book = msgspec.json.decode(self.path.read_bytes(), type=ResourceBook)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise self._bad(str(exc)) from None
        except OSError as exc:
            raise self._bad(exc.strerror or str(exc)) from None
        if problems := book_problems(book):
            raise self._bad("; ".join(problems[:5]))
        self._cached = (key, book)
        return book

    def _bad(self, why: str) -> EngineError:
        return EngineError(
            "resources_file",
            f"{self.path} does not read ({why}); fix it or move it away (nothing is written "
            "over it meanwhile)",
        )

    def save(self, book: ResourceBook) -> None:
        """Written whole or not at all: a crash leaves the old file or the new one."""
        self.load()  # a bad file stays untouched: raise before writing over it
        folder = self.path.parent
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        temporary = folder / f".{self.path.name}.{os.getpid()}.tmp"
        data = msgspec.json.format(msgspec.json.encode(book), indent=2) + b"\n"
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temporary, self.path)
        try:
            dir_fd = os.open(folder, os.O_RDONLY)
        except OSError:
            return
        try:
            os.fsync(dir_fd)
        except OSError:
            pass
        finally:
            os.close(dir_fd)
        self._cached = None
