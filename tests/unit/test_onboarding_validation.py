"""Onboarding rules: every problem found at once, each under its field, in exact words."""

from __future__ import annotations

import pytest

from engine.api import Capacity, GpuInfo
from engine.domain.machines import CPU_ONLY, GPU_MACHINE
from engine.errors import EngineError, ValidationReport
from engine.onboarding import (
    check_channel,
    format_mb,
    format_mhz,
    minimums_for,
    validate_onboarding,
)

TESTNET = (
    "addr_test1qz2fxv2umyhttkxyxp8x0dlpdt3k6cwng5pxj3jhsydzer3n0d3vllmyqwsx5wktcd8cc3sq835lu7"
    "drv2xwl2wywfgs68faae"
)
MAINNET = (
    "addr1qx2fxv2umyhttkxyxp8x0dlpdt3k6cwng5pxj3jhsydzer3n0d3vllmyqwsx5wktcd8cc3sq835lu7"
    "drv2xwl2wywfgse35a3x"
)
BIG_GPU = GpuInfo(index=0, vendor="nvidia", name="RTX 3090", vram_mb=24576, uuid="GPU-big")
SMALL_GPU = GpuInfo(index=1, vendor="nvidia", name="GT 710", vram_mb=2048, uuid="GPU-small")
FULL = Capacity(
    view="full",
    cpu_cores=8,
    cpu_mhz=20_000,
    memory_mb=24_105,
    disk_mb=81_524,
    gpus=(BIG_GPU, SMALL_GPU),
)
AVAILABLE = Capacity(
    view="available", cpu_cores=8, cpu_mhz=20_000, memory_mb=23_828, disk_mb=81_524, gpus=FULL.gpus
)


def validate(
    *,
    memory_mb: int | None = 8_000,
    cpu_mhz: int | None = 4_000,
    address: str = TESTNET,
    channel: str = "nunet-test",
    cardano_node: bool = False,
    gpus: tuple[GpuInfo, ...] = (),
    available: Capacity = AVAILABLE,
) -> ValidationReport:
    return validate_onboarding(
        memory_mb=memory_mb,
        cpu_mhz=cpu_mhz,
        address=address,
        channel=channel,
        cardano_node=cardano_node,
        gpus=gpus,
        full=FULL,
        available=available,
    )


def with_disk(disk_mb: int) -> Capacity:
    return Capacity(
        view="available", cpu_cores=8, cpu_mhz=20_000, memory_mb=23_828, disk_mb=disk_mb
    )


def test_a_sound_cpu_only_request_passes() -> None:
    report = validate()
    assert report.ok, report.problems


def test_a_sound_gpu_request_passes() -> None:
    assert validate(memory_mb=16_000, cpu_mhz=8_000, gpus=(BIG_GPU,)).ok


def test_too_much_memory_says_by_how_much() -> None:
    report = validate(memory_mb=64_000)
    assert report.for_field("memory_mb") == [
        "memory: 64,000 MB requested but only 23,828 MB is available "
        "(64,000 \u2212 23,828 = 40,172 MB too much)"
    ]


def test_too_much_cpu_says_by_how_much() -> None:
    assert validate(cpu_mhz=20_001).for_field("cpu_mhz") == [
        "cpu: 20,001 MHz requested but only 20,000 MHz is available "
        "(20,001 \u2212 20,000 = 1 MHz too much)"
    ]


def test_exactly_what_is_available_is_fine() -> None:
    assert validate(memory_mb=23_828, cpu_mhz=20_000).ok


def test_below_the_cpu_only_minimums() -> None:
    report = validate(memory_mb=2_048, cpu_mhz=1_500)
    assert report.for_field("cpu_mhz") == [
        "cpu: 1,500 MHz is below the 2,000 MHz minimum for a CPU-only machine (500 MHz short)"
    ]
    assert report.for_field("memory_mb") == [
        "memory: 2,048 MB is below the 4,096 MB (4 GB) minimum for a CPU-only machine "
        "(2,048 MB short)"
    ]


def test_exact_minimums_pass() -> None:
    assert validate(memory_mb=CPU_ONLY.memory_mb, cpu_mhz=CPU_ONLY.cpu_mhz).ok
    assert validate(
        memory_mb=GPU_MACHINE.memory_mb, cpu_mhz=GPU_MACHINE.cpu_mhz, gpus=(BIG_GPU,)
    ).ok
    assert validate(available=with_disk(CPU_ONLY.disk_mb)).ok


def test_one_below_a_minimum_fails() -> None:
    report = validate(memory_mb=CPU_ONLY.memory_mb - 1, cpu_mhz=CPU_ONLY.cpu_mhz - 1)
    assert report.for_field("cpu_mhz")[0].endswith("(1 MHz short)")
    assert report.for_field("memory_mb")[0].endswith("(1 MB short)")
    assert validate(available=with_disk(CPU_ONLY.disk_mb - 1)).for_field("disk")


def test_selecting_a_gpu_raises_the_floor() -> None:
    report = validate(memory_mb=6_000, cpu_mhz=2_500, gpus=(BIG_GPU,))
    assert report.for_field("cpu_mhz") == [
        "cpu: 2,500 MHz is below the 3,000 MHz minimum for a GPU machine (500 MHz short)"
    ]
    assert report.for_field("memory_mb") == [
        "memory: 6,000 MB is below the 8,192 MB (8 GB) minimum for a GPU machine (2,192 MB short)"
    ]
    # The same numbers are fine on a CPU-only machine.
    assert validate(memory_mb=6_000, cpu_mhz=2_500).ok


