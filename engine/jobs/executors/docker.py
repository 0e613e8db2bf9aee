"""Jobs in Docker containers: the executor for jobs from other peers.

One image per framework and device (a configurable map, keys like ``pytorch_nvidia``: the same
keys as [ml_images]); the job's workspace bind-mounted at /workspace; limits from the tier
(memory without swap, CPUs, pids); every capability dropped, no-new-privileges, a read-only
root with a tmpfs /tmp; no network while the job runs. Dependencies are installed before, by a
separate container that may use the network, into /workspace/.deps (on the run's PYTHONPATH).

What it needs of the host's container engine and GPUs (which engine, rootless or not; the
cards a GPU job gets; whether the engine can give them) comes through the ``ContainerHost`` it
is built with (engine/ports.py), which the resources room implements.

Containers are created detached, attached to before they start (their output from the first
line: executors/dockerlogs.py), removed by us after that stream ends (``run(...,
remove=True)`` has lost a last unterminated line), and labelled ``nunet.job`` / ``nunet.node``
so that the ones a crashed provider left behind are found and removed when it starts again.
Every docker-py call blocks, so each runs in a worker thread.

Why one file of some 630 lines: one executor, ``DockerExecutor``, whose methods are the
``Executor`` protocol's (install, start, follow, checkpoint, stop, exec, tunnel) over one
Docker client and its containers; what is separable already lives beside it (dockerlogs.py,
docker_exec.py; the GPU options behind ``ContainerHost``, in engine/resources/gpu/containers.py).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import trio

from engine.api import GpuVendor
from engine.domain import safe_paths
from engine.domain.ml_images import DEFAULT_ML_IMAGES, LOCAL_SKLEARN_IMAGE
from engine.errors import EngineError
from engine.jobs.executors.base import (
    ORPHAN_GUARD,
    BaseExecutor,
    ExitStatus,
    JobRun,
    Limits,
    Outcome,
    RunState,
    failure_reason,
    provider_lifeline,
)
from engine.jobs.executors.disk_quota import file_too_large, wrote_too_large
from engine.jobs.executors.dockerlogs import LogReader
from engine.ports import ContainerEngine, ContainerHost

LABEL_JOB = "nunet.job"
LABEL_NODE = "nunet.node"
LABEL_STEP = "nunet.step"
TEST_IMAGE = LOCAL_SKLEARN_IMAGE  # scripts/build_test_image.sh: offline, from .debs
log = logging.getLogger("nunet.jobs.docker")
DEFAULT_IMAGES: dict[str, str] = dict(DEFAULT_ML_IMAGES)
INSTALL_TIMEOUT_S = 900
GRACE_S = 5
LOG_IDLE_S = 10.0  # after the exit, a log stream silent this long is given up
NOBODY = "65534:65534"


def images_from_settings(ml_images: Mapping[str, str]) -> dict[str, str]:
    """The images jobs run in: [ml_images] (what onboard-ml pulled) over the defaults; an
    empty string there means no image, so such jobs are refused with the reason."""
    images = dict(DEFAULT_IMAGES)
    for key, image in ml_images.items():
        if image:
            images[key] = image
        else:
            images.pop(key, None)
    return images


class DockerExecutor(BaseExecutor):
    name = "docker"

    def __init__(
        self,
        *,
        container_host: ContainerHost,
        node_id: str = "",
        images: Mapping[str, str] | None = None,
        docker_host: str | None = None,
        install_network: str = "bridge",
        mhz_per_core: float | None = None,
        grace_s: int = GRACE_S,
    ) -> None:
        super().__init__(mhz_per_core=mhz_per_core)
        self.container_host = container_host
        self.node_id = node_id
        self.images = dict(DEFAULT_IMAGES if images is None else images)
        self.docker_host = docker_host or os.environ.get("DOCKER_HOST")
        self.install_network = install_network
        self.grace_s = grace_s
        self._client: Any = None
        self._stream_client: Any = None
        self._containers: dict[str, Any] = {}
        self._paused: set[str] = set()  # job ids whose container a checkpoint froze
        self._facts: ContainerEngine | None = None
        self._reaper: subprocess.Popen[bytes] | None = None

    # --- docker plumbing -----------------------------------------------------------------

    def client(self) -> Any:
        if self._client is None:
            import docker

            base = self.docker_host or "unix:///var/run/docker.sock"
            try:
                self._client = docker.DockerClient(base_url=base, version="auto", timeout=120)
                # Streams (logs, stats, wait) stay open as long as a job runs: no read timeout.
                self._stream_client = docker.DockerClient(
                    base_url=base, version="auto", timeout=None
                )
            except Exception as exc:
                raise EngineError(
                    "docker",
                    f"no Docker engine at {base}: start dockerd or set DOCKER_HOST ({exc})",
                ) from exc
        return self._client

    async def _call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        return await trio.to_thread.run_sync(functools.partial(fn, *args, **kwargs))

    def image_for(self, run: JobRun) -> str:
        spec = run.spec
        key = f"{spec.framework}_{gpu_vendor(run) if spec.device == 'gpu' else 'cpu'}"
        image = self.images.get(key)
        if not image:
            raise EngineError("image", f"this provider has no image for {key} jobs")
        return image

    def labels(self, run: JobRun, step: str) -> dict[str, str]:
        return {LABEL_JOB: run.job_id, LABEL_NODE: self.node_id or "-", LABEL_STEP: step}

    def _node_label(self, node_id: str | None = None) -> str:
        """The label on every container of ``node_id`` (default this node; "-" unnamed)."""
        return f"{LABEL_NODE}={node_id if node_id is not None else (self.node_id or '-')}"

    def cleanup_orphans(self, node_id: str | None = None) -> list[str]:
        """Remove every container of ours (``nunet.node`` = node_id, default this node) that a
        crash left behind; returns their job ids. Blocking."""
        label = self._node_label(node_id)
        removed = []
        for container in self.client().containers.list(all=True, filters={"label": label}):
            removed.append(container.labels.get(LABEL_JOB, "?"))
            container.remove(force=True)
        return removed

    async def _on_serve(self) -> None:
        # dockerd down: prepare says so clearly; serve itself must not fail.
        with contextlib.suppress(Exception):
            await self._call(self.cleanup_orphans)
        # Only a named node's: the shared "-" label of an unnamed executor (a test's, an
        # embedding's) could be another's containers.
        self._reaper = self._start_reaper() if self.node_id else None

    def _start_reaper(self) -> subprocess.Popen[bytes] | None:
        """The process that removes this node's containers if the provider dies without
        doing so (SIGKILL, the OOM killer): orphan_guard.py, woken by this process's end
        (its lifeline), not by the end of the thread that started it."""
        base = self.docker_host or "unix:///var/run/docker.sock"
        label = self._node_label()
        # Its one line, if it has to act, goes where the daemon's own log does; never into
        # a terminal the app has just left.
        err = subprocess.DEVNULL if sys.stderr is None or sys.stderr.isatty() else None
        lifeline = provider_lifeline()
        argv = [sys.executable, "-I", str(ORPHAN_GUARD), "containers", str(os.getpid())]
        try:
            return subprocess.Popen(
                [*argv, str(lifeline), base, label],
                pass_fds=(lifeline,),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=err,
                start_new_session=True,  # a Ctrl-C in the provider's terminal is not for it
            )
        except OSError as exc:
            log.warning("no container reaper (%s): a crash leaves containers until restart", exc)
            return None

    def _on_served(self) -> None:
        # Stopped normally: the runs' containers are gone, and the reaper with them.
        reaper, self._reaper = self._reaper, None
        if reaper is not None:
            reaper.kill()
            reaper.wait()

    def _user(self) -> str:
        rootless = self._engine_facts().job_user
        if rootless is not None:
            return rootless
        # Root on the provider: the job runs as nobody, not as (capability-less) root.
        return NOBODY if os.getuid() == 0 else f"{os.getuid()}:{os.getgid()}"

    def _engine_facts(self) -> ContainerEngine:
        """Docker or Podman, rootless or not: asked once (blocking, from a worker thread)."""
        if self._facts is None:
            self._facts = self.container_host.engine(self.client())
        return self._facts

    def _chown(self, run: JobRun) -> None:
        # Rootless, the job runs as the engine's own user, who owns the workspace already.
        if os.getuid() != 0 or self._engine_facts().rootless:
            return
        workspace = safe_paths.real_dir(run.workspace, what="the job's workspace")
        # fwalk with dir fds, never following a link: a folder the job swapped for a link
        # to /etc while we walk is not entered, and a link itself is what gets chowned.
        for _, dirnames, filenames, dirfd in os.fwalk(workspace, follow_symlinks=False):
            os.chown(dirfd, 65534, 65534)
            for name in (*dirnames, *filenames):
                os.chown(name, 65534, 65534, dir_fd=dirfd, follow_symlinks=False)

    @staticmethod
    def _workspace_source(run: JobRun) -> Path:
        # The job's folder itself: a workspace that is a link could mount anything.
        workspace = safe_paths.real_dir(run.workspace, what="the job's workspace")
        return workspace.resolve()

    def _base_options(self, run: JobRun, step: str) -> dict[str, Any]:
        from docker.types import Mount

        limits = run.limits
        return {
            "image": self.image_for(run),
            "working_dir": "/workspace",
            "user": self._user(),
            "labels": self.labels(run, step),
            "mounts": [
                Mount("/workspace", str(self._workspace_source(run)), type="bind"),
                *(
                    Mount(f"/workspace/{target}", str(source), type="bind", read_only=True)
                    for source, target in run.inputs
                ),
            ],
            "mem_limit": f"{limits.memory_mb}m",
            "memswap_limit": f"{limits.memory_mb}m",  # the same: no swap beyond the limit
            "nano_cpus": int(limits.cpu_cores * 1e9),
            "pids_limit": limits.pids,
            "cap_drop": ["ALL"],
            "security_opt": ["no-new-privileges"],
            "read_only": True,
            "tmpfs": {"/tmp": _tmpfs_options(limits)},
            "detach": True,
        }

    # --- prepare -------------------------------------------------------------------------

    async def prepare(self, run: JobRun, script: bytes | None = None) -> None:
        image = self.image_for(run)
        try:
            await self._call(self.client().images.get, image)
        except EngineError:
            raise
        except Exception as exc:
            raise EngineError(
                "image",
                f"image {image} is not on this provider: pull it (`nunet-tui onboard-ml`)"
                " or build it (scripts/build_test_image.sh for the scikit-learn test image)",
            ) from exc
        await self._call(self._engine_facts)  # before any options are built in this thread
        await super().prepare(run, script)
        await trio.to_thread.run_sync(self._chown, run)

    async def _install(self, state: RunState) -> None:
        run = state.run
        await trio.to_thread.run_sync(self._chown, run)  # the step runs as the job's user
        options = self._base_options(run, "install")
        options.update(
            command=[
                "python3",
                "-m",
                "pip",
                "install",
                "--no-cache-dir",
                "--disable-pip-version-check",
                "--no-input",
                # Wheels only: an sdist's build code would run here, with the network the
                # job itself never gets (the provider's LAN included), chosen by a stranger.
                "--only-binary=:all:",
                "--target",
                "/workspace/.deps",
                *run.spec.deps,
            ],
            environment={"HOME": "/tmp", "PYTHONUNBUFFERED": "1", **NO_NVIDIA_GPU},
            network_mode=self.install_network,
        )
        container = await self._call(self.client().containers.create, **options)
        try:
            await self._call(container.start)
            with trio.move_on_after(INSTALL_TIMEOUT_S) as scope:
                result = await trio.to_thread.run_sync(
                    functools.partial(container.wait, timeout=INSTALL_TIMEOUT_S + 30),
                    abandon_on_cancel=True,
                )
            if scope.cancelled_caught:
                raise EngineError(
                    "deps", f"installing dependencies took over {INSTALL_TIMEOUT_S} s"
                )
            output = await self._call(container.logs, stdout=True, stderr=True)
            lines = output.decode("utf-8", "replace").splitlines()
            for line in lines[-40:]:
                state.logs.append("system", line)
            if result.get("StatusCode") != 0:
                raise EngineError(
                    "deps",
                    f"installing dependencies failed: {lines[-1] if lines else 'pip failed'}",
                )
        finally:
            with trio.CancelScope(shield=True):
                await self._call(container.remove, force=True)

    # --- run -----------------------------------------------------------------------------

    def environment(self, run: JobRun) -> dict[str, str]:
        threads = str(max(1, int(run.limits.cpu_cores)))
        env = {
            **run.spec.env,
            "HOME": "/workspace",
            "WORKSPACE": "/workspace",
            "PYTHONUNBUFFERED": "1",  # each line reaches the consumer as it is printed
            "PYTHONDONTWRITEBYTECODE": "1",
            "OMP_NUM_THREADS": threads,
            "OPENBLAS_NUM_THREADS": threads,
            "MKL_NUM_THREADS": threads,
            "MPLBACKEND": "Agg",
        }
        if run.spec.deps:
            env["PYTHONPATH"] = "/workspace/.deps"
        env.update(self._gpu_environment(run))
        return env

    def _gpu_environment(self, run: JobRun) -> dict[str, str]:
        """What NVIDIA's runtime reads to pick cards. Images set it themselves (the CUDA and
        PyTorch images: NVIDIA_VISIBLE_DEVICES=all), and where NVIDIA's runtime is Docker's
        default it acts on it even without a device request: a CPU job would get every GPU."""
        if run.spec.device == "gpu" and run.gpus and run.gpus[0].vendor == "nvidia":
            # The same cards as the device request (job_gpu_options), never "all".
            ids = self.container_host.nvidia_device_ids(run.gpus)
            return {"NVIDIA_VISIBLE_DEVICES": ",".join(ids)}
        return dict(NO_NVIDIA_GPU)

    async def _start_one(self, run: JobRun) -> None:
        state = self.state(run)
        if state.started:
            raise EngineError("job", f"job {run.job_id} was already started")
        options = self._base_options(run, "run")
        options.update(
            command=list(state.command or ("python3", "-u", f"/workspace/{state.entry}")),
            environment=self.environment(run),
            network_mode="none",
        )
        if run.limits.disk_mb:  # one file past the spec's disk, between walks (disk_quota)
            from docker.types import Ulimit

            size = run.limits.disk_mb << 20
            options["ulimits"] = [Ulimit(name="fsize", soft=size, hard=size)]
        if run.spec.device == "gpu":
            vendor = gpu_vendor(run)
            await self._call(self.container_host.check_gpu_runtime, vendor, self.docker_host)
            # Only the onboarded cards (run.gpus), never every GPU of the machine.
            options.update(self.container_host.job_gpu_options(run.gpus))
        container = await self._call(self.client().containers.create, **options)
        sock = None
        try:
            # Attached before it starts: the stream then has every line, from the first.
            sock = await self._call(
                self._stream_client.api.attach_socket,
                container.id,
                params={"stdout": 1, "stderr": 1, "stream": 1},
            )
            await self._call(container.start)
        except Exception as exc:
            with trio.CancelScope(shield=True):
                if sock is not None:
                    sock.close()
                await self._call(container.remove, force=True)
            raise self.container_host.explain_error(exc) or EngineError(
                "docker", f"the job's container did not start: {exc}"
            ) from exc
        self._containers[run.job_id] = container
        state.started = True
        state.meter.start()
        self._spawn(self._supervise, state, container, sock)
        self._watch_disk(state)

    async def _supervise(self, state: RunState, container: Any, sock: Any) -> None:
        run = state.run
        token = trio.lowlevel.current_trio_token()
        timed_out = False
        exit_code: int | None = None
        try:
            async with trio.open_nursery() as nursery:
                reader = LogReader(sock, self._sink(state), token)
                read_scope = trio.CancelScope()
                read_done = trio.Event()
                sampler = trio.CancelScope()
                nursery.start_soon(self._read_logs, state, reader, read_scope, read_done)
                nursery.start_soon(self._read_stats, state, container.id, token, sampler)
                wait = functools.partial(
                    self._stream_client.api.wait, container.id, timeout=run.limits.timeout_s + 60
                )
                with trio.move_on_after(run.limits.timeout_s) as scope:
                    result = await trio.to_thread.run_sync(wait, abandon_on_cancel=True)
                    exit_code = int(result.get("StatusCode", -1))
                if scope.cancelled_caught:
                    timed_out = True
                    await self._thaw(run.job_id, container)  # Docker kills no paused container
                    await self._call(container.kill)
                    result = await self._call(self._stream_client.api.wait, container.id)
                    exit_code = int(result.get("StatusCode", -1))
                sampler.cancel()
                await _until_quiet(reader, read_scope, read_done)
            await self._call(container.reload)
            oom = bool(container.attrs.get("State", {}).get("OOMKilled"))
            state.logs.flush()
            self._finish(state, self._status(state, exit_code, timed_out, oom))
        finally:
            self._containers.pop(run.job_id, None)
            self._paused.discard(run.job_id)
            with trio.CancelScope(shield=True):
                # Already gone, or dockerd away: cleanup_orphans catches the rest.
                with contextlib.suppress(Exception):
                    await self._call(container.remove, force=True)
                if not state.done.is_set():
                    self._finish(state, ExitStatus(exit_code, "failed", "the executor failed"))

    def _status(
        self, state: RunState, exit_code: int | None, timed_out: bool, oom: bool
    ) -> ExitStatus:
        limit = state.run.limits.memory_mb
        if state.stop is not None:
            return ExitStatus(exit_code, *state.stop)
        if timed_out:
            return ExitStatus(exit_code, "timeout", self._timeout_reason(state.run))
        if oom:
            return ExitStatus(exit_code, "oom", f"out of memory: the limit is {limit} MB")
        if exit_code == 0:
            return ExitStatus(0, "completed", "")
        disk_mb = state.run.limits.disk_mb
        if wrote_too_large(disk_mb, exit_code == 128 + signal.SIGXFSZ, state.stderr_tail.lines):
            return ExitStatus(exit_code, "failed", file_too_large(disk_mb or 0))
        if exit_code == 137:  # SIGKILL we did not send: the kernel's OOM killer, as a rule
            return ExitStatus(
                137, "oom", f"killed (exit 137), most likely out of memory ({limit} MB)"
            )
        if any("MemoryError" in line for line in state.stderr_tail.lines):
            return ExitStatus(exit_code, "oom", f"out of memory: the limit is {limit} MB")
        code = exit_code if exit_code is not None else -1
        return ExitStatus(exit_code, "failed", failure_reason(code, state.stderr_tail.lines))

    @staticmethod
    def _sink(state: RunState) -> Callable[[str, bytes], None]:
        def feed(stream: str, chunk: bytes) -> None:
            state.logs.feed(stream, chunk)  # type: ignore[arg-type]
            if stream == "stderr":
                state.stderr_tail.feed(chunk)

        return feed

    async def _read_logs(
        self, state: RunState, reader: LogReader, scope: trio.CancelScope, done: trio.Event
    ) -> None:
        try:
            with scope:
                await trio.to_thread.run_sync(reader.read, abandon_on_cancel=True)
        except Exception as exc:  # the container vanished under us: say so, don't crash
            state.logs.append("system", f"log stream ended: {exc}")
        finally:
            reader.close()
            done.set()

    async def _read_stats(
        self, state: RunState, cid: str, token: Any, scope: trio.CancelScope
    ) -> None:
        def read() -> None:
            for stats in self._stream_client.api.stats(cid, stream=True, decode=True):
                if state.done.is_set():
                    return
                cpu = stats.get("cpu_stats", {}).get("cpu_usage", {}).get("total_usage", 0) / 1e9
                memory = stats.get("memory_stats", {})
                ram = max(0, memory.get("usage", 0) - memory.get("stats", {}).get("cache", 0))
                networks = stats.get("networks") or {}
                rx = sum(n.get("rx_bytes", 0) for n in networks.values())
                tx = sum(n.get("tx_bytes", 0) for n in networks.values())
                sample = functools.partial(
                    state.meter.sample, cpu_s=cpu, ram_mb=ram / (1 << 20), net_rx=rx, net_tx=tx
                )
                trio.from_thread.run_sync(sample, trio_token=token)

        # Stats are best effort: a missing sample is not a failure.
        with scope, contextlib.suppress(Exception):
            await trio.to_thread.run_sync(read, abandon_on_cancel=True)

    async def _stop_one(self, state: RunState, outcome: Outcome, reason: str) -> None:
        state.stop = (outcome, reason)
        container = self._containers.get(state.run.job_id)
        if container is None:
            return
        try:
            await self._thaw(state.run.job_id, container)  # a frozen job cannot handle SIGTERM
            await self._call(container.stop, timeout=self.grace_s)
        except Exception:  # it ended meanwhile: the supervisor finishes the run either way
            pass
        await state.done.wait()

    # --- tunnels (engine/jobs/tunnel_provider.py, Pipes: tunnel_relay.py) -------------------------

    def _running_container(self, run: JobRun) -> Any:
        run = self.live_run(run)  # a job with steps: its first running replica's
        container = self._containers.get(run.job_id)
        if container is None or run.job_id in self._paused:
            raise EngineError("tunnel", f"job {run.job_id} has no running container now")
        return container

    def container_ref(self, run: JobRun) -> str:
        """The id of ``run``'s container (a replica's: its own run): the gang's overlay joins
        it (jobs/provider_gang.py)."""
        container = self._containers.get(run.job_id)
        if container is None:
            raise EngineError("overlay", f"replica {run.job_id} has no container now")
        return str(container.id)

    async def container_pid(self, ref: str) -> int:
        """The host pid of running container ``ref`` (id or name): the overlay's device is
        made in its network namespace (jobs/overlay_join.py)."""
        import docker.errors

        try:
            attrs = (await self._call(self.client().containers.get, ref)).attrs
        except docker.errors.NotFound as exc:
            raise EngineError("not_found", f"no container {ref!r} on this node") from exc
        pid = int(attrs.get("State", {}).get("Pid") or 0)
        if pid <= 0:
            raise EngineError("invalid", f"container {ref!r} is not running")
        return pid

    async def open_tunnel(self, run: JobRun, port: int) -> Any:
        """A pipe to 127.0.0.1:``port`` in the job's container, which keeps no network: a
        forwarder run there by ``docker exec`` (executors/docker_exec.py)."""
        from engine.jobs.executors.docker_exec import open_forwarder

        self.client()
        container = self._running_container(run)
        return await open_forwarder(self._stream_client.api, container.id, port, self._user())

    async def exec_shell(
        self, run: JobRun, command: tuple[str, ...], rows: int, cols: int, term: str
    ) -> Any:
        """An interactive session (``docker exec`` with a TTY) in the job's container, as
        the job's user, in /workspace, with the job's environment."""
        from engine.jobs.executors.docker_exec import open_shell

        self.client()
        container = self._running_container(run)
        return await open_shell(
            self._stream_client.api,
            container.id,
            command,
            rows,
            cols,
            term,
            self._user(),
            self.environment(run),
        )

    async def _pause_one(self, state: RunState) -> None:
        container = self._containers.get(state.run.job_id)
        if container is None:
            return
        import docker.errors

        # Marked before asking: a pause that fails late (dockerd's answer timed out) may have
        # frozen it all the same, and then only the resume thaws it.
        self._paused.add(state.run.job_id)
        try:
            await self._call(container.pause)
        except docker.errors.APIError as exc:
            # It has just exited (Docker: 409; Podman: 500 "container state improper"). Its
            # workspace no longer changes, so the snapshot is consistent without a pause; the
            # supervisor still has its last lines to read.
            if exc.status_code != 409 and "state improper" not in str(exc.explanation):
                raise
            self._paused.discard(state.run.job_id)

    async def _resume_one(self, state: RunState) -> None:
        container = self._containers.get(state.run.job_id)
        if container is not None:
            await self._thaw(state.run.job_id, container)

    async def _thaw(self, job_id: str, container: Any) -> None:
        """Unpause the container if a checkpoint paused it (one that is not paused, or is
        gone, is no error: the pause may never have happened)."""
        if job_id in self._paused:
            self._paused.discard(job_id)
            with contextlib.suppress(Exception):
                await self._call(container.unpause)


def _tmpfs_options(limits: Limits) -> str:
    """The job's /tmp: its size and, as in /workspace, at most jobs.max_files inodes (a
    tmpfs counts empty files against no size, and otherwise allows half the RAM's pages)."""
    options = f"rw,nosuid,nodev,size={limits.tmp_mb}m"
    return options + (f",nr_inodes={limits.max_files}" if limits.max_files else "")


