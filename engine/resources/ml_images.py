"""onboard-ml: pre-pull the ML framework images a rig will be asked to run.

The image map is configurable (``[ml_images]`` in config.toml, ``NUNET_ML_IMAGES_<KEY>``);
``DEFAULT_ML_IMAGES`` is its default. Without an explicit list the CPU images are pulled on
every machine and the NVIDIA or AMD ones where such a GPU was found. Docker's pull stream is
folded into one percentage per image (``PullProgress``) and reported through a callback as
``ImagePullProgress`` events. Images already present are not pulled again, so a machine that
was given its images with ``docker load`` is ready offline.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from engine.api import GpuVendor, ImagePullProgress, MlImageResult, MlImagesReport
from engine.domain.ml_images import LOCAL_IMAGES
from engine.errors import EngineError

_OFFLINE_HINTS = (
    "no such host",
    "dial tcp",
    "i/o timeout",
    "network is unreachable",
    "connection refused",
    "tls handshake timeout",
    "context deadline exceeded",
    "temporary failure in name resolution",
    "server misbehaving",
    "proxyconnect",
)
_NOT_FOUND_HINTS = (
    "manifest unknown",
    "not found",
    "pull access denied",
    "repository does not exist",
)
EMIT_INTERVAL_S = 0.25

Emit = Callable[[ImagePullProgress], None]


def select_images(
    configured: Mapping[str, str],
    vendors: Iterable[GpuVendor],
    wanted: tuple[str, ...] | None = None,
) -> list[tuple[str, str]]:
    """(key, image) pairs to pull, each image once; ``wanted`` holds keys or image refs."""
    if wanted is not None:
        pairs = [
            (w, configured[w]) if w in configured else (_key_of(w, configured), w) for w in wanted
        ]
    else:
        variants = {"cpu"} | {v for v in vendors if v in ("nvidia", "amd")}
        pairs = [
            (key, ref)
            for key, ref in configured.items()
            if key.rsplit("_", 1)[-1] in variants
            and not (key == "scikit-learn_cpu" and ref in LOCAL_IMAGES)
        ]
    seen: set[str] = set()
    result: list[tuple[str, str]] = []
    for key, ref in pairs:
        if ref and ref not in seen:
            seen.add(ref)
            result.append((key, ref))
    return result


def _key_of(ref: str, configured: Mapping[str, str]) -> str:
    for key, value in configured.items():
        if value == ref:
            return key
    return ref


def split_reference(ref: str) -> tuple[str, str]:
    """'pytorch/pytorch:2.5' -> ('pytorch/pytorch', '2.5'); a digest stays in the repository."""
    if "@" in ref:
        return ref, ""
    name, sep, tag = ref.rpartition(":")
    if sep and "/" not in tag:
        return name, tag
    return ref, "latest"


def registry_of(ref: str) -> str:
    first = ref.split("/", 1)[0]
    if "/" in ref and ("." in first or ":" in first or first == "localhost"):
        return first
    return "docker.io"


def explain_pull_error(ref: str, text: str) -> str:
    """Docker's pull failure as a sentence a person can act on."""
    lower = text.lower()
    short = _short(text)
    registry = registry_of(ref)
    if any(hint in lower for hint in _OFFLINE_HINTS):
        return (
            f"cannot reach registry {registry}: {short} — this machine is offline; "
            f"load images with `docker load`"
        )
    if any(hint in lower for hint in _NOT_FOUND_HINTS):
        return f"image {ref} not found on {registry} ({short}); check the [ml_images] setting"
    if "no space left" in lower:
        return f"no disk space left for {ref}: free space under Docker's data root"
    return f"pulling {ref} failed: {short}"


def _short(text: str) -> str:
    match = re.search(r'\("(.*)"\)\s*$', text.strip())
    inner = match.group(1) if match else text.strip()
    return inner[:300]


@dataclass
class _Layer:
    total: int = 0
    downloaded: int = 0
    extracted: int = 0
    done: bool = False


