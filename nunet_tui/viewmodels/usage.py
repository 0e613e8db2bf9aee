"""A job's live use as words (issue 22 §3): the figures beside the job view's sparklines and
the ``usage`` line of ``job show``, from the provider's latest sample (api.UsageSample)."""

from __future__ import annotations

from engine.api import UsageSample

WAITING = "waiting for the provider's first sample"


def cpu_text(sample: UsageSample) -> str:
    """``1.4 cores``: how many cores the job kept busy (1.0: one core all the time)."""
    return f"{sample.cpu_cores:.1f} cores"


def ram_text(sample: UsageSample) -> str:
    """``812 MB of 4,096``: resident memory, and the job's limit where it is known."""
    if sample.ram_limit_mb:
        return f"{sample.ram_mb:,} MB of {sample.ram_limit_mb:,}"
    return f"{sample.ram_mb:,} MB"


def gpu_text(sample: UsageSample) -> str:
    """``63 % · 5.1 GB`` of the job's GPUs (their mean load, their memory in use)."""
    if not sample.gpus:
        return "no GPU"
    load = "n/a" if sample.gpu_percent is None else f"{sample.gpu_percent:.0f} %"
    if sample.gpu_mem_mb is None:
        return load
    return f"{load} · {sample.gpu_mem_mb / 1024:.1f} GB"


def usage_line(sample: UsageSample | None) -> str:
    """``CPU 1.4 cores · RAM 812 MB of 4,096 · GPU 63 % · 5.1 GB``."""
    if sample is None:
        return WAITING
    parts = [f"CPU {cpu_text(sample)}", f"RAM {ram_text(sample)}"]
    parts.append(f"GPU {gpu_text(sample)}" if sample.gpus else "no GPU")
    return " · ".join(parts)


__all__ = ["WAITING", "cpu_text", "gpu_text", "ram_text", "usage_line"]
