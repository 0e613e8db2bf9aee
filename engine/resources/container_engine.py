"""Which container engine answers at DOCKER_HOST, and what it can and cannot enforce.

The Docker executor talks the Docker API; Podman serves the same API, rootful or rootless, and
a rootless Docker does too. They differ where it matters to a provider: a rootless engine maps
the container's root onto the unprivileged user that runs it (so the job runs as "root" in its
user namespace, never as a host uid it cannot write as), and a rootless engine on cgroup v1,
or on v2 without the controllers delegated, silently ignores memory, CPU and pids limits
("Resource limits are not supported and ignored on cgroups V1 rootless systems"). Podman's
Docker-compatible /info claims every limit regardless, so its own /libpod/info is asked.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# The controllers a job's limits need (memory_mb, cpu_cores, pids).
LIMIT_CONTROLLERS = ("memory", "cpu", "pids")
# Any version prefix reaches Podman's own API; the compatible one has none of it (404).
LIBPOD_INFO = "/v4.0.0/libpod/info"


@dataclass(frozen=True)
class EngineFacts:
    name: str  # "Docker" or "Podman"
    version: str
    rootless: bool
    cgroup_version: str  # "1", "2" or "" when the engine does not say
    unenforced: tuple[str, ...] = ()  # of LIMIT_CONTROLLERS: limits the engine ignores

    @property
    def label(self) -> str:
        return f"{self.name} {self.version}{' (rootless)' if self.rootless else ''}".strip()

    @property
    def job_user(self) -> str | None:
        """Who a job's container runs as: None to keep the executor's own choice. Rootless,
        container root is the engine's unprivileged user: the one uid that can write the
        workspace (any other maps to a subordinate id that cannot)."""
        return "0:0" if self.rootless else None

    def limits_problem(self) -> str:
        """Why the job limits do not hold here, with what to do ("" when they do)."""
        if not self.unenforced:
            return ""
        where = (
            "a rootless engine on cgroup v1"
            if self.cgroup_version == "1"
            else "the cgroup controllers are not delegated to the engine's user"
        )
        return (
            f"job limits not enforced ({', '.join(self.unenforced)}): {where}; use cgroup v2 "
            "and delegate them (systemd: `Delegate=cpu cpuset io memory pids` for user@.service)"
        )


def facts_from(
    info: Mapping[str, Any], version: Mapping[str, Any], libpod: Mapping[str, Any] | None
) -> EngineFacts:
    """The facts from the engine's /info and /version answers (and Podman's /libpod/info)."""
    components = version.get("Components") or []
    names = [str(c.get("Name", "")) for c in components if isinstance(c, Mapping)]
    podman = any("podman" in name.lower() for name in names)
    server = str(info.get("ServerVersion") or version.get("Version") or "")
    if podman:
        host = (libpod or {}).get("host") or {}
        security = host.get("security") or {}
        rootless = bool(security.get("rootless"))
        cgroup = str(host.get("cgroupVersion") or "").removeprefix("v")
        controllers = host.get("cgroupControllers")
        if isinstance(controllers, list):
            unenforced = tuple(c for c in LIMIT_CONTROLLERS if c not in controllers)
        else:  # not told: only a rootless engine on v1 is known to ignore them
            unenforced = LIMIT_CONTROLLERS if rootless and cgroup == "1" else ()
        return EngineFacts("Podman", server, rootless, cgroup, unenforced)
    options = [str(o) for o in info.get("SecurityOptions") or []]
    rootless = any(o == "name=rootless" or o.startswith("name=rootless,") for o in options)
    cgroup = str(info.get("CgroupVersion") or "")
    flags = {"memory": "MemoryLimit", "cpu": "CpuCfsQuota", "pids": "PidsLimit"}
    unenforced = tuple(c for c in LIMIT_CONTROLLERS if info.get(flags[c]) is False)
    if rootless and cgroup == "1":
        unenforced = LIMIT_CONTROLLERS
    return EngineFacts("Docker", server, rootless, cgroup, unenforced)


def probe_facts(client: Any) -> EngineFacts:
    """Ask a docker-py ``DockerClient`` (blocking; raises what docker-py raises)."""
    info = client.info()
    version = client.version()
    libpod = None
    names = [str(c.get("Name", "")) for c in version.get("Components") or []]
    if any("podman" in name.lower() for name in names):
        api = client.api
        answer = api._get(api.base_url + LIBPOD_INFO)
        libpod = api._result(answer, True)
    return facts_from(info, version, libpod)