@dataclass
class PullProgress:
    """Docker's per-layer pull events folded into one number per image.

    Each layer counts its bytes twice (download, then extract); "Already exists" and
    "Pull complete" layers are complete. Percent is None until some layer size is known.
    """

    layers: dict[str, _Layer] = field(default_factory=dict)
    status: str = "pulling"
    error: str | None = None

    def feed(self, event: Mapping[str, Any]) -> None:
        if "error" in event:
            detail = event.get("errorDetail") or {}
            self.error = str(detail.get("message") or event["error"])
            return
        status = str(event.get("status", ""))
        layer_id = event.get("id")
        if not isinstance(layer_id, str) or status.startswith(("Pulling from", "Digest", "Status")):
            return
        layer = self.layers.setdefault(layer_id, _Layer())
        detail = event.get("progressDetail") or {}
        current = detail.get("current") if isinstance(detail, dict) else None
        total = detail.get("total") if isinstance(detail, dict) else None
        if isinstance(total, int) and total > 0:
            layer.total = max(layer.total, total)
        if status == "Downloading" and isinstance(current, int):
            layer.downloaded = current
        elif status == "Download complete":
            layer.downloaded = layer.total
        elif status == "Extracting" and isinstance(current, int):
            layer.downloaded = layer.total
            layer.extracted = current
            self.status = "extracting"
        elif status in ("Pull complete", "Already exists"):
            layer.done = True

    @property
    def total_bytes(self) -> int:
        return sum(layer.total for layer in self.layers.values())

    @property
    def current_bytes(self) -> int:
        return sum(
            layer.total if layer.done else layer.downloaded for layer in self.layers.values()
        )

    @property
    def percent(self) -> float | None:
        sized = [layer for layer in self.layers.values() if layer.total > 0]
        if not sized:
            done = bool(self.layers) and all(layer.done for layer in self.layers.values())
            return 100.0 if done else None
        whole = sum(2 * layer.total for layer in sized)
        got = sum(
            2 * layer.total
            if layer.done
            else min(layer.downloaded, layer.total) + min(layer.extracted, layer.total)
            for layer in sized
        )
        return round(100.0 * got / whole, 1)


def pull_image(
    api: Any,
    key: str,
    ref: str,
    emit: Emit,
    *,
    clock: Callable[[], float] = time.monotonic,
) -> MlImageResult:
    """Pull one image through docker-py's low-level ``api``; never raises for pull failures."""
    repository, tag = split_reference(ref)
    progress = PullProgress()
    last_emit = 0.0
    last_status = ""

    def report(status: str, detail: str = "", force: bool = False) -> None:
        nonlocal last_emit, last_status
        now = clock()
        if not force and status == last_status and now - last_emit < EMIT_INTERVAL_S:
            return
        last_emit, last_status = now, status
        emit(
            ImagePullProgress(
                at=time.time(),
                key=key,
                image=ref,
                status=status,  # type: ignore[arg-type]
                percent=100.0 if status == "done" else progress.percent,
                current_bytes=progress.current_bytes,
                total_bytes=progress.total_bytes,
                detail=detail,
            )
        )

    report("pulling", force=True)
    try:
        for event in api.pull(repository, tag=tag or None, stream=True, decode=True):
            if isinstance(event, dict):
                progress.feed(event)
            if progress.error:
                break
            report(progress.status)
    except Exception as exc:
        progress.error = str(exc)
    if progress.error:
        message = explain_pull_error(ref, progress.error)
        report("failed", message, force=True)
        return MlImageResult(key=key, image=ref, status="failed", detail=message)
    report("done", force=True)
    return MlImageResult(key=key, image=ref, status="pulled")


def prepare_images(
    client: Any,
    selection: list[tuple[str, str]],
    emit: Emit,
) -> MlImagesReport:
    """Pull every selected image that is not already present, one after the other."""
    results: list[MlImageResult] = []
    now = time.time()
    for key, ref in selection:
        emit(ImagePullProgress(at=now, key=key, image=ref, status="waiting"))
    for key, ref in selection:
        if _present(client, ref):
            emit(
                ImagePullProgress(
                    at=time.time(), key=key, image=ref, status="present", percent=100.0
                )
            )
            results.append(MlImageResult(key=key, image=ref, status="present"))
            continue
        results.append(pull_image(client.api, key, ref, emit))
    return MlImagesReport(results=tuple(results))


def _present(client: Any, ref: str) -> bool:
    try:
        client.images.get(ref)
    except Exception as exc:
        if type(exc).__name__ in ("ImageNotFound", "NotFound"):
            return False
        raise EngineError("docker", f"the Docker engine failed listing images: {exc}") from exc
    return True
