"""Display helpers: numbers, peer ids, node states and meters as Textual ``Content``.

Everything that comes from the engine or a peer is untrusted text. These helpers only ever
build ``Content`` from plain strings plus a style (``Content.assemble``), never from markup, so
a ``[bold]`` inside a hostname is shown literally and control codes are stripped.
"""

from __future__ import annotations

from textual.content import Content

from engine.api import Capacity, Check, GpuInfo, Onboarding

ELLIPSIS = "…"
TIMES = "\u00d7"  # the multiplication sign, as in "2 x 2,500 MHz"


def safe(text: object) -> str:
    """Untrusted text made harmless to print: control characters (ESC, BEL, CR...) become
    visible ``\\x1b``-style escapes; everything else, brackets included, stays as it is."""
    return "".join(ch if ch.isprintable() or ch == " " else f"\\x{ord(ch):02x}" for ch in str(text))


def short_peer_id(peer_id: str, head: int = 8, tail: int = 4) -> str:
    """``12D3KooW…x9Fq``: enough to tell peers apart at a glance."""
    peer_id = safe(peer_id)
    if len(peer_id) <= head + tail + 1:
        return peer_id
    return f"{peer_id[:head]}{ELLIPSIS}{peer_id[-tail:]}"


def thousands(value: float) -> str:
    """``16000`` → ``16,000`` (NuNet's CLI counts MB and MHz in whole numbers)."""
    return f"{round(value):,}"


def mb(value: int) -> str:
    return f"{thousands(value)} MB"


def mhz(value: int) -> str:
    return f"{thousands(value)} MHz"


def node_state(onboarding: Onboarding | None) -> Content:
    """The one-line state of a provider node, coloured by what it means."""
    if onboarding is None:
        return Content.assemble(("○ ", "$text-muted"), ("not onboarded", "bold"))
    if onboarding.state == "paused":
        return Content.assemble(
            ("◐ ", "$warning"),
            ("onboarded · paused", "bold $warning"),
            ("  not accepting jobs", "$text-muted"),
        )
    return Content.assemble(("● ", "$success"), ("onboarded · accepting jobs", "bold $success"))


def meter_bar(used: int, total: int, width: int) -> Content:
    """A bar of ``width`` cells: ``█`` for the share used, ``░`` for the rest."""
    width = max(width, 1)
    share = 0.0 if total <= 0 else min(max(used / total, 0.0), 1.0)
    filled = round(share * width)
    if used > 0 and filled == 0:
        filled = 1
    return Content.assemble(("█" * filled, "$accent"), ("░" * (width - filled), "$text-muted"))


def check_row(name: str, check: Check) -> tuple[Content, Content]:
    """(``✓ Docker engine``, ``reachable …``): a readiness check as a table row."""
    mark = ("✓ ", "bold $text-success") if check.ok else ("✗ ", "bold $text-error")
    return Content.assemble(mark, name), Content.styled(safe(check.detail), "$text-muted")


def gpu_line(gpu: GpuInfo) -> Content:
    """``0 NVIDIA RTX 3090  nvidia · 24,576 MB VRAM``."""
    return Content.assemble(
        (f"{gpu.index} ", "bold"),
        safe(gpu.name),
        (f"  {safe(gpu.vendor)} · {thousands(gpu.vram_mb)} MB VRAM", "$text-muted"),
    )


def capacity_summary(capacity: Capacity) -> str:
    """``2 cores · 5,000 MHz · 16,000 MB RAM · 20,000 MB disk``."""
    return (
        f"{capacity.cpu_cores} cores · {mhz(capacity.cpu_mhz)} · "
        f"{mb(capacity.memory_mb)} RAM · {mb(capacity.disk_mb)} disk"
    )
