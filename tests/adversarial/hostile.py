"""A hostile peer: a real py-libp2p host that sends whatever a test wants.

It runs our own ``NetworkService`` (so daemons discover it, see its heartbeats and chat with
it like any peer) in a trio loop on its own thread, and gives the test thread blocking calls:
raw streams on any protocol, signed job messages with any fields (``seal_job`` builds what our
own encoder would refuse to produce), and handlers it serves (a hostile provider).

Nothing here filters what is sent: that is the point. What comes back is returned as bytes
or as schema-free dicts, so the test sees exactly what the victim said.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import msgspec
import trio
from nacl.signing import SigningKey

from engine.config import NetworkSettings
from engine.domain import wire
from engine.domain.peer_info import PeerInfo
from engine.domain.spec import FRAMEWORKS
from engine.identity import Identity
from engine.network.heartbeat import HeartbeatFigures

T = TypeVar("T")
JOB_PROTOCOL = "/nunet/job/1.0.0"
MAX_FRAME = 64 << 20  # what we accept back: the victim's limits are the subject, not ours


def seal_job(identity: Identity, payload: dict[str, Any]) -> bytes:
    """One framed job message signed by ``identity``, with exactly the fields given."""
    return wire.frame(wire.seal_payload(identity, "job", msgspec.msgpack.encode(payload)))


def open_job(frame: bytes) -> dict[str, Any]:
    """The payload of a signed job frame, msgpack-decoded with no schema (signature unchecked:
    tests look at what the victim said, they do not trust it)."""
    envelope = msgspec.msgpack.decode(frame)
    payload = msgspec.msgpack.decode(envelope["payload"])
    assert isinstance(payload, dict)
    return payload


class _Callbacks:
    """NetworkCallbacks: advertise what the test says, ignore what arrives (but keep chat)."""

    def __init__(self, advert: wire.Advert | None) -> None:
        self.advert_value = advert
        self.messages: list[tuple[str, str]] = []

    def advert(self) -> wire.Advert | None:
        return self.advert_value

    def in_good_standing(self, peer_id: str) -> bool:
        return False

    def heartbeat(self) -> HeartbeatFigures | None:
        advert = self.advert_value
        if advert is None:
            return HeartbeatFigures()
        return HeartbeatFigures(
            cpu_mhz=advert.cpu_mhz,
            free_cpu_mhz=advert.cpu_mhz,
            ram_mb=advert.ram_mb,
            free_ram_mb=advert.ram_mb,
            gpus=len(advert.gpus),
            free_gpus=len(advert.gpus),
        )

    def on_peer_changed(self, peer_id: str, info: PeerInfo | None) -> None:
        pass

    def on_chat_request(self, peer_id: str, conversation: str, at: float) -> None:
        pass

    def on_chat_join(self, peer_id: str, conversation: str, at: float) -> None:
        pass

    def on_message(self, peer_id: str, conversation: str, text: str, seq: int, at: float) -> None:
        self.messages.append((peer_id, text))


class RawStream:
    """A libp2p stream driven from the test thread."""

    def __init__(self, peer: HostilePeer, stream: Any) -> None:
        self._peer = peer
        self.stream = stream

    def write(self, data: bytes) -> None:
        self._peer.call(self.stream.write, data)

    def read(self, n: int = 65536, timeout: float = 10.0) -> bytes:
        """Up to ``n`` bytes; b"" at the end of the stream or on a reset."""

        async def read() -> bytes:
            with trio.fail_after(timeout):
                try:
                    return bytes(await self.stream.read(n))
                except trio.TooSlowError:
                    raise
                except Exception:
                    return b""

        return self._peer.call(read)

    def read_frames(self, timeout: float = 10.0) -> list[bytes]:
        """Length-prefixed frames until the end of the stream, a reset or the timeout."""
        return self._peer.call(_read_frames, self.stream, timeout)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._peer.call(self.stream.close)

    def reset(self) -> None:
        with contextlib.suppress(Exception):
            self._peer.call(self.stream.reset)


async def _read_frames(stream: Any, timeout: float) -> list[bytes]:
    frames: list[bytes] = []
    with trio.move_on_after(timeout):
        while True:
            try:
                frame = await wire.read_frame(stream, MAX_FRAME)
            except wire.WireError:
                break
            if frame is None:
                break
            frames.append(frame)
    return frames


class HostilePeer:
    """A real peer on 127.0.0.1 whose every byte the test chooses."""

    def __init__(
        self,
        *,
        seed: bytes | None = None,
        bootstrap: Sequence[str] = (),
        channel: str = "nunet-test",
        advert: wire.Advert | None = None,
        heartbeat_interval_s: float = 1.0,
    ) -> None:
        key = SigningKey(seed) if seed is not None else SigningKey.generate()
        self.identity = Identity(key)
        self.peer_id = self.identity.peer_id
        self.callbacks = _Callbacks(advert)
        self._settings = NetworkSettings(
            listen=["/ip4/127.0.0.1/tcp/0"],
            bootstrap=list(bootstrap),
            heartbeat_interval_s=heartbeat_interval_s,
        )
        self._channel = channel
        self.service: Any = None
        self._token: trio.lowlevel.TrioToken | None = None
        self._stop: trio.Event | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._failure: BaseException | None = None

    @property
    def messages(self) -> list[tuple[str, str]]:
        """Chat messages received: (from, text)."""
        return self.callbacks.messages

    # --- lifetime -------------------------------------------------------------------------

    def start(self, timeout: float = 30.0) -> HostilePeer:
        self._thread = threading.Thread(target=self._main, name="hostile-peer", daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout):
            raise AssertionError("the hostile peer did not start listening")
        if self._failure is not None:
            raise AssertionError(f"the hostile peer failed to start: {self._failure!r}")
        return self

    def _main(self) -> None:
        try:
            trio.run(self._serve)
        except BaseException as exc:  # reported to the test thread by start()
            self._failure = exc
            self._ready.set()

    async def _serve(self) -> None:
        from engine.network.service import NetworkService  # libp2p import: ~1 s

        self.service = NetworkService(self.identity, self._settings, self._channel, self.callbacks)
        self._token = trio.lowlevel.current_trio_token()
        self._stop = trio.Event()
        async with trio.open_nursery() as nursery:
            await nursery.start(self.service.run)
            self._ready.set()
            await self._stop.wait()
            # Close first, so the victims see us go at once (cancelling alone left the
            # connections counted as open on the other side for a while).
            with contextlib.suppress(Exception), trio.move_on_after(5):
                await self.service.host.close()
            nursery.cancel_scope.cancel()

    def stop(self) -> None:
        if self._token is not None and self._stop is not None:
            with contextlib.suppress(trio.RunFinishedError):
                self._token.run_sync_soon(self._stop.set)
        if self._thread is not None:
            self._thread.join(15)
        self._token = None

    # --- calls from the test thread ---------------------------------------------------------

    def call(self, fn: Callable[..., Awaitable[T]], *args: Any) -> T:
        """Run ``fn(*args)`` in the peer's trio loop and return its result (or raise)."""
        assert self._token is not None, "the hostile peer is not running"
        return trio.from_thread.run(fn, *args, trio_token=self._token)

    @property
    def host(self) -> Any:
        return self.service.host

    @property
    def addrs(self) -> list[str]:
        return list(self.service.listen_addrs())

    def connect(self, addr: str, timeout: float = 10.0) -> None:
        from engine.network.host import parse_peer_addr

        info = parse_peer_addr(addr)

        async def connect() -> None:
            with trio.fail_after(timeout):
                await self.host.connect(info)

        self.call(connect)

    def open(self, peer_id: str, protocol: str, timeout: float = 10.0) -> RawStream:
        from libp2p.custom_types import TProtocol

        from engine.network.host import peer_id_of

        async def open_stream() -> Any:
            with trio.fail_after(timeout):
                return await self.host.new_stream(peer_id_of(peer_id), [TProtocol(protocol)])

        return RawStream(self, self.call(open_stream))

    def request(
        self,
        peer_id: str,
        protocol: str,
        items: Sequence[bytes],
        timeout: float = 10.0,
        *,
        half_close: bool = False,
    ) -> list[bytes]:
        """Write each item as it is, then read frames until EOF, a reset or ``timeout``."""
        stream = self.open(peer_id, protocol, timeout)

        async def exchange() -> list[bytes]:
            try:
                for item in items:
                    await stream.stream.write(item)
                if half_close:
                    await stream.stream.close()
            except Exception:
                return []  # the victim reset us while we wrote: nothing came back
            return await _read_frames(stream.stream, timeout)

        try:
            return self.call(exchange)
        finally:
            stream.reset()

    def serve(self, protocol: str, handler: Callable[[Any], Awaitable[None]]) -> None:
        """Answer ``protocol`` with ``handler(stream)``, in the peer's loop (a hostile
        provider, chat partner...). The handler owns the stream; errors are swallowed."""
        from libp2p.custom_types import TProtocol

        async def guarded(stream: Any) -> None:
            try:
                await handler(stream)
            except Exception:
                with contextlib.suppress(Exception):
                    await stream.reset()

        async def register() -> None:
            self.host.set_stream_handler(TProtocol(protocol), guarded)

        self.call(register)

    def set_advert(self, advert: wire.Advert | None) -> None:
        """Publish ``advert`` now (None withdraws)."""
        self.callbacks.advert_value = advert

        async def republish() -> None:
            self.service.republish_advert()
            self.service.beat_now()  # figures of the new advert, not the zeros of none

        self.call(republish)

    def listed_with_free_memory(self, by: Any) -> bool:
        """Whether daemon ``by`` lists this peer with the free memory of a heartbeat sent
        since its advert was set: one sent before says 0 MB free, and until the next one
        arrives ``by`` finds this provider busy."""
        return any(
            x["peer_id"] == self.peer_id and (x.get("resources") or {}).get("free_memory_mb")
            for x in by.cli("peer", "list")["peers"]
        )

    def wait_connected(self, peer_id: str, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if peer_id in self.service.connected_peers():
                return
            time.sleep(0.05)
        raise AssertionError(f"the hostile peer never connected to {peer_id}")


async def read_job_message(stream: Any, timeout: float = 10.0) -> dict[str, Any] | None:
    """In a ``serve`` handler: the next job message from the victim as a dict, None at EOF."""
    with trio.fail_after(timeout):
        frame = await wire.read_frame(stream, MAX_FRAME)
    return None if frame is None else open_job(frame)


async def send_job_message(stream: Any, identity: Identity, payload: dict[str, Any]) -> None:
    """In a ``serve`` handler: one signed job message with exactly these fields."""
    await stream.write(seal_job(identity, payload))


def provider_advert(
    peer: HostilePeer,
    *,
    channel: str = "nunet-test",
    executors: tuple[str, ...] = ("process",),
    prices: dict[str, float] | None = None,
) -> wire.Advert:
    """A plausible provider advert for ``peer`` (the network layer fills addrs, seq, times)."""
    return wire.Advert(
        peer_id=peer.peer_id,
        channel=channel,
        cpu_mhz=8000,
        ram_mb=16000,
        disk_mb=50000,
        prices=prices if prices is not None else {"low": 1.0, "moderate": 2.5, "high": 6.0},
        executors=executors,
        frameworks=FRAMEWORKS,
        version="hostile",
    )
