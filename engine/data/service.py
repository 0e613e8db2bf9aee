"""The data room (issue 26): ``data add``/``get``/``ls``/``pin``/``unpin``/``rm`` on this node's
blockstore (``<home>/data/blocks``) and its roots (``<home>/data/roots/<cid>.json``), and
bitswap (bitswap.py) to serve them and to fetch what is not here from peers: those whose DHT
provider records name the root, those we are connected to, and any named with ``--from``.

A root's record is written after all its blocks are (a crash mid-add leaves blocks no root
holds, which the next ``rm`` of anything sweeps), and removing a root removes only the blocks
no other root holds. Blocking file work runs in a worker thread: an add of a large folder
never stalls the node.
"""

from __future__ import annotations

import logging
import os
import shutil
import stat
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import msgspec
import trio

from engine import api
from engine.commands import Handlers
from engine.data.bitswap import Bitswap, BlockUnavailable
from engine.data.blockstore import BlockCorrupt, BlockMissing, Blockstore, write_atomically
from engine.data.dag import MAX_ENTRIES, children, export, summarize, walk
from engine.data.unixfs import Node, UnixfsError, directory_node, import_file
from engine.domain.cid import Cid, CidError
from engine.errors import EngineError
from engine.ports import NetworkPort, PeerLink

log = logging.getLogger("nunet.data")

MAX_ADD_ENTRIES = 100_000
FETCH_BATCH = 16  # blocks asked for in one wantlist: one 4 MiB answer of 256 KiB chunks
FETCH_PARALLEL = 8  # wantlists out at once
MAX_FETCH_BYTES = 64 << 30  # what one fetch may write, whatever the DAG says
PROVIDE_S = 5.0  # how long `data add` waits for its DHT announcement before answering


