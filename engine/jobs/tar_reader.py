"""Reading a tar (or tar.gz) that a stranger made, with every read bounded.

Python's tarfile is not used for reading: it loads a whole pax header into memory (a 256 MiB
one in a 1 MB archive took 13 s and 800 MB) and its extraction filter has been fooled by link
chains (CVE-2025-4517). This reader parses ustar, pax and GNU long-name headers itself and
accepts only what a results archive needs: regular files and folders, with names that stay
inside (``workspace_tar.name_problem``). Links of any kind, devices, FIFOs, sparse files and
unknown member types are refused, as is anything over the limits: file bytes in total and per
member, the member count, and the size of every extended header (a pax header or a GNU long
name is read only once its size is known to be under ``max_header_bytes``). Decompression is
pulled a chunk at a time, so a gzip bomb costs at most the limits, never memory.

``extract`` reads the archive twice: the first pass checks everything and writes nothing, the
second writes into a folder of its own with ``O_CREAT|O_EXCL|O_NOFOLLOW``, checking again.
"""

from __future__ import annotations

import contextlib
import gzip
import os
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, cast

from engine.jobs.workspace_tar import name_problem

BLOCK = 512
_CHUNK = 1 << 20
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_KINDS = {
    b"1": "a hard link",
    b"2": "a symbolic link",
    b"3": "a character device",
    b"4": "a block device",
    b"6": "a FIFO",
}
MAX_EXTENDED = 3  # one pax header, one GNU long name, one GNU long link name per member


class UnsafeArchive(Exception):
    """The archive is refused; the message says why in one line."""


@dataclass(frozen=True)
class Limits:
    max_bytes: int  # file data, all members together
    max_members: int
    max_header_bytes: int = 64 << 10  # one pax header or one GNU long name
    max_member_bytes: int | None = None  # default: max_bytes
    max_headers_total: int = 32 << 20  # all extended headers together


@dataclass(frozen=True)
class Member:
    name: str  # normalised: no "", "." components, no trailing "/"
    is_dir: bool
    size: int
    executable: bool


def _number(field: bytes, what: str) -> int:
    if field[:1] == b"\x80":  # GNU base-256, positive
        return int.from_bytes(field[1:], "big")
    if field[:1] and field[0] & 0x80:
        raise UnsafeArchive(f"a member header has a negative {what}")
    text = field.split(b"\x00", 1)[0].strip(b" ")
    if not text:
        return 0
    try:
        return int(text, 8)
    except ValueError:
        raise UnsafeArchive(f"a member header has a damaged {what} field") from None


def _text(raw: bytes, what: str) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise UnsafeArchive(f"a {what} in the archive is not UTF-8: {raw[:200]!r}") from None


def _pax(data: bytes) -> dict[str, str]:
    """The records of a pax extended header ("LEN key=value\\n"...), strictly."""
    records: dict[str, str] = {}
    pos = 0
    while pos < len(data):
        if not data[pos:].strip(b"\x00"):
            break
        space = data.find(b" ", pos, pos + 21)
        length_text = data[pos:space] if space > pos else b""
        if not length_text.isdigit():
            raise UnsafeArchive("a pax header is damaged (bad record length)")
        length = int(length_text)
        record = data[pos : pos + length]
        if length < 5 or pos + length > len(data) or not record.endswith(b"\n"):
            raise UnsafeArchive("a pax header is damaged (bad record)")
        key, eq, value = record[space - pos + 1 : -1].partition(b"=")
        if not eq:
            raise UnsafeArchive("a pax header is damaged (record without '=')")
        name = _text(key, "pax key")
        if name.startswith("GNU.sparse"):
            raise UnsafeArchive("the archive has a sparse file (not accepted)")
        records[name] = _text(value, f"pax {name}")
        pos += length
    return records


