"""A fake of the fleet's rig source (engine/fleet.py ``RigSource``) for the fleet screen's
snapshots and pilot tests: three rigs with fixed answers, made from the engine's own
records, so the screen runs engine/fleet.py's real ``snapshot`` on them. The real source is
tested against real daemons in tests/daemons/test_fleet.py."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from engine import api
from engine.api.jobs import JobSpec
from engine.config import FleetRig
from engine.errors import EngineError
from engine.fleet import UNREACHABLE

NOW = 1_780_000_000.0  # the screen's clock in tests: "today" is the day it falls on
PEERS = (
    "12D3KooWQ9ZkuDS6UF3AeXusJbx4RjaZUkKa7y3ZK7y38zGBsuCC",
    "12D3KooWHqa5P3qJX1jULuwB8nriEojY7hE5mfCjBrNVFHjG2tQv",
)
RIGS = (
    FleetRig(name="rig-1", home="/srv/nunet/rig-1"),
    FleetRig(name="rig-2", socket="/tmp/rig-2.sock"),
    FleetRig(name="rig-3", url="http://127.0.0.1:9999", token_file="/srv/rig-3/api-token"),
)


def _machine() -> api.Machine:
    return api.Machine(
        hostname="rig",
        os="Linux",
        kernel="6.8",
        arch="x86_64",
        cpu_model="AMD EPYC",
        cpu_cores=32,
        cpu_mhz_per_core=2500,
    )


def _readiness() -> api.Readiness:
    ok = api.Check(ok=True, detail="")
    return api.Readiness(docker=ok, gpu_driver=ok, gpu_runtime=ok)


def _onboarding(state: Any) -> api.Onboarding:
    return api.Onboarding(
        memory_mb=64000, cpu_mhz=80000, channel="nunet-test", address="addr", state=state
    )


def _gpu(index: int, temp: float, util: float) -> api.GpuSnapshot:
    return api.GpuSnapshot(
        index=index,
        vendor="nvidia",
        name="NVIDIA RTX 4090",
        uuid=f"GPU-{index}",
        temperature_c=temp,
        utilization_gpu=util,
    )


def _job(job_id: str, state: Any) -> api.JobInfo:
    return api.JobInfo(
        job_id=job_id,
        role="provider",
        state=state,
        provider=PEERS[0],
        consumer=PEERS[1],
        spec=JobSpec(framework="scikit-learn", script_url="https://h/x.py"),
    )


def _paid(job_id: str, units: int, at: float) -> api.EscrowInfo:
    return api.EscrowInfo(
        job_id=job_id,
        role="provider",
        state="claimed",
        amount=units,
        deadline_ms=0,
        consumer_pkh="c",
        provider_pkh="p",
        oracle_key="o",
        paid_units=units,
        refunded_units=0,
        updated_at=at,
    )


def _answers(peer: str, state: Any, gpus: tuple[api.GpuSnapshot, ...], **more: Any) -> list[Any]:
    return [
        api.NodeInfo(
            peer_id=peer,
            version="0.1",
            home="/srv/nunet/rig",
            mode="provider",
            machine=_machine(),
            onboarded=_onboarding(state),
            readiness=_readiness(),
            daemon=True,
            started_at=NOW - 3600,
        ),
        api.NetworkStatus(channel="nunet-test", online=True, connected_peers=4),
        api.GpuStatusReply(gpus=gpus),
        api.JobList(jobs=more.get("jobs", ())),
        api.EscrowList(escrows=more.get("escrows", ())),
        api.Capacity(
            view="available",
            cpu_cores=32,
            cpu_mhz=80000,
            memory_mb=64000,
            disk_mb=more.get("disk_mb", 400_000),
        ),
    ]


class FakeRigs:
    """rig-1: online, two GPUs (one at 87 °C), a job running, 12.5 NTX paid today (and 3
    yesterday, not counted); rig-2: paused, one GPU, 2 GB of disk free; rig-3: unreachable.
    ``hold``: a rig whose answers wait until ``release`` (a slow rig); ``asked``: every
    command each rig was sent, by name."""

    def __init__(self, hold: str = "") -> None:
        self.states = {"rig-1": "active", "rig-2": "paused"}
        self.hold = hold
        self.release = threading.Event()
        self.asked: dict[str, list[str]] = {rig.name: [] for rig in RIGS}

    @property
    def rigs(self) -> Sequence[FleetRig]:
        return RIGS

    def ask(self, rig: FleetRig, commands: Sequence[api.Command]) -> list[Any]:
        if rig.name == self.hold:
            self.release.wait(10)
        self.asked[rig.name].extend(type(c).__name__ for c in commands)
        if rig.name == "rig-3":
            raise EngineError(UNREACHABLE, "http://127.0.0.1:9999 does not answer (refused)")
        if isinstance(commands[0], (api.Pause, api.Resume)):
            self.states[rig.name] = "paused" if isinstance(commands[0], api.Pause) else "active"
            return [_onboarding(self.states[rig.name])]
        if rig.name == "rig-1":
            return _answers(
                PEERS[0],
                self.states["rig-1"],
                (_gpu(0, 87, 96), _gpu(1, 71, 88)),
                jobs=(_job("job-a", "running"), _job("job-b", "finished")),
                escrows=(_paid("job-c", 12_500_000, NOW - 60), _paid("job-d", 3_000_000, 0)),
            )
        return _answers(PEERS[1], self.states["rig-2"], (_gpu(0, 40, 0),), disk_mb=2048)
