"""Container GPU options, runtime preflight, capability logic and the ML image helpers."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from docker.types import DeviceRequest

from engine import api
from engine.config import Paths, load_settings
from engine.domain.ml_images import DEFAULT_ML_IMAGES
from engine.errors import EngineError
from engine.resources.gpu.capabilities import (
    host_capabilities,
    parse_probe,
    probe_image_for,
    tensor_cores,
)
from engine.resources.gpu.containers import (
    NO_NVIDIA_RUNTIME,
    explain_docker_gpu_error,
    gpu_container_options,
    preflight_gpu_runtime,
)
from engine.resources.ml_images import (
    PullProgress,
    explain_pull_error,
    registry_of,
    select_images,
    split_reference,
)
from engine.resources.readiness import DockerStatus

UP = DockerStatus("unix:///run/docker.sock", True, "24.0", ("runc",))


# --- options ------------------------------------------------------------------------------


def test_nvidia_all_gpus() -> None:
    options = gpu_container_options("nvidia")
    (request,) = options["device_requests"]
    assert isinstance(request, DeviceRequest)
    assert (request.count, request.capabilities, request.device_ids) == (-1, [["gpu"]], [])
    assert set(options) == {"device_requests"}


def test_nvidia_chosen_gpus() -> None:
    (request,) = gpu_container_options("nvidia", ["GPU-abc", 3])["device_requests"]
    assert request.device_ids == ["GPU-abc", "3"]
    assert request.capabilities == [["gpu"]]


def test_amd_gets_kfd_and_dri_with_the_owning_groups(tmp_path: Path) -> None:
    dev = tmp_path / "dev"
    (dev / "dri").mkdir(parents=True)
    for node in (dev / "kfd", dev / "dri" / "renderD128", dev / "dri" / "card0"):
        node.touch()
    os.chown(dev / "dri" / "renderD128", -1, 109)
    os.chown(dev / "dri" / "card0", -1, 44)
    os.chown(dev / "kfd", -1, 109)
    options = gpu_container_options("amd", dev_root=dev)
    assert options["devices"] == [f"{dev}/kfd:{dev}/kfd:rwm", f"{dev}/dri:{dev}/dri:rwm"]
    # Numeric host gids: the image may not have a "render" group to resolve.
    assert options["group_add"] == ["44", "109"]


def test_intel_has_no_kfd_and_falls_back_to_group_names(tmp_path: Path) -> None:
    options = gpu_container_options("intel", dev_root=tmp_path)
    assert options == {
        "devices": [f"{tmp_path}/dri:{tmp_path}/dri:rwm"],
        "group_add": ["video", "render"],
    }


def test_amd_chosen_render_node() -> None:
    options = gpu_container_options("amd", ["/dev/dri/renderD129"], dev_root=Path("/nope"))
    assert options["devices"] == [
        "/nope/kfd:/nope/kfd:rwm",
        "/dev/dri/renderD129:/dev/dri/renderD129:rwm",
    ]


# --- preflight ----------------------------------------------------------------------------


def test_preflight_without_nvidia_runtime_is_a_clear_error() -> None:
    with pytest.raises(EngineError) as info:
        preflight_gpu_runtime("nvidia", UP, which=lambda name: None)
    assert info.value.code == "gpu_runtime"
    assert info.value.message == NO_NVIDIA_RUNTIME
    assert info.value.message.startswith("no NVIDIA container runtime: install nvidia-container")


def test_preflight_passes_with_the_runtime_or_the_hook() -> None:
    with_runtime = DockerStatus("u", True, runtimes=("nvidia", "runc"))
    preflight_gpu_runtime("nvidia", with_runtime, which=lambda name: None)
    hook = "nvidia-container-runtime-hook"
    preflight_gpu_runtime("nvidia", UP, which=lambda n: f"/usr/bin/{n}" if n == hook else None)


def test_preflight_without_docker() -> None:
    with pytest.raises(EngineError, match="no Docker engine at unix:///x"):
        preflight_gpu_runtime("nvidia", DockerStatus("unix:///x", False))


def test_preflight_amd_devices(tmp_path: Path) -> None:
    with pytest.raises(EngineError, match="kfd missing"):
        preflight_gpu_runtime("amd", UP, dev_root=tmp_path)
    (tmp_path / "dri").mkdir()
    (tmp_path / "kfd").touch()
    preflight_gpu_runtime("amd", UP, dev_root=tmp_path)
    preflight_gpu_runtime("intel", UP, dev_root=tmp_path)


def test_docker_gpu_errors_are_explained() -> None:
    raw = (
        "500 Server Error for http+docker://localhost/v1.41/containers/35f0/start: Internal "
        'Server Error ("could not select device driver "" with capabilities: [[gpu]]")'
    )
    mapped = explain_docker_gpu_error(RuntimeError(raw))
    assert mapped is not None and mapped.message == NO_NVIDIA_RUNTIME
    assert explain_docker_gpu_error(RuntimeError("no such image")) is None


# --- capabilities -------------------------------------------------------------------------


def snap(**fields: object) -> api.GpuSnapshot:
    base: dict[str, object] = {"index": 0, "vendor": "nvidia", "name": "T4", "uuid": "GPU-1"}
    return api.GpuSnapshot(**(base | fields))  # type: ignore[arg-type]


def test_tensor_cores_from_compute_capability() -> None:
    assert tensor_cores("7.0") is True and tensor_cores("8.6") is True
    assert tensor_cores("6.1") is False
    assert tensor_cores(None) is None and tensor_cores("junk") is None


def test_host_cuda_with_tensor_cores(tmp_path: Path) -> None:
    status = api.GpuStatus(
        gpus=(
            snap(compute_capability="7.5", cuda_version="12.4"),
            snap(index=1, uuid="GPU-2", name="P100", compute_capability="6.0"),
        )
    )
    caps = host_capabilities(status, find_library=lambda n: "libcuda.so.1", rocm_root=tmp_path)
    assert (caps.where, caps.cuda, caps.cuda_version, caps.tensor_cores) == (
        "host",
        True,
        "12.4",
        True,
    )
    assert [g.tensor_cores for g in caps.gpus] == [True, False]
    assert not caps.rocm and not caps.hip


def test_host_nvidia_without_libcuda() -> None:
    status = api.GpuStatus(gpus=(snap(compute_capability="8.0"),))
    caps = host_capabilities(status, find_library=lambda n: None)
    assert not caps.cuda and caps.cuda_version is None
    assert any("libcuda" in note for note in caps.notes)


def test_host_rocm_and_hip(tmp_path: Path) -> None:
    (tmp_path / "dev").mkdir()
    (tmp_path / "dev" / "kfd").touch()
    status = api.GpuStatus(gpus=(snap(vendor="amd", rocm_version="6.2.0"),))
    caps = host_capabilities(
        status,
        find_library=lambda n: "libamdhip64.so" if n == "amdhip64" else None,
        rocm_root=tmp_path / "rocm",
        dev_root=tmp_path / "dev",
    )
    assert (caps.rocm, caps.rocm_version, caps.hip, caps.cuda) == (True, "6.2.0", True, False)
    assert caps.gpus[0].tensor_cores is None


def test_host_without_gpu() -> None:
    caps = host_capabilities(api.GpuStatus(reason="no NVIDIA driver library"))
    assert not (caps.cuda or caps.rocm or caps.hip or caps.tensor_cores)
    assert caps.notes == ("no GPU: no NVIDIA driver library",)


def test_probe_output_cuda_and_hip() -> None:
    cuda = parse_probe(
        'noise\n{"cuda": true, "cuda_version": "12.4", "hip_version": null,'
        ' "gpus": [{"name": "NVIDIA H100", "cc": "9.0"}]}\n',
        "container x",
        "nvidia",
    )
    assert (cuda.cuda, cuda.cuda_version, cuda.tensor_cores, cuda.hip) == (
        True,
        "12.4",
        True,
        False,
    )
    hip = parse_probe(
        '{"cuda": true, "cuda_version": null, "hip_version": "6.2.41133",'
        ' "gpus": [{"name": "AMD Instinct MI300X", "cc": "9.4"}]}',
        "container y",
        "amd",
    )
    assert (hip.hip, hip.rocm, hip.rocm_version, hip.cuda) == (True, True, "6.2.41133", False)
    assert hip.gpus[0].compute_capability is None
    none = parse_probe("Traceback ...", "container z", "nvidia")
    assert not none.cuda and "printed no result" in none.notes[0]
    assert parse_probe('{"error": "torch missing: x"}', "c", "nvidia").notes == (
        "torch missing: x",
    )


def test_probe_image_choice() -> None:
    assert probe_image_for("nvidia", DEFAULT_ML_IMAGES) == DEFAULT_ML_IMAGES["pytorch_nvidia"]
    assert probe_image_for("amd", DEFAULT_ML_IMAGES) == "rocm/pytorch:latest"
    assert probe_image_for("intel", DEFAULT_ML_IMAGES) is None
    assert probe_image_for("nvidia", {"pytorch_nvidia": ""}) is None


# --- ML images ----------------------------------------------------------------------------


def test_selection_follows_the_rig() -> None:
    cpu_only = select_images(DEFAULT_ML_IMAGES, ())
    assert [key for key, _ in cpu_only] == ["pytorch_cpu", "tensorflow_cpu"]
    nvidia = select_images(DEFAULT_ML_IMAGES, ("nvidia",))
    # pytorch_cpu and pytorch_nvidia are the same image: pulled once.
    assert [ref for _, ref in nvidia] == [
        "pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime",
        "tensorflow/tensorflow:2.17.0",
        "tensorflow/tensorflow:2.17.0-gpu",
    ]
    amd = {key for key, _ in select_images(DEFAULT_ML_IMAGES, ("amd", "intel"))}
    assert amd == {"pytorch_cpu", "tensorflow_cpu", "pytorch_amd", "tensorflow_amd"}


def test_selection_by_key_or_reference_and_empty_entries_skip() -> None:
    chosen = select_images(DEFAULT_ML_IMAGES, (), ("tensorflow_amd", "busybox:1.36"))
    assert chosen == [
        ("tensorflow_amd", "rocm/tensorflow:latest"),
        ("busybox:1.36", "busybox:1.36"),
    ]
    assert select_images({"pytorch_cpu": ""}, ()) == []


def test_references() -> None:
    assert split_reference("pytorch/pytorch:2.5.1") == ("pytorch/pytorch", "2.5.1")
    assert split_reference("rocm/pytorch") == ("rocm/pytorch", "latest")
    assert split_reference("localhost:5000/x") == ("localhost:5000/x", "latest")
    assert split_reference("localhost:5000/x:1") == ("localhost:5000/x", "1")
    assert split_reference("x@sha256:abc") == ("x@sha256:abc", "")
    assert registry_of("pytorch/pytorch:1") == "docker.io"
    assert registry_of("ghcr.io/a/b:1") == "ghcr.io"
    assert registry_of("localhost:5000/x") == "localhost:5000"


def test_offline_error_says_so_plainly() -> None:
    raw = (
        "500 Server Error for http+docker://localhost/v1.41/images/create: Internal Server "
        'Error ("Get "https://registry-1.docker.io/v2/": dial tcp: lookup registry-1.docker.io'
        ' on 10.255.255.53:53: no such host")'
    )
    message = explain_pull_error("pytorch/pytorch:2.5.1", raw)
    assert message.startswith("cannot reach registry docker.io: Get ")
    assert message.endswith("— this machine is offline; load images with `docker load`")
    assert "not found on docker.io" in explain_pull_error("a/b:1", "manifest unknown")


def test_pull_progress_folds_layers_into_one_percent() -> None:
    progress = PullProgress()
    assert progress.percent is None
    for event in (
        {"status": "Pulling from library/x", "id": "1"},
        {"status": "Already exists", "id": "aaa"},
        {"status": "Pulling fs layer", "id": "bbb"},
        {"status": "Pulling fs layer", "id": "ccc"},
        {"status": "Downloading", "id": "bbb", "progressDetail": {"current": 50, "total": 100}},
    ):
        progress.feed(event)
    assert progress.percent == 25.0  # half of bbb's download; ccc's size is unknown yet
    progress.feed(
        {"status": "Downloading", "id": "ccc", "progressDetail": {"current": 0, "total": 300}}
    )
    assert progress.percent == 6.2
    progress.feed(
        {"status": "Extracting", "id": "bbb", "progressDetail": {"current": 100, "total": 100}}
    )
    progress.feed({"status": "Pull complete", "id": "bbb"})
    assert progress.status == "extracting"
    assert (progress.current_bytes, progress.total_bytes) == (100, 400)
    progress.feed({"status": "Download complete", "id": "ccc"})
    progress.feed({"status": "Pull complete", "id": "ccc"})
    assert progress.percent == 100.0
    progress.feed({"error": "boom", "errorDetail": {"message": "unexpected EOF"}})
    assert progress.error == "unexpected EOF"


def test_ml_images_setting_and_env_override(tmp_path: Path) -> None:
    paths = Paths.for_home(tmp_path)
    paths.ensure()
    paths.config_file.write_text('[ml_images]\ntensorflow_amd = ""\n')
    settings = load_settings(paths, {"NUNET_ML_IMAGES_PYTORCH_CPU": "my/torch:cpu"})
    images = settings.ml_images.as_map()
    assert images["pytorch_cpu"] == "my/torch:cpu"
    assert images["tensorflow_amd"] == ""
    assert images["pytorch_nvidia"] == DEFAULT_ML_IMAGES["pytorch_nvidia"]
    assert set(images) == set(DEFAULT_ML_IMAGES)


def test_scikit_learn_jobs_run_in_the_image_ml_images_names() -> None:
    """[ml_images] had no key for scikit-learn: a Docker provider always used the locally
    built test image. sklearn_cpu names it; onboard-ml pulls no local build."""
    from engine.config import MlImagesSettings
    from engine.domain.ml_images import LOCAL_SKLEARN_IMAGE
    from engine.jobs.executors.docker import images_from_settings

    chosen = MlImagesSettings(sklearn_cpu="example.org/ml/sklearn:1.5")
    assert images_from_settings(chosen.as_map())["scikit-learn_cpu"] == "example.org/ml/sklearn:1.5"
    assert images_from_settings(MlImagesSettings().as_map())["scikit-learn_cpu"] == (
        LOCAL_SKLEARN_IMAGE
    )
    assert "scikit-learn_cpu" not in images_from_settings(MlImagesSettings(sklearn_cpu="").as_map())
    pulled = [ref for _, ref in select_images(MlImagesSettings().as_map(), ())]
    assert LOCAL_SKLEARN_IMAGE not in pulled and pulled
    assert "example.org/ml/sklearn:1.5" in [ref for _, ref in select_images(chosen.as_map(), ())]