class TarReader:
    """Members of the decompressed tar ``stream``, one at a time; ``data()`` streams the
    current member's bytes (unread bytes are skipped on the next step)."""

    def __init__(self, stream: IO[bytes], limits: Limits) -> None:
        self._in = stream
        self._limits = limits
        self._left = 0  # data bytes of the current member not yet read, padding included
        self._data = 0
        self._headers = 0  # extended header bytes so far

    def _read(self, n: int) -> bytes:
        parts: list[bytes] = []
        while n > 0:
            try:
                chunk = self._in.read(min(n, _CHUNK))
            except (OSError, EOFError, zlib.error) as exc:
                raise UnsafeArchive(f"not a readable tar archive: {exc}") from None
            if not chunk:
                raise UnsafeArchive("the archive is truncated")
            parts.append(chunk)
            n -= len(chunk)
        return b"".join(parts)

    def _skip(self, n: int) -> None:
        while n > 0:
            step = min(n, _CHUNK)
            self._read(step)
            n -= step

    def data(self) -> Iterator[bytes]:
        while self._data > 0:
            chunk = self._read(min(self._data, _CHUNK))
            self._data -= len(chunk)
            self._left -= len(chunk)
            yield chunk

    def _extended(self, size: int, what: str) -> bytes:
        if size > self._limits.max_header_bytes:
            raise UnsafeArchive(
                f"the archive has a {size}-byte {what}; at most "
                f"{self._limits.max_header_bytes} bytes are accepted"
            )
        self._headers += size
        if self._headers > self._limits.max_headers_total:
            raise UnsafeArchive(
                f"the archive's extended headers hold more than "
                f"{self._limits.max_headers_total} bytes"
            )
        data = self._read(size)
        self._skip(-size % BLOCK)
        return data

    def _header(self) -> bytes | None:
        try:
            first = self._in.read(BLOCK)
        except (OSError, EOFError, zlib.error) as exc:
            raise UnsafeArchive(f"not a readable tar archive: {exc}") from None
        if not first:
            return None  # no end-of-archive blocks: tolerated, as tar does
        block = first + (self._read(BLOCK - len(first)) if len(first) < BLOCK else b"")
        if block == bytes(BLOCK):
            return None
        try:
            stored = _number(block[148:156], "checksum")
        except UnsafeArchive:
            raise UnsafeArchive("not a tar archive (a header checksum is unreadable)") from None
        plain = block[:148] + b" " * 8 + block[156:]
        if stored != sum(plain) and stored != sum(b - 256 if b > 127 else b for b in plain):
            raise UnsafeArchive("not a tar archive (a header checksum is wrong)")
        return block

    def __iter__(self) -> Iterator[Member]:
        limits = self._limits
        per_member = limits.max_member_bytes or limits.max_bytes
        count = total = 0
        while True:
            self._skip(self._left)
            self._left = self._data = 0
            pax: dict[str, str] = {}
            long_name: str | None = None
            extended = 0
            while True:
                block = self._header()
                if block is None:
                    if extended:
                        raise UnsafeArchive("the archive ends after an extended header")
                    return
                kind = block[156:157]
                size = _number(block[124:136], "size")
                if kind in (b"x", b"L", b"K", b"g"):
                    extended += 1
                    if extended > MAX_EXTENDED:
                        raise UnsafeArchive("a member has too many extended headers")
                    data = self._extended(size, "GNU long name" if kind in b"LK" else "pax header")
                    if kind == b"x":
                        pax.update(_pax(data))
                    elif kind == b"L":
                        long_name = _text(data.split(b"\x00", 1)[0], "member name")
                    continue  # "K" (a link's target) and "g" (global) are not needed
                break
            count += 1
            if count > limits.max_members:
                raise UnsafeArchive(f"the archive has more than {limits.max_members} members")
            name = pax.get("path", long_name)
            if name is None:
                raw = block[0:100].split(b"\x00", 1)[0]
                if block[257:263] == b"ustar\x00":
                    prefix = block[345:500].split(b"\x00", 1)[0]
                    raw = prefix + b"/" + raw if prefix else raw
                name = _text(raw, "member name")
            if "size" in pax:
                if not pax["size"].isdigit() or len(pax["size"]) > 20:
                    raise UnsafeArchive(f"member {name!r} has a damaged pax size")
                size = int(pax["size"])
            if kind in _KINDS:
                raise UnsafeArchive(
                    f"member {name!r} is {_KINDS[kind]}: only files and folders are accepted"
                )
            is_dir = kind == b"5" or (kind in (b"\x00", b"0") and name.endswith("/"))
            if not is_dir and kind not in (b"\x00", b"0", b"7"):
                raise UnsafeArchive(f"member {name!r} has an unsupported type {kind!r}")
            clean = _normalise(name)
            if not clean and not is_dir:
                raise UnsafeArchive(f"member {name!r} is a file without a name")
            if is_dir and size:
                raise UnsafeArchive(f"folder {name!r} has data")
            if size > per_member:
                raise UnsafeArchive(
                    f"member {name!r} is {size} bytes; at most {per_member} are accepted"
                )
            total += size
            if total > limits.max_bytes:
                raise UnsafeArchive(f"the archive unpacks to more than {limits.max_bytes} bytes")
            self._data = size
            self._left = size + (-size % BLOCK)
            mode = _number(block[100:108], "mode")
            yield Member(clean, is_dir, size, bool(mode & 0o111))


