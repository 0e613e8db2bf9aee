"""Whether an onboarding request can be accepted: one set of rules and messages.

The CLI and the TUI form (validating as the provider types) both call
``validate_onboarding`` and show its messages verbatim, so the wording lives here only.
Every problem is collected, each tied to the form field it belongs under.

Minimums follow NuNet's provider documentation: a CPU-only machine needs 2,000 MHz, 4 GB of
RAM and 10 GB of free disk; a GPU machine 3,000 MHz, 8 GB of RAM, 4 GB of VRAM per GPU and
50 GB of free disk. Running a Cardano node beside the DMS (-C) needs 10,000 MB and 6,000 MHz.
"""

from __future__ import annotations

import re

from engine.api import Capacity, GpuInfo
from engine.domain.machines import CPU_ONLY, GPU_MACHINE, Minimums
from engine.errors import FieldProblem, ValidationReport
from oracle_client.cardano.address import check_address, network_for_channel

MINUS = "\u2212"

CARDANO_NODE_MEMORY_MB = 10_000
CARDANO_NODE_CPU_MHZ = 6_000

CHANNEL_MAX_LENGTH = 64
_CHANNEL_CHARS = re.compile(r"[a-z0-9._-]+")


def minimums_for(gpus: tuple[GpuInfo, ...]) -> Minimums:
    """Offering any GPU makes this a GPU machine, with its higher floor."""
    return GPU_MACHINE if gpus else CPU_ONLY


def format_mb(value: int) -> str:
    """'64,000 MB': thousands separated, as in every onboarding message."""
    return f"{value:,} MB"


def format_mhz(value: int) -> str:
    return f"{value:,} MHz"


def _mb_with_gb(value: int) -> str:
    if value > 0 and value % 1024 == 0:
        return f"{value:,} MB ({value // 1024} GB)"
    return format_mb(value)


def validate_onboarding(
    *,
    memory_mb: int | None,
    cpu_mhz: int | None,
    address: str,
    channel: str,
    cardano_node: bool,
    gpus: tuple[GpuInfo, ...],
    full: Capacity,
    available: Capacity,
) -> ValidationReport:
    """Every reason the request cannot be onboarded, each under its field name:
    memory_mb, cpu_mhz, address, channel, cardano_node, gpus, disk."""
    floor = minimums_for(gpus)
    problems: list[FieldProblem] = []
    problems += _amount(
        "memory_mb", "memory", memory_mb, available.memory_mb, floor.memory_mb, floor, "MB"
    )
    problems += _amount("cpu_mhz", "cpu", cpu_mhz, available.cpu_mhz, floor.cpu_mhz, floor, "MHz")
    problems += _disk(available.disk_mb, floor)
    problems += _gpus(gpus, full, floor)
    if cardano_node:
        problems += _cardano_node(memory_mb, cpu_mhz)
    problems += _channel(channel)
    problems += _address(address, channel)
    return ValidationReport(tuple(problems))


def check_channel(channel: str) -> str | None:
    """None when ``channel`` is a valid channel name, otherwise why not."""
    if not channel:
        return "channel: required (for example nunet-test)"
    if len(channel) > CHANNEL_MAX_LENGTH:
        return f"channel: {len(channel)} characters, at most {CHANNEL_MAX_LENGTH} allowed"
    if channel != channel.lower():
        return f"channel: must be lower case ({channel.lower()}, not {channel})"
    if not _CHANNEL_CHARS.fullmatch(channel):
        bad = next(c for c in channel if not _CHANNEL_CHARS.fullmatch(c))
        return f"channel: only a-z, 0-9, '.', '_' and '-' are allowed, not {bad!r}"
    return None