def test_small_gpu_vram() -> None:
    report = validate(memory_mb=16_000, cpu_mhz=8_000, gpus=(BIG_GPU, SMALL_GPU))
    assert report.for_field("gpus") == [
        "gpus: GPU 1 (GT 710) has 2,048 MB of VRAM, below the 4,096 MB (4 GB) minimum per GPU "
        "(2,048 MB short)"
    ]


def test_a_gpu_not_on_this_machine() -> None:
    stranger = GpuInfo(index=5, vendor="amd", name="MI250", vram_mb=65536, uuid="GPU-x")
    report = validate(memory_mb=16_000, cpu_mhz=8_000, gpus=(stranger,))
    assert report.for_field("gpus") == ["gpus: GPU 5 (MI250) GPU-x is not on this machine"]


def test_disk_minimums() -> None:
    assert validate(available=with_disk(8_000)).for_field("disk") == [
        "disk: 8,000 MB free is below the 10,240 MB (10 GB) minimum for a CPU-only machine "
        "(2,240 MB short); free up space"
    ]
    gpu_report = validate(
        memory_mb=16_000, cpu_mhz=8_000, gpus=(BIG_GPU,), available=with_disk(40_000)
    )
    assert gpu_report.for_field("disk") == [
        "disk: 40,000 MB free is below the 51,200 MB (50 GB) minimum for a GPU machine "
        "(11,200 MB short); free up space"
    ]


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (None, "memory: required (a whole number of MB)"),
        (0, "memory: must be a positive number of MB, not 0"),
        (-5, "memory: must be a positive number of MB, not -5"),
    ],
)
def test_memory_must_be_a_positive_number(value: int | None, message: str) -> None:
    assert validate(memory_mb=value).for_field("memory_mb") == [message]


def test_cpu_must_be_given() -> None:
    assert validate(cpu_mhz=None).for_field("cpu_mhz") == ["cpu: required (a whole number of MHz)"]


def test_cardano_node_needs_more() -> None:
    report = validate(memory_mb=8_000, cpu_mhz=4_000, cardano_node=True)
    assert report.for_field("cardano_node") == [
        "cardano_node: running a Cardano node (-C) needs at least 10,000 MB and 6,000 MHz "
        "onboarded; memory is 8,000 MB (2,000 MB short) and cpu is 4,000 MHz (2,000 MHz short)"
    ]
    only_cpu = validate(memory_mb=12_000, cpu_mhz=5_000, cardano_node=True)
    message = only_cpu.for_field("cardano_node")[0]
    assert "cpu is 5,000 MHz (1,000 MHz short)" in message
    assert "memory is" not in message
    assert validate(memory_mb=10_000, cpu_mhz=6_000, cardano_node=True).ok


@pytest.mark.parametrize(
    ("channel", "fragment"),
    [
        ("", "channel: required"),
        ("Nunet-Test", "must be lower case (nunet-test, not Nunet-Test)"),
        ("a" * 65, "65 characters, at most 64"),
        ("nunet test", "not ' '"),
        ("nunet/test", "not '/'"),
    ],
)
def test_bad_channels(channel: str, fragment: str) -> None:
    messages = validate(channel=channel).for_field("channel")
    assert len(messages) == 1
    assert fragment in messages[0]


def test_good_channels() -> None:
    for channel in ("nunet-test", "nunet.team_2", "a" * 64):
        assert check_channel(channel) is None


def test_address_is_checked_for_the_channels_network() -> None:
    assert validate(address="").for_field("address") == [
        "address: is required: paste your addr_test1… payment address"
    ]
    assert validate(address=MAINNET).for_field("address") == [
        "address: this is a mainnet address; channel nunet-test is a test channel, "
        "use an addr_test1… address"
    ]
    assert validate(address=MAINNET, channel="nunet").ok
    assert validate(address=TESTNET, channel="nunet").for_field("address")
    assert validate(address=TESTNET[:-1]).for_field("address") == [
        "address: checksum does not match: a character is mistyped, missing or extra"
    ]


def test_every_problem_is_reported_at_once() -> None:
    report = validate(
        memory_mb=64_000,
        cpu_mhz=1_000,
        address="addr1nope",
        channel="Bad Channel",
        cardano_node=True,
        gpus=(SMALL_GPU,),
        available=with_disk(100),
    )
    assert {p.field for p in report.problems} == {
        "memory_mb",
        "cpu_mhz",
        "address",
        "channel",
        "cardano_node",
        "gpus",
        "disk",
    }
    with pytest.raises(EngineError) as caught:
        report.raise_if_failed()
    assert caught.value.problems == report.problems
    assert "memory: 64,000 MB requested" in caught.value.message


def test_minimums_table_and_formatting() -> None:
    assert minimums_for(()) is CPU_ONLY
    assert minimums_for((BIG_GPU,)) is GPU_MACHINE
    assert format_mb(1_234_567) == "1,234,567 MB"
    assert format_mhz(2_000) == "2,000 MHz"