def _normalise(name: str) -> str:
    if name.startswith("/") or (len(name) > 1 and name[1] == ":"):
        raise UnsafeArchive(f"member {name!r} has an absolute path")
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise UnsafeArchive(f"member {name!r} goes up out of the folder ('..')")
    clean = "/".join(parts)
    if not clean:
        return ""  # "./": the top folder itself
    if problem := name_problem(clean):
        raise UnsafeArchive(f"member {name!r}: the name {problem}")
    return clean


def _open(archive: Path) -> IO[bytes]:
    with archive.open("rb") as peek:
        gzipped = peek.read(2) == b"\x1f\x8b"
    return cast(IO[bytes], gzip.open(archive, "rb")) if gzipped else archive.open("rb")


def check(archive: Path, limits: Limits) -> list[Member]:
    """Every member, checked, nothing written; the first problem raises UnsafeArchive."""
    kinds: dict[str, bool] = {}  # name -> is a folder
    found: list[Member] = []
    with _open(archive) as stream:
        for member in TarReader(stream, limits):
            if not member.name:
                continue
            _place(kinds, member)
            found.append(member)
    return found


def _place(kinds: dict[str, bool], member: Member) -> None:
    """Refuse a name clash: a file twice, a file and a folder of one name, a path through a
    file."""
    parts = member.name.split("/")
    for i in range(1, len(parts)):
        parent = "/".join(parts[:i])
        if kinds.get(parent) is False:
            raise UnsafeArchive(f"member {member.name!r} is inside the file {parent!r}")
        kinds.setdefault(parent, True)
    before = kinds.get(member.name)
    if before is not None and not (before and member.is_dir):
        raise UnsafeArchive(f"member {member.name!r} appears twice in the archive")
    kinds[member.name] = member.is_dir


def extract(archive: Path, dest: Path, limits: Limits) -> list[str]:
    """Check ``archive``, then write it into the empty folder ``dest`` (ours, fresh); returns
    the files written, relative to ``dest``."""
    check(archive, limits)
    return write(archive, dest, limits)


def write(archive: Path, dest: Path, limits: Limits) -> list[str]:
    """The writing pass alone (it checks each member again as it goes)."""
    kinds: dict[str, bool] = {}
    files: list[str] = []
    root = os.open(dest, _DIR_FLAGS)
    try:
        with _open(archive) as stream:
            reader = TarReader(stream, limits)
            for member in reader:
                if not member.name:
                    continue
                _place(kinds, member)
                *folders, base = member.name.split("/")
                fd = _folder(root, folders if not member.is_dir else [*folders, base])
                try:
                    if not member.is_dir:
                        _write(fd, base, member, reader)
                        files.append(member.name)
                finally:
                    os.close(fd)
    finally:
        os.close(root)
    return files


def _folder(root: int, parts: list[str]) -> int:
    fd = os.dup(root)
    for part in parts:
        with contextlib.suppress(FileExistsError):
            os.mkdir(part, 0o755, dir_fd=fd)
        try:
            sub = os.open(part, _DIR_FLAGS, dir_fd=fd)
        except OSError as exc:
            os.close(fd)
            raise UnsafeArchive(f"folder {part!r} could not be made: {exc.strerror}") from None
        os.close(fd)
        fd = sub
    return fd


_ZEROS = bytes(_CHUNK)


def _write(parent: int, base: str, member: Member, reader: TarReader) -> None:
    try:
        fd = os.open(base, _NEW_FILE, 0o755 if member.executable else 0o644, dir_fd=parent)
    except OSError as exc:
        raise UnsafeArchive(
            f"member {member.name!r} could not be written: {exc.strerror}"
        ) from None
    zeros = memoryview(_ZEROS)
    with os.fdopen(fd, "wb") as handle:
        size = 0
        for chunk in reader.data():
            size += len(chunk)
            # A block of zeros is left a hole: a sparse file (a few KB on the provider's
            # disk, gigabytes long) would otherwise take its full size here at every fetch.
            if zeros[: len(chunk)] == chunk:
                handle.seek(len(chunk), os.SEEK_CUR)
            else:
                handle.write(chunk)
        handle.truncate(size)  # the length of a file that ends in a hole
