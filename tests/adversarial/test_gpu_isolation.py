"""A GPU job's container gets the cards onboarded with ``--gpu`` and nothing more, and a GPU
job that names no vendor runs on the provider's own vendor (never silently as NVIDIA).

There is no GPU on the test machines, so Docker is a recording fake (``FakeDockerClient``:
what the executor would hand dockerd is the subject); the executor, the GPU option builder,
the provider's choice of cards and the vendor probes on a built sysfs tree are the real code.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest
import trio
from docker.types import DeviceRequest
from nacl.signing import SigningKey

from engine import api
from engine.config import Paths, Settings
from engine.context import NodeContext
from engine.domain.spec import JobSpec
from engine.errors import EngineError
from engine.identity import Identity
from engine.jobs.executors.base import JobRun, limits_for
from engine.jobs.executors.docker import DockerExecutor
from engine.jobs.provider import ProviderJobs
from engine.probes import HostProbes
from engine.resources.container_host import ContainerFacts
from engine.resources.gpu.detect import detect_gpus
from engine.resources.machine import MachineFacts
from engine.resources.readiness import DockerStatus
from engine.store import Store
from tests.adversarial.hostile import JOB_PROTOCOL, HostilePeer, open_job, seal_job
from tests.conftest import run_cli
from tests.daemon_harness import Daemon, daemons
from tests.daemons.test_jobs_e2e import _pair
from tests.doubles.fake_pynvml import FakeNvml
from tests.unit.test_gpu_detect import add_card

__all__ = ["daemons"]
NVIDIA_RUNTIME = DockerStatus("unix:///fake.sock", True, "27.0", ("nvidia", "runc"))
IMAGES = {
    "pytorch_cpu": "img/cpu",
    "pytorch_nvidia": "img/nvidia",
    "pytorch_amd": "img/amd",
    "pytorch_intel": "img/intel",
}
H100 = api.GpuInfo(index=0, vendor="nvidia", name="H100", vram_mb=81_000, uuid="GPU-aaaa")
OTHER = api.GpuInfo(index=1, vendor="nvidia", name="H100", vram_mb=81_000, uuid="GPU-bbbb")


class Refused(Exception):
    """What the fake dockerd answers every create with: the test looks at the request."""


class FakeContainers:
    def __init__(self) -> None:
        self.created: list[dict[str, Any]] = []

    def create(self, **options: Any) -> Any:
        self.created.append(options)
        raise Refused("the fake dockerd runs nothing")


class FakeDockerClient:
    """docker.DockerClient's part the executor's start uses: records each create."""

    def __init__(self) -> None:
        self.containers = FakeContainers()


def gpu_spec(vendor: str | None = None) -> JobSpec:
    return JobSpec(
        framework="pytorch",
        script_url="http://127.0.0.1/x.py",
        device="gpu",
        gpu_vendor=vendor,
    )


def executor(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, **roots: Path
) -> tuple[DockerExecutor, FakeDockerClient]:
    import engine.resources.container_host as container_host

    monkeypatch.setattr(container_host, "probe_docker", lambda environ=None: NVIDIA_RUNTIME)
    docker = DockerExecutor(container_host=ContainerFacts(**roots), images=IMAGES)
    fake = FakeDockerClient()
    docker._client = docker._stream_client = fake
    return docker, fake


def start(docker: DockerExecutor, run: JobRun) -> None:
    async def main() -> None:
        state = docker._new_state(run)
        state.entry = "x.py"
        await docker.start(run)

    trio.run(main)


def a_run(tmp_path: Path, spec: JobSpec, gpus: tuple[api.GpuInfo, ...]) -> JobRun:
    workspace = tmp_path / "job" / "workspace"
    workspace.mkdir(parents=True, exist_ok=True)
    return JobRun("0123456789ab", spec, workspace, limits_for(spec), gpus=gpus)


def test_an_nvidia_container_gets_only_the_onboarded_card(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    docker, fake = executor(monkeypatch, tmp_path)
    with pytest.raises(Refused):
        start(docker, a_run(tmp_path, gpu_spec(), (H100,)))
    (options,) = fake.containers.created
    (request,) = options["device_requests"]
    assert isinstance(request, DeviceRequest)
    assert request.device_ids == ["GPU-aaaa"] and request.count in (None, 0)
    assert options["image"] == "img/nvidia"
    assert "devices" not in options


def test_a_gpu_job_without_cards_or_with_the_wrong_vendor_is_never_created(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    docker, fake = executor(monkeypatch, tmp_path)
    with pytest.raises(EngineError, match="given no onboarded GPU"):
        start(docker, a_run(tmp_path, gpu_spec(), ()))
    with pytest.raises(EngineError, match="asks for amd GPUs; this one is nvidia"):
        start(docker, a_run(tmp_path, gpu_spec("amd"), (H100,)))
    assert fake.containers.created == []


def amd_host(tmp_path: Path) -> tuple[Path, Path, tuple[api.GpuInfo, ...]]:
    """Two AMD cards on a built sysfs tree, detected by the real probes."""
    sysfs, dev = tmp_path / "sys", tmp_path / "dev"
    for number, pci, unique in ((0, "0000:03:00.0", "aa01"), (1, "0000:04:00.0", "")):
        files = {f"drm/renderD{128 + number}": "", "mem_info_vram_total": str(16 << 30)}
        if unique:
            files["unique_id"] = unique
        add_card(sysfs, number, "0x1002", "0x73bf", pci, files=files)
    (dev / "dri").mkdir(parents=True)
    for node in ("kfd", "dri/renderD128", "dri/renderD129", "dri/card0", "dri/card1"):
        (dev / node).touch()
    gpus, _ = detect_gpus(FakeNvml.with_gpus(0), sysfs_root=sysfs, kfd=dev / "kfd")
    assert [g.vendor for g in gpus] == ["amd", "amd"]
    return sysfs, dev, gpus


def test_an_amd_job_without_a_vendor_gets_amd_and_only_its_render_node(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    sysfs, dev, gpus = amd_host(tmp_path)
    docker, fake = executor(monkeypatch, tmp_path, dev_root=dev, sysfs_root=sysfs)
    for card, node in ((gpus[0], "renderD128"), (gpus[1], "renderD129")):
        with pytest.raises(Refused):
            start(docker, a_run(tmp_path, gpu_spec(), (card,)))
        options = fake.containers.created.pop()
        assert options["image"] == "img/amd"  # not the NVIDIA image
        assert options["devices"] == [
            f"{dev}/kfd:{dev}/kfd:rwm",
            f"{dev}/dri/{node}:{dev}/dri/{node}:rwm",
        ]
        assert "device_requests" not in options


def test_an_amd_card_whose_node_is_unknown_is_refused_not_widened(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    sysfs, dev, _ = amd_host(tmp_path)
    docker, fake = executor(monkeypatch, tmp_path, dev_root=dev, sysfs_root=sysfs)
    ghost = api.GpuInfo(index=5, vendor="amd", name="MI300", vram_mb=1, uuid="GPU-ffff")
    with pytest.raises(EngineError, match="cannot tell which /dev/dri render node"):
        start(docker, a_run(tmp_path, gpu_spec(), (ghost,)))
    assert fake.containers.created == []


def provider(tmp_path: Path, machine: tuple[api.GpuInfo, ...], onboarded: list[str]) -> Any:
    store = Store(tmp_path / "nunet.db")
    store.save_onboarding(
        api.Onboarding(
            memory_mb=64_000,
            cpu_mhz=20_000,
            channel="nunet-test",
            address="",
            gpus=tuple(onboarded),
        ),
        "onboard",
    )
    ctx = NodeContext(
        paths=Paths.for_home(tmp_path),
        settings=msgspec.convert({"jobs": {"executors": ["docker"]}}, Settings),
        identity=Identity(SigningKey(b"\x07" * 32)),
        store=store,
        emit=lambda event: None,
        probes=HostProbes(),
        version="0+test",
        network_enabled=False,
        gpus=machine,
    )
    return ProviderJobs(
        ctx, {"docker": DockerExecutor(container_host=ContainerFacts())}, machine=MachineFacts(ctx)
    )


def test_the_provider_gives_a_job_the_onboarded_cards_of_its_own_vendor(tmp_path: Path) -> None:
    intel = api.GpuInfo(index=0, vendor="intel", name="Arc", vram_mb=16_000, uuid="intel-pci:x")
    jobs = provider(tmp_path, (H100, OTHER, intel), ["GPU-aaaa", "intel-pci:x"])
    # OTHER is on the machine but was not onboarded: no job ever sees it.
    assert jobs._gpus_for(gpu_spec()) == (H100,)
    assert jobs._gpus_for(gpu_spec("intel")) == (intel,)
    assert "no amd GPU" in jobs._refusal_reason(gpu_spec("amd"))


def test_an_amd_provider_never_treats_a_vendorless_job_as_nvidia(tmp_path: Path) -> None:
    _, _, gpus = amd_host(tmp_path)
    jobs = provider(tmp_path, gpus, [gpus[1].uuid])
    assert jobs._refusal_reason(gpu_spec()) == ""
    assert jobs._gpus_for(gpu_spec()) == (gpus[1],)
    assert "no nvidia GPU" in jobs._refusal_reason(gpu_spec("nvidia"))


def cpu_spec(**fields: Any) -> JobSpec:
    return JobSpec(framework="pytorch", script_url="http://127.0.0.1/x.py", **fields)


def test_a_container_not_given_nvidia_cards_is_told_void(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The CPU PyTorch image sets NVIDIA_VISIBLE_DEVICES=all itself: on a host whose default
    runtime is NVIDIA's, the job would get every GPU unless the container says void."""
    docker, fake = executor(monkeypatch, tmp_path)
    with pytest.raises(Refused):
        start(docker, a_run(tmp_path, cpu_spec(), ()))
    (options,) = fake.containers.created
    assert options["environment"]["NVIDIA_VISIBLE_DEVICES"] == "void"
    assert "device_requests" not in options
    # The dependency step runs the same image, and has the network besides.
    run = a_run(tmp_path, cpu_spec(deps=["numpy"]), ())
    with pytest.raises(Refused):
        trio.run(docker._install, docker._new_state(run))
    assert fake.containers.created[-1]["environment"]["NVIDIA_VISIBLE_DEVICES"] == "void"
    # An NVIDIA job is told its own cards, the same as its device request; never "all".
    with pytest.raises(Refused):
        start(docker, a_run(tmp_path, gpu_spec(), (H100,)))
    assert fake.containers.created[-1]["environment"]["NVIDIA_VISIBLE_DEVICES"] == "GPU-aaaa"


