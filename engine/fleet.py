"""Many rigs at once (issue 27 §4): each ``[fleet]`` rig reached through its control socket
or its HTTP API, asked what a fleet view needs, and summed up in one ``RigSnapshot``.

Client side only, like engine/control_client.py: ``nunet-tui fleet --json`` and the fleet
screen (nunet_tui/screens/fleet.py) use it. Every rig is a peer we do not control (a socket
forwarded over SSH, an API on another host): its answers are decoded by the commands' own
types, its text is made safe before it is shown, and a rig that does not answer within the
timeout is "unreachable", never a stall of the others (each is polled in its own thread).
"""

from __future__ import annotations

import datetime
import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any, Literal, Protocol

import msgspec

from engine import api
from engine.config import FleetRig, FleetSettings, Paths
from engine.control_client import DAEMON_GONE, MAX_LINE, ControlClient
from engine.domain.safe_text import safe
from engine.errors import EngineError

RigState = Literal["online", "offline", "unreachable"]

HOT_C = 85.0
"""A GPU at or above this temperature is an alert."""
DISK_LOW_MB = 5 * 1024
"""Less free disk than this (the available capacity's disk) is an alert."""
MAX_TOKEN = 4096
UNREACHABLE = "unreachable"


class RigSnapshot(msgspec.Struct, kw_only=True):
    """One rig as the fleet view shows it. ``online``: its daemon answered and its network
    is up; ``offline``: its daemon answered, its network is down; ``unreachable``: no daemon
    answered (``reason`` says why)."""

    name: str
    via: str  # how it is reached: "home /srv/rig-1", "socket …", "url http://…"
    state: RigState
    reason: str = ""
    peer_id: str = ""
    mode: str = ""  # provider, consumer, or "" (not chosen yet, or unreachable)
    onboarded: bool = False
    paused: bool = False
    gpu_count: int = 0
    gpu_hottest_c: float | None = None
    gpu_utilization: float | None = None  # the mean over its GPUs, percent
    running_jobs: int = 0
    # NTX base units paid to this rig as provider by escrows settled since local midnight.
    paid_today_units: int = 0
    disk_free_mb: int | None = None
    alerts: tuple[str, ...] = ()
    # The rig's home: the listed one, else the one its daemon reports (on its own host).
    home: str = ""


class RigSource(Protocol):
    """Where the fleet view gets its rigs' answers: ``LiveRigs`` (real sockets and HTTP);
    tests/fakes/fleet.py keeps a fake for the screen's snapshots."""

    @property
    def rigs(self) -> Sequence[FleetRig]: ...

    def ask(self, rig: FleetRig, commands: Sequence[api.Command]) -> list[Any]:
        """Each command's reply, or the EngineError the rig answered it with, in order;
        raises EngineError(UNREACHABLE) (or OSError) when the rig cannot be reached."""
        ...


def local_home(rig: FleetRig, shot: RigSnapshot | None) -> str | None:
    """The home the app can attach to for ``rig`` on this machine, or None: a rig listed by
    its home, or by the very socket its reported home uses; never one that is unreachable
    (nor one reached by URL: the app attaches by home and socket, not HTTP)."""
    if shot is None or shot.state == "unreachable":
        return None
    if rig.home:
        return rig.home
    local = rig.socket and shot.home
    if local and Paths.for_home(shot.home).control_socket == Path(rig.socket):
        return shot.home
    return None


def describe(rig: FleetRig) -> str:
    if rig.home:
        return f"home {rig.home}"
    if rig.socket:
        return f"socket {rig.socket}"
    return f"url {rig.url}"


