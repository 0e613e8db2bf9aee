"""The overlay's rules and bounds without a network (issue 25 §2): which subnets and members
make an overlay, which packets are well-formed, and the carriage's per-member queue and rate
bounds (a fake stream and device; trio's mock clock, so no timing is measured)."""

from __future__ import annotations

import struct
from typing import Any

import pytest
import trio
import trio.testing

from engine import api
from engine.domain.overlay_packets import MTU, OverlayError, check_members, endpoints
from engine.network.overlay import ACCEPTED, Bucket, OverlayCarrier
from tests.overlay_helpers import udp_packet

A, B = "12D3KooWA", "12D3KooWB"


def test_members_make_an_overlay_or_say_why() -> None:
    net, own, others = check_members("10.7.1.0/24", "10.7.1.1", [(A, "10.7.1.1"), (B, "10.7.1.2")])
    assert str(net) == "10.7.1.0/24" and own == bytes([10, 7, 1, 1])
    assert others == {B: bytes([10, 7, 1, 2])}
    wrong = {
        ("8.8.8.0/24", "8.8.8.1"): "private /24",
        ("10.7.0.0/16", "10.7.1.1"): "private /24",
        ("10.7.1.0/24", "10.7.2.1"): "not a host address",
        ("10.7.1.0/24", "10.7.1.255"): "not a host address",
        ("10.7.1.0/24", "10.7.1.3"): "not among the members",
    }
    for (subnet, address), words in wrong.items():
        with pytest.raises(OverlayError, match=words):
            check_members(subnet, address, [(A, "10.7.1.1"), (B, "10.7.1.2")])
    with pytest.raises(OverlayError, match="two members"):
        check_members("10.7.1.0/24", "10.7.1.1", [(A, "10.7.1.1"), (B, "10.7.1.1")])
    with pytest.raises(OverlayError, match="one per provider"):
        check_members(
            "10.7.1.0/24", "10.7.1.1", [(A, "10.7.1.1"), (B, "10.7.1.2"), (B, "10.7.1.3")]
        )
    with pytest.raises(OverlayError, match="another member"):
        check_members("10.7.1.0/24", "10.7.1.1", [(A, "10.7.1.1")])


def test_only_well_formed_ipv4_packets_have_endpoints() -> None:
    packet = udp_packet("10.7.1.1", "10.7.1.2", b"x")
    assert endpoints(packet) == (bytes([10, 7, 1, 1]), bytes([10, 7, 1, 2]))
    assert endpoints(packet[:19]) is None  # shorter than a header
    assert endpoints(bytes([0x60]) + packet[1:]) is None  # IPv6
    assert endpoints(packet + b"extra") is None  # the header's length lies
    big = udp_packet("10.7.1.1", "10.7.1.2", bytes(MTU))
    assert endpoints(big) is None  # over the MTU


class FakeStream:
    def __init__(self) -> None:
        self.written: list[bytes] = []
        self.answered = False

    async def write(self, data: bytes) -> None:
        self.written.append(data)

    async def read(self, n: int) -> bytes:
        if not self.answered:
            self.answered = True
            return ACCEPTED
        await trio.sleep_forever()
        raise AssertionError

    async def reset(self) -> None:
        pass


class FakeLink:
    def __init__(self) -> None:
        self.stream = FakeStream()

    async def open_stream(self, peer_id: str, protocol: str) -> Any:
        assert peer_id == B
        return self.stream


class FakeDevice:
    """Sends ``count`` packets of ``size`` bytes to B at once, then nothing."""

    def __init__(self, count: int, size: int) -> None:
        payload = bytes(size - 28)
        self.packets = [udp_packet("10.7.1.1", "10.7.1.2", payload) for _ in range(count)]
        self.packets.append(udp_packet("10.7.1.1", "10.7.2.9", b"elsewhere"))
        self.packets.append(udp_packet("10.7.1.5", "10.7.1.2", b"forged"))

    async def read(self) -> bytes:
        if self.packets:
            return self.packets.pop(0)
        await trio.sleep_forever()
        raise AssertionError

    def write(self, packet: bytes) -> bool:
        return True


def sent_packets(stream: FakeStream) -> list[bytes]:
    data, packets = b"".join(stream.written[1:]), []  # after the hello
    while data:
        (size,) = struct.unpack_from("!H", data)
        packets.append(data[2 : 2 + size])
        data = data[2 + size :]
    return packets


def test_the_queue_and_the_rate_are_bounded_per_member() -> None:
    link = FakeLink()
    rate, burst, queue = 10_000, 20_000, 50_000

    async def main() -> None:
        carrier = OverlayCarrier(
            lambda: link, rate_bytes_s=rate, burst_bytes=burst, queue_bytes=queue
        )
        members = (
            api.OverlayMember(peer_id=A, address="10.7.1.1"),
            api.OverlayMember(peer_id=B, address="10.7.1.2"),
        )
        async with trio.open_nursery() as nursery:
            # 200 packets of 1000 bytes at once: 50 fit the queue, the rest are dropped.
            await nursery.start(
                carrier.carry, "job", "10.7.1.0/24", "10.7.1.1", members, FakeDevice(200, 1000)
            )
            await trio.sleep(1.0)
            figures = carrier.stats("job")[0]
            # In the first second: the burst and a second's rate, no more.
            assert figures.bytes_out <= burst + rate
            assert figures.dropped_out == 150 + 2  # past the queue; elsewhere; forged
            await trio.sleep(10.0)
            figures = carrier.stats("job")[0]
            assert figures.bytes_out == figures.packets_out * 1000 == 50_000
            nursery.cancel_scope.cancel()
        assert len(sent_packets(link.stream)) == 50
        assert carrier.stats("job")[0].bytes_out == 50_000  # kept after the end

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


def test_the_bucket_spends_what_it_has() -> None:
    async def main() -> None:
        bucket = Bucket(rate=100.0, burst=200.0)
        assert bucket.allow(150) and not bucket.allow(100)
        assert bucket.wait(100) == pytest.approx(0.5)
        await trio.sleep(0.5)
        assert bucket.allow(100)

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
