"""Fuzzing the decoders: whatever bytes a peer sends, the answer is a value or a WireError."""

from __future__ import annotations

import contextlib

import msgspec
import trio
from hypothesis import given, settings
from hypothesis import strategies as st
from nacl.signing import SigningKey

from engine.domain import wire
from engine.identity import Identity

ALICE = Identity(SigningKey(b"\x01" * 32))


class BytesStream:
    """An in-memory stream that hands out data in the chunk sizes asked for."""

    def __init__(self, data: bytes, chunk: int = 7) -> None:
        self.data = data
        self.chunk = chunk
        self.reads: list[int] = []
        self.was_reset = False

    async def read(self, n: int | None = None) -> bytes:
        assert n is not None
        self.reads.append(n)
        take = min(n, self.chunk)
        out, self.data = self.data[:take], self.data[take:]
        return out

    async def write(self, data: bytes) -> None:
        self.data += data

    async def reset(self) -> None:
        self.was_reset = True


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=2048))
def test_chat_decoder_never_crashes(data: bytes) -> None:
    with contextlib.suppress(wire.WireError):
        wire.decode_chat(data)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=4096), st.sampled_from(["advert", "heartbeat"]))
def test_envelope_decoder_never_crashes(data: bytes, kind: wire.Kind) -> None:
    schema = wire.Advert if kind == "advert" else wire.Heartbeat
    with contextlib.suppress(wire.WireError):
        wire.open_envelope(data, kind, schema)


@settings(max_examples=200, deadline=None)
@given(
    st.fixed_dictionaries(
        {
            "kind": st.sampled_from(["advert", "heartbeat", "x"]),
            "signer": st.one_of(st.text(max_size=60), st.just(ALICE.peer_id)),
            "payload": st.binary(max_size=300),
            "sig": st.binary(max_size=80),
            "v": st.integers(min_value=-3, max_value=3),
        }
    )
)
def test_structured_envelopes_never_crash(fields: dict[str, object]) -> None:
    data = msgspec.msgpack.encode(fields)
    with contextlib.suppress(wire.WireError):
        wire.open_envelope(data, "advert", wire.Advert)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=64))
def test_varint_decoder_never_crashes(data: bytes) -> None:
    try:
        value, used = wire.decode_varint(data)
    except wire.Malformed:
        return
    assert wire.encode_varint(value) == data[:used]


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=600), st.integers(min_value=1, max_value=64))
def test_read_frame_never_crashes_or_overreads(data: bytes, chunk: int) -> None:
    stream = BytesStream(data, chunk)

    async def main() -> None:
        try:
            while await wire.read_frame(stream, max_size=100) is not None:
                pass
        except wire.WireError:
            assert stream.was_reset
        assert all(n <= 100 for n in stream.reads)

    trio.run(main)


def test_frames_round_trip_and_oversize_is_refused() -> None:
    async def main() -> None:
        stream = BytesStream(b"", chunk=3)
        await wire.write_frame(stream, b"hello", 100)
        await wire.write_frame(stream, b"", 100)
        assert await wire.read_frame(stream, 100) == b"hello"
        assert await wire.read_frame(stream, 100) == b""
        assert await wire.read_frame(stream, 100) is None
        big = BytesStream(wire.encode_varint(10_000_000) + b"x" * 50)
        try:
            await wire.read_frame(big, 1000)
        except wire.FrameTooLarge:
            assert big.was_reset and big.reads == [1, 1, 1, 1]
        else:
            raise AssertionError("oversized frame accepted")

    trio.run(main)


@given(st.text(max_size=200), st.integers(min_value=0, max_value=2**62))
def test_valid_chat_frames_round_trip(text: str, seq: int) -> None:
    message = wire.ChatText(conversation="c", seq=seq, text=text, at=1.0)
    assert wire.decode_chat(wire.encode_chat(message)) == message