class LiveRigs:
    """The real rigs of a ``[fleet]`` list; relative paths are from ``config_dir``."""

    def __init__(self, fleet: FleetSettings, config_dir: Path) -> None:
        self._fleet = fleet
        self._config_dir = config_dir
        # Each rig with its paths made absolute, as it is shown and reached.
        self._rigs = [
            msgspec.structs.replace(
                rig,
                **{
                    way: str(self.path(getattr(rig, way)))
                    for way in ("home", "socket", "token_file")
                    if getattr(rig, way)
                },
            )
            for rig in fleet.rigs
        ]

    @property
    def rigs(self) -> Sequence[FleetRig]:
        return self._rigs

    @property
    def timeout(self) -> float:
        return self._fleet.timeout_s

    def path(self, text: str) -> Path:
        return self._config_dir / Path(text).expanduser()

    def socket_of(self, rig: FleetRig) -> Path:
        if rig.home:
            return Paths.for_home(rig.home).control_socket
        return Path(rig.socket)

    def ask(self, rig: FleetRig, commands: Sequence[api.Command]) -> list[Any]:
        if rig.url:
            return [_answer(partial(self._http, rig, command)) for command in commands]
        socket = self.socket_of(rig)
        try:
            client = ControlClient(socket, timeout=self.timeout)
        except FileNotFoundError:
            raise EngineError(
                UNREACHABLE, f"no control socket at {socket} (is its daemon running?)"
            ) from None
        except ConnectionRefusedError:
            raise EngineError(
                UNREACHABLE, f"nothing answers on {socket} (its daemon stopped?)"
            ) from None
        try:
            return [
                _answer(partial(client.call_blocking, command, timeout=self.timeout))
                for command in commands
            ]
        finally:
            client.close()

    def _http(self, rig: FleetRig, command: api.Command) -> Any:
        token_path = Path(rig.token_file)
        try:
            with open(token_path, "rb") as handle:
                token = handle.read(MAX_TOKEN).decode("ascii", "replace").strip()
        except OSError as exc:
            raise EngineError(
                UNREACHABLE, f"cannot read its token_file {token_path} ({exc.strerror or exc})"
            ) from None
        tag = str(command.__struct_config__.tag)
        body = json.dumps(api.to_builtins(command)).encode()
        request = urllib.request.Request(
            f"{rig.url.rstrip('/')}/v1/{tag}",
            data=body,
            method="POST",
            headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                data = _read(response, time.monotonic() + self.timeout)
        except urllib.error.HTTPError as exc:
            data = exc.read(MAX_LINE + 1)
            error = _json(data).get("error") if isinstance(_json(data), dict) else None
            if isinstance(error, dict):
                raise EngineError.from_wire(error) from None
            raise EngineError(UNREACHABLE, f"its API answered HTTP {exc.code}") from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise EngineError(UNREACHABLE, f"{rig.url} does not answer ({reason})") from None
        if len(data) > MAX_LINE:
            raise EngineError("protocol", "its API sent an oversized reply")
        try:
            return api.decode_reply(command, _json(data))
        except msgspec.ValidationError as exc:
            raise EngineError("protocol", f"its API sent a malformed reply: {exc}") from None


def _read(response: Any, deadline: float) -> bytes:
    """The body, at most MAX_LINE + 1 bytes, read by ``deadline``: a rig that sends a byte
    now and then never holds its poll past it (each read alone has the socket's timeout)."""
    data = bytearray()
    while len(data) <= MAX_LINE:
        if time.monotonic() > deadline:
            raise EngineError(UNREACHABLE, "its API did not finish its reply in time")
        chunk = response.read1(65536)
        if not chunk:
            break
        data += chunk
    return bytes(data)


def _answer(call: Callable[[], Any]) -> Any:
    """The reply, or the rig's refusal as a value; losing the rig is raised (it is then
    unreachable as a whole)."""
    try:
        return call()
    except EngineError as exc:
        if exc.code in (UNREACHABLE, DAEMON_GONE, "timeout"):
            raise
        return exc


def _json(data: bytes) -> Any:
    try:
        return json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None


def _midnight(now: float) -> float:
    today = datetime.datetime.fromtimestamp(now).date()
    return datetime.datetime.combine(today, datetime.time()).timestamp()


FLEET_COMMANDS: tuple[api.Command, ...] = (
    api.GetInfo(),
    api.GetNetworkStatus(),
    api.GetGpuStatus(),
    api.ListJobs(),
    api.RewardList(),
    api.GetCapacity(view="available"),
)


def snapshot(source: RigSource, rig: FleetRig, now: float) -> RigSnapshot:
    """``rig`` as it answers now: unreachable with the reason when it does not."""
    via = safe(describe(rig))
    home = rig.home
    try:
        info, network, gpus, jobs, escrows, disk = source.ask(rig, FLEET_COMMANDS)
        if isinstance(info, EngineError):
            raise EngineError(info.code, f"it refused the info command: {info.message}")
    except (EngineError, OSError) as exc:
        reason = exc.message if isinstance(exc, EngineError) else str(exc.strerror or exc)
        return RigSnapshot(
            name=rig.name,
            via=via,
            state="unreachable",
            reason=safe(reason),
            alerts=(safe(f"unreachable: {reason}"),),
            home=home,
        )
    # What a rig refuses beyond its info (no wallet, no GPU reader) is left out, not fatal.
    if not isinstance(network, api.NetworkStatus):
        network = api.NetworkStatus(channel=None, online=False)
    if not isinstance(gpus, api.GpuStatusReply):
        gpus = api.GpuStatusReply()
    if not isinstance(jobs, api.JobList):
        jobs = api.JobList()
    if not isinstance(escrows, api.EscrowList):
        escrows = api.EscrowList()
    disk_mb = disk.disk_mb if isinstance(disk, api.Capacity) else None
    temps = [g.temperature_c for g in gpus.gpus if g.temperature_c is not None]
    utils = [g.utilization_gpu for g in gpus.gpus if g.utilization_gpu is not None]
    since = _midnight(now)
    paid_today = sum(
        e.settled()[0] for e in escrows.escrows if e.role == "provider" and e.updated_at >= since
    )
    running = sum(1 for job in jobs.jobs if job.state == "running" and job.role == "provider")
    alerts: list[str] = []
    if not network.online:
        alerts.append("offline: its network is down")
    alerts.extend(
        f"GPU {g.index} hot: {g.temperature_c:.0f} °C"
        for g in gpus.gpus
        if g.temperature_c is not None and g.temperature_c >= HOT_C
    )
    if disk_mb is not None and disk_mb < DISK_LOW_MB:
        alerts.append(f"disk low: {disk_mb / 1024:.1f} GB free")
    onboarded = info.onboarded
    return RigSnapshot(
        name=rig.name,
        via=via,
        state="online" if network.online else "offline",
        peer_id=safe(info.peer_id),
        mode=info.mode or "",
        onboarded=onboarded is not None,
        paused=onboarded is not None and onboarded.state == "paused",
        gpu_count=len(gpus.gpus),
        gpu_hottest_c=max(temps) if temps else None,
        gpu_utilization=sum(utils) / len(utils) if utils else None,
        running_jobs=running,
        paid_today_units=paid_today,
        disk_free_mb=disk_mb,
        alerts=tuple(alerts),
        home=home or safe(info.home),
    )


def poll(
    source: RigSource, timeout: float, now: float, rigs: Sequence[FleetRig] | None = None
) -> list[RigSnapshot]:
    """Every rig at once, each in its own thread; one that has not answered within
    ``2 x timeout + 1`` s (its own calls time out sooner) is unreachable, and the others never
    wait on it. Daemon threads: a rig that hangs on never keeps the process from exiting."""
    rigs = list(source.rigs if rigs is None else rigs)
    results: dict[int, RigSnapshot] = {}
    done = threading.Condition()

    def run(index: int, rig: FleetRig) -> None:
        shot = snapshot(source, rig, now)
        with done:
            results[index] = shot
            done.notify_all()

    for index, rig in enumerate(rigs):
        threading.Thread(target=run, args=(index, rig), name="nunet-fleet", daemon=True).start()
    limit = timeout * 2 + 1
    with done:
        done.wait_for(lambda: len(results) == len(rigs), timeout=limit)
        return [
            results.get(index)
            or RigSnapshot(
                name=rig.name,
                via=safe(describe(rig)),
                state="unreachable",
                reason=f"no answer within {limit:.0f} s",
                alerts=(f"unreachable: no answer within {limit:.0f} s",),
                home=rig.home,
            )
            for index, rig in enumerate(rigs)
        ]


def act(source: RigSource, rig: FleetRig, action: Literal["pause", "resume"]) -> api.Onboarding:
    """Pause or resume one rig (its node stops or starts taking jobs)."""
    command: api.Command = api.Pause() if action == "pause" else api.Resume()
    (result,) = source.ask(rig, [command])
    if isinstance(result, EngineError):
        raise result
    reply: api.Onboarding = result
    return reply
