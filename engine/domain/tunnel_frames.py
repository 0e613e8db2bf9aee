"""The tunnel protocol's wire format (``/nunet/tunnel/1.0.0``, see tunnel_provider.py): the signed
``TunnelOpen`` header and ``TunnelAnswer``, their bounds, and the shell frames that follow the
answer on a ``shell`` tunnel.

Separate because three parties speak it: the provider (tunnel_provider.py), the consumer's daemon
(tunnel_consumer.py) and the command line's terminal (nunet_tui/shell_relay.py frames the shell
end to end), and the last needs none of the relays or the node. The limits both sides hold to
(header size, answer deadline, tunnels per job, shell idle time) are here too.
"""

from __future__ import annotations

import struct
from typing import Annotated, Literal

import msgspec

from engine.domain import wire
from engine.domain.safe_paths import JobId
from engine.identity import Identity

# The longest an executor takes to reach a job's port for a tunnel (the Docker executor's
# forwarder, run by `docker exec` in the container): the executors' limit; the consumer waits
# longer for the answer (ANSWER_S).
JOB_CONNECT_S = 15.0

TUNNEL_PROTOCOL = "/nunet/tunnel/1.0.0"
KIND = "tunnel"
MAX_HEADER_BYTES = 16 * 1024  # a TunnelOpen with its command at the limits below
HEADER_S = 10.0  # for a stream to open, for its header to arrive, for an answer to be written
# For the provider's answer to a tunnel request: it answers once it reached the job's port,
# which takes its executor up to JOB_CONNECT_S (a busy Docker engine) - so the consumer waits
# longer than that. The command line waits longer still (nunet_tui/cli/job_tunnel.py).
ANSWER_S = JOB_CONNECT_S + 5.0
OPEN_S = HEADER_S + ANSWER_S  # a whole open_tunnel, at most
STREAMS_PER_JOB = 8  # tunnels open at once into one job
IDLE_S = 600.0  # a TCP tunnel with no byte either way this long is closed ([jobs] tunnel_idle_s)
SHELL_IDLE_S = 3600.0  # a shell left at its prompt
CHUNK = 64 * 1024
MAX_COMMAND_ARGS = 64
MAX_ARG_CHARS = 4096

# Shell frames (after the answer): a type byte, a 4-byte big-endian length, the payload.
SHELL_DATA = 0  # both ways: terminal bytes
SHELL_RESIZE = 1  # consumer -> provider: rows, cols (2 x u16)
SHELL_EOF = 2  # consumer -> provider: stdin closed
SHELL_EXIT = 3  # provider -> consumer: the exit status (i32; -1: unknown), then the end
SHELL_FRAME_MAX = CHUNK
_HEAD = struct.Struct(">BI")

Arg = Annotated[str, msgspec.Meta(max_length=MAX_ARG_CHARS)]
TermSize = Annotated[int, msgspec.Meta(ge=1, le=10_000)]


class TunnelOpen(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    v: int = 1
    job_id: JobId
    kind: Literal["tcp", "shell"]
    port: Annotated[int, msgspec.Meta(ge=0, le=65535)] = 0  # tcp
    command: Annotated[tuple[Arg, ...], msgspec.Meta(max_length=MAX_COMMAND_ARGS)] = ()  # shell
    rows: TermSize = 24
    cols: TermSize = 80
    term: Annotated[str, msgspec.Meta(max_length=64, pattern=r"^[A-Za-z0-9._+-]*$")] = "xterm"


class TunnelAnswer(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    v: int = 1
    ok: bool
    reason: Annotated[str, msgspec.Meta(max_length=1000)] = ""


_encoder = msgspec.msgpack.Encoder()
_open_decoder = msgspec.msgpack.Decoder(TunnelOpen)
_answer_decoder = msgspec.msgpack.Decoder(TunnelAnswer)


class TunnelError(Exception):
    """A tunnel header or answer we cannot accept."""


def seal(identity: Identity, message: TunnelOpen | TunnelAnswer) -> bytes:
    return wire.frame(wire.seal_payload(identity, KIND, _encoder.encode(message)))


def _open_envelope(data: bytes, signer: str) -> bytes:
    try:
        envelope = wire.open_payload(data, MAX_HEADER_BYTES)
    except wire.WireError as exc:
        raise TunnelError(str(exc)) from exc
    if envelope.kind != KIND:
        raise TunnelError(f"expected a tunnel header, got {envelope.kind[:40]!r}")
    if envelope.signer != signer:
        raise TunnelError("header signed by another peer than the one at the other end")
    return envelope.payload


def decode_open(data: bytes, signer: str) -> TunnelOpen:
    try:
        message = _open_decoder.decode(_open_envelope(data, signer))
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise TunnelError(f"bad tunnel header: {exc}") from exc
    if message.v != 1:
        raise TunnelError(f"unsupported tunnel version {message.v}")
    return message


def decode_answer(data: bytes, signer: str) -> TunnelAnswer:
    try:
        return _answer_decoder.decode(_open_envelope(data, signer))
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise TunnelError(f"bad tunnel answer: {exc}") from exc


def shell_frame(kind: int, payload: bytes = b"") -> bytes:
    return _HEAD.pack(kind, len(payload)) + payload


def resize_frame(rows: int, cols: int) -> bytes:
    return shell_frame(SHELL_RESIZE, struct.pack(">HH", min(rows, 65535), min(cols, 65535)))


def exit_frame(code: int | None) -> bytes:
    return shell_frame(SHELL_EXIT, struct.pack(">i", -1 if code is None else code))


class ShellFrames:
    """Shell frames out of a byte stream (bounded: a frame over SHELL_FRAME_MAX is an error)."""

    def __init__(self) -> None:
        self._buffer = bytearray()

    def feed(self, data: bytes) -> list[tuple[int, bytes]]:
        self._buffer += data
        frames = []
        while len(self._buffer) >= _HEAD.size:
            kind, size = _HEAD.unpack_from(self._buffer)
            if size > SHELL_FRAME_MAX or kind > SHELL_EXIT:
                raise TunnelError(f"bad shell frame (type {kind}, {size} bytes)")
            if len(self._buffer) < _HEAD.size + size:
                break
            frames.append((kind, bytes(self._buffer[_HEAD.size : _HEAD.size + size])))
            del self._buffer[: _HEAD.size + size]
        return frames