class NodeData:
    """``network``: the node's network, asked for its running service when a root must come
    from peers or be announced (None: this node never fetches)."""

    def __init__(
        self,
        root: Path,
        network: Callable[[], NetworkPort] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.blocks = Blockstore(root / "blocks")
        self.roots_dir = root / "roots"
        self.exports_dir = root / "exports"  # job inputs, read-only, by CID
        self.clock = clock
        self._network = network
        self.bitswap = Bitswap(self.blocks)

    def attach(self, link: PeerLink) -> None:
        """The network (re)started: serve our blocks on it."""
        self.bitswap.attach(link)

    def commands(self) -> Handlers:
        return {
            api.DataAdd: self.add,
            api.DataGet: self.get,
            api.DataList: self.list_roots,
            api.DataPin: self.pin,
            api.DataUnpin: self.unpin,
            api.DataRemove: self.remove,
        }

    async def add(self, command: api.DataAdd) -> api.DataRoot:
        root = await trio.to_thread.run_sync(self._add, command)
        link = self._link(None)
        if link is not None and root.pinned:
            with trio.move_on_after(PROVIDE_S):  # the DHT may be slow; we serve it anyway
                await link.provide(root.cid)
        return root

    async def get(self, command: api.DataGet) -> api.DataExported:
        cid = _cid(command.cid)
        await self._ensure(cid, command.peers)
        return await trio.to_thread.run_sync(self._get, command)

    async def list_roots(self, command: api.DataList) -> api.DataRoots:
        return await trio.to_thread.run_sync(self._list)

    async def pin(self, command: api.DataPin) -> api.DataRoot:
        cid = _cid(command.cid)
        await self._ensure(cid, command.peers)
        return self._set_pinned(cid, True)

    async def unpin(self, command: api.DataUnpin) -> api.DataRoot:
        return self._set_pinned(_cid(command.cid), False)

    async def remove(self, command: api.DataRemove) -> api.DataRemoved:
        return await trio.to_thread.run_sync(self._remove, _cid(command.cid))

    async def materialize(self, cid: str, peers: Sequence[str]) -> tuple[Path, int, bool]:
        """A job's input (ports.JobData): fetched if need be, exported once into
        ``exports/<cid>`` (files 0444, folders 0555) and kept for later jobs."""
        root = _cid(cid)
        here = self._record(root) is not None and await trio.to_thread.run_sync(self._whole, root)
        if not here:
            await self._ensure(root, tuple(peers))
        return (*await trio.to_thread.run_sync(self._exported, root), here)

    async def publish(self, path: Path) -> str:
        """A job's results by CID (ports.JobData): added pinned, announced."""
        root = await self.add(api.DataAdd(path=str(path.resolve())))
        return root.cid

    def _exported(self, root: Cid) -> tuple[Path, int]:
        folder = self.exports_dir / str(root)
        done = folder / ".done"
        if not done.is_file():
            shutil.rmtree(folder, ignore_errors=True)  # a half-made one from a crash
            folder.mkdir(parents=True)
            try:
                export(root, self.blocks.get, folder, "content")
            except (BlockMissing, BlockCorrupt, UnixfsError) as exc:
                raise EngineError("not_found", f"{root}: {exc}") from None
            for path in sorted(folder.rglob("*"), reverse=True):
                path.chmod(0o555 if path.is_dir() else 0o444)
            done.touch()
        summary = summarize(root, self.blocks.get)
        return folder / "content", summary.size

    # -- fetching from peers ---------------------------------------------------------------------

    def _link(self, what: str | None) -> PeerLink | None:
        """The running network service; None when it is not running (an EngineError saying
        so when ``what`` needs it)."""
        if self._network is None:
            if what is None:
                return None
            raise EngineError("offline", f"{what} needs the network: this node has none")
        try:
            return self._network().require_service(what or "announcing data")
        except EngineError:
            if what is None:
                return None
            raise

    async def _ensure(self, root: Cid, named: tuple[str, ...]) -> None:
        """Every block under ``root`` is here, fetched from peers where it was not; a root
        fetched gets a record (not pinned: kept until room is needed or it is removed)."""
        if self._record(root) is not None and await trio.to_thread.run_sync(self._whole, root):
            return
        link = self._link(f"fetching {root} from peers")
        assert link is not None
        found = await link.find_providers(str(root))
        peers = list(dict.fromkeys([*named, *found, *link.connected_peers()]))
        if not peers:
            raise EngineError(
                "not_found", f"{root}: no peer to ask (none connected, none in the DHT)"
            )
        fetched = await self._fetch(root, peers)
        summary = await trio.to_thread.run_sync(summarize, root, self.blocks.get)
        if self._record(root) is None:
            self._write(
                api.DataRoot(
                    cid=str(root),
                    name=str(root),
                    kind=summary.kind,
                    size=summary.size,
                    blocks=summary.blocks,
                    dag_bytes=summary.dag_bytes,
                    pinned=False,
                    added_at=self.clock(),
                )
            )
        log.info("data %s: fetched %d bytes from %d peers", root, fetched, len(peers))
        with trio.move_on_after(PROVIDE_S):
            await link.provide(str(root))

    def _whole(self, root: Cid) -> bool:
        try:
            for _ in walk(root, self.blocks.get):
                pass
        except (BlockMissing, BlockCorrupt, UnixfsError):
            return False
        return True

    async def _fetch(self, root: Cid, peers: list[str]) -> int:
        """Fetches the DAG under ``root`` a level at a time, each level in wantlists of
        ``FETCH_BATCH`` blocks, ``FETCH_PARALLEL`` of them out at once; the peer that sent
        the last block is asked first. Returns the bytes fetched."""
        order = list(peers)
        seen = {root}
        level = [root]
        fetched = [0]
        failure: list[EngineError] = []

        async def batch_of(batch: list[Cid], found: list[Cid], limit: trio.Semaphore) -> None:
            async with limit:
                try:
                    found.extend(await self._fetch_batch(root, batch, order, fetched))
                except EngineError as exc:
                    failure.append(exc)
                    nursery.cancel_scope.cancel()

        while level:
            found: list[Cid] = []
            limit = trio.Semaphore(FETCH_PARALLEL)
            async with trio.open_nursery() as nursery:
                for i in range(0, len(level), FETCH_BATCH):
                    nursery.start_soon(batch_of, level[i : i + FETCH_BATCH], found, limit)
            if failure:
                raise failure[0]
            level = []
            for child in found:
                if child not in seen:
                    if len(seen) >= MAX_ENTRIES * 8:
                        raise EngineError("too_large", f"{root}: too many blocks: stopped")
                    seen.add(child)
                    level.append(child)
        return fetched[0]

    async def _fetch_batch(
        self, root: Cid, batch: list[Cid], order: list[str], fetched: list[int]
    ) -> list[Cid]:
        """One wantlist's blocks, stored; the CIDs they link to."""
        here = {c: self.blocks.get(c) for c in batch if self.blocks.has(c)}
        wanted = [c for c in batch if c not in here]
        if wanted:
            try:
                got = await self.bitswap.get_blocks(wanted, order)
            except BlockUnavailable as exc:
                raise EngineError("not_found", f"{root}: {exc}") from None
            if self.bitswap.last_peer in order:
                order.remove(self.bitswap.last_peer)
                order.insert(0, self.bitswap.last_peer)
            fetched[0] += sum(len(b) for b in got.values())
            if fetched[0] > MAX_FETCH_BYTES:
                raise EngineError(
                    "too_large", f"{root}: more than {MAX_FETCH_BYTES >> 30} GiB: stopped"
                )
            for cid, block in got.items():
                await trio.to_thread.run_sync(self.blocks.put, cid, block)
            here.update(got)
        links: list[Cid] = []
        for cid in batch:
            try:
                links.extend(children(cid, here[cid]))
            except UnixfsError as exc:
                raise EngineError("invalid", f"{root}: block {cid}: {exc}") from None
        return links

    # -- the work, in a worker thread ----------------------------------------------------------

    def _add(self, command: api.DataAdd) -> api.DataRoot:
        path = Path(command.path)
        if not path.is_absolute():
            raise EngineError("invalid", f"{command.path!r} is not an absolute path")
        if path.is_symlink() or not path.exists():
            raise EngineError(
                "not_found", f"{path}: no such file or folder (links are not followed)"
            )
        count = [0]
        try:
            node = self._import(path, command.hidden, count)
        except UnixfsError as exc:
            raise EngineError("invalid", f"{path}: {exc}") from None
        except OSError as exc:
            raise EngineError("io", f"{path}: {exc.strerror or exc}") from None
        summary = summarize(node.cid, self.blocks.get)
        root = api.DataRoot(
            cid=str(node.cid),
            name=path.name or "root",
            kind=summary.kind,
            size=summary.size,
            blocks=summary.blocks,
            dag_bytes=summary.dag_bytes,
            pinned=command.pin,
            added_at=self.clock(),
        )
        old = self._record(node.cid)
        if old is not None:  # added before: keep its first name and time, pin if asked
            root = msgspec.structs.replace(
                root, name=old.name, added_at=old.added_at, pinned=old.pinned or command.pin
            )
        self._write(root)
        return root

    def _import(self, path: Path, hidden: bool, count: list[int]) -> Node:
        count[0] += 1
        if count[0] > MAX_ADD_ENTRIES:
            raise UnixfsError(f"more than {MAX_ADD_ENTRIES} files and folders")
        if path.is_dir():
            entries = {}
            for child in path.iterdir():
                if child.is_symlink() or (child.name.startswith(".") and not hidden):
                    continue  # as `ipfs add -r` without --hidden; links are never followed
                entries[child.name] = self._import(child, hidden, count)
            return directory_node(entries, self.blocks.put)
        # Opened without following a link and without blocking (a FIFO would wait forever
        # for a writer), then checked: only a regular file is read, as `ipfs add` refuses
        # any other kind ("unrecognized file type").
        _regular(path, os.lstat(path).st_mode)  # a socket cannot even be opened
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        with os.fdopen(fd, "rb") as handle:
            _regular(path, os.fstat(fd).st_mode)  # what was opened, if it changed meanwhile
            return import_file(handle, self.blocks.put)

    def _get(self, command: api.DataGet) -> api.DataExported:
        cid = _cid(command.cid)
        out = Path(command.out)
        if not out.is_absolute() or not out.is_dir():
            raise EngineError("invalid", f"{command.out}: not a folder to write into")
        record = self._record(cid)
        name = record.name if record is not None else str(cid)
        try:
            path = export(cid, self.blocks.get, out, name)
        except (BlockMissing, BlockCorrupt) as exc:
            raise EngineError(
                "not_found", f"{cid}: {exc} (`nunet-tui data ls` lists what is here)"
            ) from None
        except UnixfsError as exc:
            raise EngineError("invalid", f"{cid}: {exc}") from None
        size = record.size if record is not None else summarize(cid, self.blocks.get).size
        return api.DataExported(cid=str(cid), path=str(path), size=size)

    def _list(self) -> api.DataRoots:
        roots = []
        if self.roots_dir.is_dir():
            for path in sorted(self.roots_dir.glob("*.json")):
                with_record = self._read(path)
                if with_record is not None:
                    roots.append(with_record)
        roots.sort(key=lambda r: r.added_at, reverse=True)
        files = [p for p in self.blocks.root.iterdir()] if self.blocks.root.is_dir() else []
        figures = self.bitswap.figures
        return api.DataRoots(
            exchange=api.BlockExchange(
                served_blocks=figures.served_blocks,
                served_bytes=figures.served_bytes,
                received_blocks=figures.received_blocks,
                unwanted_blocks=figures.unwanted_blocks,
                refused=figures.refused,
                bad_peers=tuple(sorted(figures.bad_peers)),
            ),
            roots=tuple(roots),
            blocks=sum(1 for p in files if not p.name.startswith(".")),
            bytes=sum(p.stat().st_size for p in files if not p.name.startswith(".")),
        )

    def _set_pinned(self, cid: Cid, pinned: bool) -> api.DataRoot:
        record = self._record(cid)
        if record is None:
            raise EngineError("not_found", f"{cid} is not here: `nunet-tui data ls` lists what is")
        record = msgspec.structs.replace(record, pinned=pinned)
        self._write(record)
        return record

    def _remove(self, cid: Cid) -> api.DataRemoved:
        if self._record(cid) is None:
            raise EngineError("not_found", f"{cid} is not here: `nunet-tui data ls` lists what is")
        self._record_path(cid).unlink(missing_ok=True)
        exported = self.exports_dir / str(cid)
        if exported.is_dir():  # a job input's read-only copy: writable again to be removed
            for path in exported.rglob("*"):
                if path.is_dir() and not path.is_symlink():
                    path.chmod(0o755)
            shutil.rmtree(exported, ignore_errors=True)
        live: set[Cid] = set()
        for other in self._list().roots:
            try:
                live.update(c for c, _ in walk(Cid.parse(other.cid), self.blocks.get))
            except (BlockMissing, BlockCorrupt, UnixfsError, CidError):
                continue  # a damaged root keeps what it still has
        removed = freed = 0
        for block in self.blocks.cids():
            if block not in live:
                freed += self.blocks.delete(block)
                removed += 1
        return api.DataRemoved(cid=str(cid), blocks=removed, bytes=freed)

    # -- the roots' records --------------------------------------------------------------------

    def _record_path(self, cid: Cid) -> Path:
        return self.roots_dir / f"{cid}.json"

    def _record(self, cid: Cid) -> api.DataRoot | None:
        return self._read(self._record_path(cid))

    @staticmethod
    def _read(path: Path) -> api.DataRoot | None:
        try:
            return msgspec.json.decode(path.read_bytes(), type=api.DataRoot)
        except (OSError, msgspec.DecodeError):
            return None

    def _write(self, root: api.DataRoot) -> None:
        write_atomically(self._record_path(Cid.parse(root.cid)), msgspec.json.encode(root))


def _regular(path: Path, mode: int) -> None:
    if not stat.S_ISREG(mode):
        kind = "a FIFO" if stat.S_ISFIFO(mode) else "a socket or device"
        raise UnixfsError(f"{path} is {kind}, not a file or folder: move it out, or add another")


def _cid(text: str) -> Cid:
    try:
        return Cid.parse(text)
    except CidError as exc:
        raise EngineError("invalid", str(exc)) from None