def _amount(
    field: str,
    label: str,
    requested: int | None,
    available: int,
    minimum: int,
    floor: Minimums,
    unit: str,
) -> list[FieldProblem]:
    def fmt(value: int) -> str:
        return f"{value:,} {unit}"

    def fmt_min(value: int) -> str:
        return _mb_with_gb(value) if unit == "MB" else fmt(value)

    if requested is None or isinstance(requested, bool):
        return [FieldProblem(field, f"{label}: required (a whole number of {unit})")]
    if requested <= 0:
        message = f"{label}: must be a positive number of {unit}, not {requested}"
        return [FieldProblem(field, message)]
    problems: list[FieldProblem] = []
    if requested > available:
        excess = requested - available
        problems.append(
            FieldProblem(
                field,
                f"{label}: {fmt(requested)} requested but only {fmt(available)} is available "
                f"({requested:,} {MINUS} {available:,} = {fmt(excess)} too much)",
            )
        )
    if requested < minimum:
        problems.append(
            FieldProblem(
                field,
                f"{label}: {fmt(requested)} is below the {fmt_min(minimum)} minimum for "
                f"{floor.label} ({fmt(minimum - requested)} short)",
            )
        )
    return problems


def _disk(free_mb: int, floor: Minimums) -> list[FieldProblem]:
    if free_mb >= floor.disk_mb:
        return []
    return [
        FieldProblem(
            "disk",
            f"disk: {format_mb(free_mb)} free is below the {_mb_with_gb(floor.disk_mb)} minimum "
            f"for {floor.label} ({format_mb(floor.disk_mb - free_mb)} short); free up space",
        )
    ]


def _gpus(gpus: tuple[GpuInfo, ...], full: Capacity, floor: Minimums) -> list[FieldProblem]:
    present = {gpu.uuid for gpu in full.gpus}
    problems: list[FieldProblem] = []
    for gpu in gpus:
        name = f"GPU {gpu.index} ({gpu.name})"
        if gpu.uuid not in present:
            problems.append(FieldProblem("gpus", f"gpus: {name} {gpu.uuid} is not on this machine"))
        elif gpu.vram_mb < floor.vram_mb_per_gpu:
            short = floor.vram_mb_per_gpu - gpu.vram_mb
            problems.append(
                FieldProblem(
                    "gpus",
                    f"gpus: {name} has {format_mb(gpu.vram_mb)} of VRAM, below the "
                    f"{_mb_with_gb(floor.vram_mb_per_gpu)} minimum per GPU "
                    f"({format_mb(short)} short)",
                )
            )
    return problems


def _cardano_node(memory_mb: int | None, cpu_mhz: int | None) -> list[FieldProblem]:
    shortfalls: list[str] = []
    memory = memory_mb if memory_mb is not None and memory_mb > 0 else 0
    cpu = cpu_mhz if cpu_mhz is not None and cpu_mhz > 0 else 0
    if memory < CARDANO_NODE_MEMORY_MB:
        shortfalls.append(
            f"memory is {format_mb(memory)} ({format_mb(CARDANO_NODE_MEMORY_MB - memory)} short)"
        )
    if cpu < CARDANO_NODE_CPU_MHZ:
        shortfalls.append(
            f"cpu is {format_mhz(cpu)} ({format_mhz(CARDANO_NODE_CPU_MHZ - cpu)} short)"
        )
    if not shortfalls:
        return []
    return [
        FieldProblem(
            "cardano_node",
            f"cardano_node: running a Cardano node (-C) needs at least "
            f"{format_mb(CARDANO_NODE_MEMORY_MB)} and {format_mhz(CARDANO_NODE_CPU_MHZ)} "
            f"onboarded; {' and '.join(shortfalls)}",
        )
    ]


def _channel(channel: str) -> list[FieldProblem]:
    problem = check_channel(channel)
    return [FieldProblem("channel", problem)] if problem else []


def _address(address: str, channel: str) -> list[FieldProblem]:
    problem = check_address(address, network_for_channel(channel), channel=channel or None)
    if problem is None:
        return []
    # check_address speaks of "address ..." on its own; under the field label say it once.
    return [FieldProblem("address", f"address: {problem.removeprefix('address ')}")]