# NVIDIA's runtime mounts no GPU for "void" (unlike an empty value or "none", which still
# sets up the driver's libraries): the value for every container not given NVIDIA cards.
NO_NVIDIA_GPU = {"NVIDIA_VISIBLE_DEVICES": "void"}


def gpu_vendor(run: JobRun) -> GpuVendor:
    """The vendor of a GPU job's cards: the one it asked for, else the provider's own (a job
    that named none is not an NVIDIA job on an AMD machine)."""
    if not run.gpus:
        raise EngineError("no_gpu", f"job {run.job_id} is a GPU job but was given no onboarded GPU")
    vendor = run.gpus[0].vendor
    if run.spec.gpu_vendor not in (None, vendor):
        raise EngineError(
            "no_gpu", f"job {run.job_id} asks for {run.spec.gpu_vendor} GPUs; this one is {vendor}"
        )
    return vendor


async def _until_quiet(reader: LogReader, scope: trio.CancelScope, done: trio.Event) -> None:
    """Wait for the log stream to end after the container exited. dockerd ends it once every
    line is sent, which for a job that printed a flood in its last second takes a while: only
    a stream that has sent nothing for LOG_IDLE_S is given up (a dockerd that never ends it)."""
    while not done.is_set():
        quiet = time.monotonic() - reader.last_progress
        if quiet >= LOG_IDLE_S:
            scope.cancel()
            return
        with trio.move_on_after(LOG_IDLE_S - quiet):
            await done.wait()