def test_a_job_cannot_choose_gpus_through_its_environment(tmp_path: Path) -> None:
    """Refused by the provider's own admission, whatever the consumer's node let through."""
    jobs = provider(tmp_path, (H100,), [])
    names = (
        "NVIDIA_VISIBLE_DEVICES",
        "CUDA_VISIBLE_DEVICES",
        "HIP_VISIBLE_DEVICES",
        "ROCR_VISIBLE_DEVICES",
        "GPU_DEVICE_ORDINAL",
        "nvidia_driver_capabilities",
    )
    for name in names:
        reason = jobs._refusal_reason(cpu_spec(env={name: "all"}))
        assert f"{name} is reserved: GPUs are chosen by the provider" in reason, reason
    assert "reserved" not in jobs._refusal_reason(cpu_spec(env={"MY_GPU_COUNT": "2"}))


@pytest.mark.timeout(120)
def test_gpu_variables_are_refused_by_both_daemons(
    daemons: Callable[..., Daemon],
    hostile: Callable[..., HostilePeer],
    tmp_path: Path,
) -> None:
    provider_daemon, consumer = _pair(daemons)
    job = tmp_path / "job.toml"
    job.write_text(
        'script_url = "http://127.0.0.1:9/x.py"\nframework = "scikit-learn"\n'
        'expected_minutes = 1\n[env]\nNVIDIA_VISIBLE_DEVICES = "all"\n'
    )
    submitted = run_cli("job", "submit", "-f", str(job), home=consumer.home)
    assert submitted.returncode == 1
    assert "NVIDIA_VISIBLE_DEVICES is reserved" in submitted.stderr, submitted.stderr
    # A peer that skips its own node's check meets the provider's.
    peer = hostile(seed=b"\x67" * 32, bootstrap=[provider_daemon.addrs()[0]])
    peer.wait_connected(provider_daemon.peer_id)
    spec = {
        "framework": "scikit-learn",
        "script_url": "http://127.0.0.1:9/x.py",
        "expected_minutes": 1,
        "env": {"CUDA_VISIBLE_DEVICES": "0"},
    }
    payload = {"t": "offer", "v": 1, "job_id": "a00000000021", "spec": spec,
               "consumer": peer.peer_id}  # fmt: skip
    frames = peer.request(provider_daemon.peer_id, JOB_PROTOCOL, [seal_job(peer.identity, payload)])
    answer = open_job(frames[0])
    assert answer["t"] == "refusal"
    assert "CUDA_VISIBLE_DEVICES is reserved: GPUs are chosen by the provider" in answer["reason"]
