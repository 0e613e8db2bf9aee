"""Run every real GPU check on this machine and print what it read.

    .venv/bin/python scripts/gpu_check.py [--samples N] [--in-container]

Meant for a machine with an NVIDIA GPU (it also runs on AMD, Intel or none and says what it
found): one-shot sample, a few 1 Hz samples through the long-lived sampler (NVML kept
initialised), the doctor, host capabilities, the container options and runtime preflight,
and, when a Docker engine answers and the framework image is present, the in-container probe.
Prints JSON sections; exits 0 unless a check itself crashed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engine import api
from engine.domain.ml_images import DEFAULT_ML_IMAGES
from engine.errors import EngineError
from engine.resources.gpu.capabilities import (
    container_capabilities,
    host_capabilities,
    probe_image_for,
)
from engine.resources.gpu.containers import (
    gpu_container_options,
    preflight_gpu_runtime,
)
from engine.resources.gpu.detect import detect_gpus
from engine.resources.gpu.doctor import run_doctor
from engine.resources.gpu.sampler import GpuSampler, sample_gpus
from engine.resources.readiness import probe_docker

failures = 0


def section(title: str, value: Any) -> None:
    print(f"== {title}")
    print(json.dumps(api.to_builtins(value), indent=2, ensure_ascii=False, default=str))
    sys.stdout.flush()


def guarded(title: str, fn: Any) -> Any:
    global failures
    try:
        value = fn()
    except EngineError as exc:
        section(title, {"error": exc.code, "message": exc.message})
        return None
    except Exception:
        failures += 1
        print(f"== {title}: CRASHED")
        traceback.print_exc(file=sys.stdout)
        return None
    section(title, value)
    return value


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=5)
    parser.add_argument("--in-container", action="store_true", help="force the container probe")
    args = parser.parse_args()

    gpus, reason = detect_gpus()
    section("detect_gpus", {"gpus": gpus, "reason": reason})
    status: api.GpuStatus | None = guarded("sample_gpus (one shot)", sample_gpus)

    def timed_samples() -> dict[str, Any]:
        costs: list[float] = []
        last: api.GpuStatus | None = None
        with GpuSampler() as sampler:
            for i in range(args.samples):
                began = time.perf_counter()
                last = sampler.sample()
                costs.append((time.perf_counter() - began) * 1e6)
                if i < args.samples - 1:
                    time.sleep(1.0)
        count = max(1, len(last.gpus) if last else 1)
        return {
            "samples": args.samples,
            "us_per_sample": [round(c) for c in costs],
            "us_per_gpu_after_first": round(sum(costs[1:]) / max(1, len(costs) - 1) / count),
            "last": last,
        }

    guarded(f"GpuSampler x{args.samples} at 1 Hz", timed_samples)
    guarded("doctor", lambda: run_doctor(gpus=gpus))
    if status is not None:
        guarded("host capabilities", lambda: host_capabilities(status))
    docker = probe_docker(os.environ)
    section("docker", docker.__dict__)
    vendors = sorted({g.vendor for g in gpus})
    for vendor in vendors:
        options = gpu_container_options(vendor)  # type: ignore[arg-type]
        section(f"container options ({vendor})", {k: repr(v) for k, v in options.items()})
        guarded(
            f"preflight ({vendor})",
            lambda v=vendor: preflight_gpu_runtime(v, docker) or "ok",  # type: ignore[misc]
        )
        image = probe_image_for(vendor, DEFAULT_ML_IMAGES)  # type: ignore[arg-type]
        if docker.reachable and image and (args.in_container or _has_image(docker.url, image)):
            guarded(
                f"in-container capabilities ({image})",
                lambda v=vendor, i=image: container_capabilities(v, i, docker),  # type: ignore[misc]
            )
        else:
            print(f"== in-container capabilities ({vendor}): skipped (no Docker or no {image})")
    if not vendors:
        print("== no GPU on this machine: container checks skipped")
    print(f"== done: {failures} check(s) crashed")
    return 1 if failures else 0


def _has_image(url: str, image: str) -> bool:
    try:
        import docker

        client = docker.DockerClient(base_url=url, version="auto", timeout=10)
        try:
            client.images.get(image)
            return True
        finally:
            client.close()
    except Exception:
        return False


if __name__ == "__main__":
    sys.exit(main())
