"""What a job used, sampled about once a second, and what that costs.

Units:
- wall time: seconds from start to exit, less the time a checkpoint held the job frozen;
- CPU time: seconds of CPU (user + system, all threads and children);
- MTicks (NuNet's DMS unit): millions of CPU clock cycles, CPU seconds x the core's MHz. A job
  that keeps one 2,000 MHz core busy for 10 s used 20,000 MTicks, whatever the number of cores;
- RAM: MB-seconds, the resident memory integrated over time (trapezoids between samples),
  and the peak;
- network: bytes received and sent (containers: from docker stats; processes: not measurable
  per process without privileges, so None);
- GPU time: seconds the job held a GPU (a GPU job holds its GPUs for its whole run).
What a job costs is not worked out from these samples: it is the billing formula's charge
(oracle_client/billing.py) of the job's price, minimum charge and lock over its machine time
from its start to its end, the figure its receipt signs and its escrow settles
(``charge_units``, ``metered_units``; issue 20 §9: the metering's own figure, price x sampled
wall time with neither minimum nor cap, disagreed with the receipt's).
"""

from __future__ import annotations

import time
from dataclasses import dataclass


@dataclass(frozen=True)
class Usage:
    wall_s: float = 0.0
    cpu_s: float = 0.0
    mticks: float = 0.0
    ram_mb_s: float = 0.0
    peak_ram_mb: float = 0.0
    net_rx_bytes: int | None = None
    net_tx_bytes: int | None = None
    gpu_s: float = 0.0
    samples: int = 0
    frozen_s: float = 0.0  # held frozen by checkpoints: not in wall_s, nor in what bills


class Meter:
    """Integrates samples; ``sample`` takes cumulative CPU seconds and current RAM."""

    def __init__(self, *, mhz_per_core: float, gpus: int = 0) -> None:
        self.mhz_per_core = mhz_per_core
        self.gpus = gpus
        self.started: float | None = None
        self.stopped: float | None = None
        self._last_at: float | None = None
        self._last_ram = 0.0
        self.cpu_s = 0.0
        self.ram_mb_s = 0.0
        self.peak_ram_mb = 0.0
        self.net_rx: int | None = None
        self.net_tx: int | None = None
        self.samples = 0
        # Time the job spent frozen (a checkpoint pauses it): it ran nothing, so it is not
        # its wall time (issue 20: a checkpoint that hung left a job frozen for minutes).
        self.frozen_s = 0.0
        self._frozen_at: float | None = None

    def start(self, now: float | None = None) -> None:
        self.started = self._last_at = time.monotonic() if now is None else now

    def freeze(self, now: float | None = None) -> None:
        if self._frozen_at is None and self.stopped is None:
            self._frozen_at = time.monotonic() if now is None else now

    def thaw(self, now: float | None = None) -> None:
        if self._frozen_at is not None:
            at = time.monotonic() if now is None else now
            self.frozen_s += max(0.0, at - self._frozen_at)
            self._frozen_at = None

    def sample(
        self,
        *,
        cpu_s: float,
        ram_mb: float,
        net_rx: int | None = None,
        net_tx: int | None = None,
        now: float | None = None,
    ) -> None:
        at = time.monotonic() if now is None else now
        if self._last_at is not None and at > self._last_at:
            self.ram_mb_s += (self._last_ram + ram_mb) / 2 * (at - self._last_at)
        self._last_at, self._last_ram = at, ram_mb
        self.cpu_s = max(self.cpu_s, cpu_s)  # cumulative: a late sample never lowers it
        self.peak_ram_mb = max(self.peak_ram_mb, ram_mb)
        if net_rx is not None:
            self.net_rx = max(self.net_rx or 0, net_rx)
        if net_tx is not None:
            self.net_tx = max(self.net_tx or 0, net_tx)
        self.samples += 1

    def reading(self) -> tuple[float, float, float] | None:
        """The latest sample as (monotonic time, cumulative CPU seconds, RAM MB); None
        before the first (live figures: engine/jobs/live_usage.py)."""
        if self.samples == 0 or self._last_at is None:
            return None
        return self._last_at, self.cpu_s, self._last_ram

    def stop(self, now: float | None = None) -> None:
        if self.stopped is None:
            at = time.monotonic() if now is None else now
            self.thaw(at)  # ended while frozen (killed at its time limit): no more to bill
            self.stopped = at

    def usage(self, now: float | None = None) -> Usage:
        if self.started is None:
            return Usage()
        end = self.stopped if self.stopped is not None else (now or time.monotonic())
        frozen = self.frozen_s + (
            max(0.0, end - self._frozen_at) if self._frozen_at is not None else 0.0
        )
        wall = max(0.0, end - self.started - frozen)
        return Usage(
            wall_s=round(wall, 3),
            cpu_s=round(self.cpu_s, 3),
            mticks=round(self.cpu_s * self.mhz_per_core, 1),
            ram_mb_s=round(self.ram_mb_s, 1),
            peak_ram_mb=round(self.peak_ram_mb, 1),
            net_rx_bytes=self.net_rx,
            net_tx_bytes=self.net_tx,
            gpu_s=round(wall * self.gpus, 3) if self.gpus else 0.0,
            samples=self.samples,
            frozen_s=round(frozen, 3),
        )


def host_mhz_per_core() -> float:
    """This machine's nominal MHz per core (the MTicks factor); 2,000 when unknown."""
    try:
        import psutil

        freq = psutil.cpu_freq()
        if freq is not None and (freq.max or freq.current):
            return float(freq.max or freq.current)
    except Exception:  # no cpufreq in containers and VMs: fall back
        pass
    return 2000.0
