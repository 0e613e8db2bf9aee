"""Cost of one full GPU sample, per GPU, and the CPU a 1 Hz GPU view costs.

    .venv/bin/python bench/gpu_sample.py                 # the pynvml double, 1 and 8 GPUs
    .venv/bin/python bench/gpu_sample.py --real          # this machine's GPUs (NVML etc.)
    .venv/bin/python bench/gpu_sample.py --real --nvitop-python /tmp/nvitop-venv/bin/python

Goal (issue 4): the GPU screen refreshing at 1 Hz costs less CPU than nvitop at that rate.
With the double the NVML calls are Python stubs, so the figures are our own overhead
(snapshot building, caching, process table); with --real they include the driver's time.
nvitop wraps libnvidia-ml directly and cannot run on the double: give --nvitop-python (a
throwaway venv with `pip install nvitop`, never a project dependency) on a GPU machine.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import REPO

sys.path.insert(0, str(REPO))

from engine.resources.gpu.sampler import GpuSampler
from tests.doubles.fake_pynvml import FakeNvml, FakeProcess

# The same fields our snapshot holds, read the way nvitop's device panel reads them.
NVITOP_SCRIPT = r"""
import sys, time
from nvitop import Device
devices = Device.all()
def sample():
    for d in devices:
        d.memory_info(); d.utilization_rates(); d.temperature(); d.power_usage()
        d.power_limit(); d.name(); d.uuid()
        for p in d.processes().values():
            p.gpu_memory(); p.name()
n = int(sys.argv[1])
sample()
began = time.perf_counter(); cpu = time.process_time()
for _ in range(n):
    sample()
wall = time.perf_counter() - began; cpu = time.process_time() - cpu
print(len(devices), wall / n * 1e6, cpu / n * 1e6)
"""


def fake(count: int) -> FakeNvml:
    nvml = FakeNvml.with_gpus(count, record_calls=False)
    for i, gpu in enumerate(nvml.gpus):
        gpu.processes = [
            FakeProcess(pid=1000 + 10 * i + j, name=f"/usr/bin/python{j}") for j in range(3)
        ]
    return nvml


def per_sample_us(sampler: GpuSampler, runs: int) -> tuple[float, float, int]:
    """(median wall µs, mean CPU µs) per full sample after a warm-up, and GPUs seen."""
    gpus = len(sampler.sample().gpus)
    walls: list[float] = []
    cpu_began = time.process_time()
    for _ in range(runs):
        began = time.perf_counter()
        sampler.sample()
        walls.append((time.perf_counter() - began) * 1e6)
    cpu = (time.process_time() - cpu_began) / runs * 1e6
    return statistics.median(walls), cpu, gpus


def report(label: str, wall: float, cpu: float, gpus: int) -> None:
    per_gpu = wall / max(gpus, 1)
    print(
        f"{label}: {gpus} GPU(s), {wall:,.0f} µs per full sample "
        f"({per_gpu:,.0f} µs per GPU), CPU {cpu:,.0f} µs per sample "
        f"= {cpu / 1e6 * 100:.3f}% of a core at 1 Hz"
    )


def engine_poll_cpu(seconds: float, gpus: int) -> None:
    """The whole path the GPU screen uses: GetGpuStatus once a second via the facade."""
    from engine.api import GetGpuStatus
    from engine.facade import Engine
    from engine.probes import HostProbes
    from tests.conftest import make_home

    empty = Path(tempfile.mkdtemp(prefix="nunet-bench-sys-"))
    probes = HostProbes(
        gpu_sampler=lambda: GpuSampler(
            fake(gpus), sysfs_root=empty, kfd=empty / "kfd", proc_root=empty
        )
    )
    home = make_home(Path(tempfile.mkdtemp(prefix="nunet-bench-")) / "home")
    with Engine(home, probes=probes) as eng:
        time.sleep(1.0)
        idle_began = time.process_time()
        time.sleep(seconds)
        idle = time.process_time() - idle_began
        began = time.process_time()
        for _ in range(int(seconds)):
            eng.call_blocking(GetGpuStatus())
            time.sleep(1.0)
        polled = time.process_time() - began
    print(
        f"engine + 1 Hz GetGpuStatus ({gpus} GPUs, {seconds:.0f} s): process CPU "
        f"{polled / seconds * 100:.3f}% of a core (engine idle: {idle / seconds * 100:.3f}%), "
        f"so the GPU view adds {(polled - idle) / seconds * 100:.3f}%"
    )


def nvitop(python: str, runs: int) -> None:
    done = subprocess.run(
        [python, "-c", NVITOP_SCRIPT, str(runs)], capture_output=True, text=True, timeout=600
    )
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["?"])[-1]
        print(f"nvitop: could not sample here: {last}")
        return
    count, wall, cpu = done.stdout.split()
    if int(count) == 0:
        print("nvitop: installed, but it sees no NVIDIA GPU here (no driver): nothing to compare")
        return
    report("nvitop (same fields)", float(wall), float(cpu), int(count))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--real", action="store_true", help="sample this machine's GPUs")
    parser.add_argument("--runs", type=int, default=2000)
    parser.add_argument("--seconds", type=float, default=10.0, help="1 Hz engine poll length")
    parser.add_argument("--nvitop-python", help="interpreter of a venv with nvitop installed")
    args = parser.parse_args()
    if args.real:
        with GpuSampler() as sampler:
            wall, cpu, gpus = per_sample_us(sampler, min(args.runs, 200))
        report("nunet-tui GpuSampler (real)", wall, cpu, gpus)
    else:
        empty = Path(tempfile.mkdtemp(prefix="nunet-bench-sys-"))
        for count in (1, 8):
            with GpuSampler(
                fake(count), sysfs_root=empty, kfd=empty / "kfd", proc_root=empty
            ) as sampler:
                wall, cpu, gpus = per_sample_us(sampler, args.runs)
            report("nunet-tui GpuSampler (double, 3 processes per GPU)", wall, cpu, gpus)
        engine_poll_cpu(args.seconds, 8)
    if args.nvitop_python:
        nvitop(args.nvitop_python, min(args.runs, 200))
    elif not args.real:
        print(
            "nvitop: not compared on the double (it wraps libnvidia-ml itself); run "
            "--real --nvitop-python VENV/bin/python on a machine with an NVIDIA GPU"
        )


if __name__ == "__main__":
    main()
