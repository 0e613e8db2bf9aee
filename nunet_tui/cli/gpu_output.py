"""The GPU scripting commands: parsers, runners and how they print.

``nunet-tui gpu status [--json] [--watch]``, ``gpu doctor [--json] [--fix]``,
``gpu capabilities [--json] [--in-container]`` and ``onboard-ml [--json]`` (also
``gpu onboard-ml``). Runners that print as they go (--watch, --fix, pull progress) return
None, which tells main.py that nothing is left to print.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from engine import api
from engine.client import EngineClient
from engine.domain.safe_text import safe
from engine.errors import EngineError
from nunet_tui.cli.output import safe_lines, show, show_json

WATCH_INTERVAL_S = 1.0
PULL_TIMEOUT_S = 24 * 3600.0


def add_parsers(sub: Any, common: argparse.ArgumentParser) -> None:
    gpu = sub.add_parser("gpu", help="GPUs: live status, doctor, capabilities, ML images")
    gpu_sub = gpu.add_subparsers(dest="gpu_command", metavar="GPU_COMMAND", required=True)
    status = gpu_sub.add_parser("status", parents=[common], help="every GPU now")
    status.add_argument(
        "--watch",
        action="store_true",
        help="refresh every second until Ctrl-C (with --json: one JSON object per line, NDJSON)",
    )
    doctor = gpu_sub.add_parser(
        "doctor",
        parents=[common],
        help="what stands between this machine and GPU jobs (exits 1 while anything does)",
    )
    doctor.add_argument(
        "--fix", action="store_true", help="run the fix commands after you type yes"
    )
    caps = gpu_sub.add_parser(
        "capabilities", parents=[common], help="CUDA/ROCm, compute capability, tensor cores, HIP"
    )
    caps.add_argument(
        "--in-container",
        action="store_true",
        help="also check inside the framework container (needs Docker)",
    )
    gpu_sub.add_parser("onboard-ml", parents=[common], help="pre-pull the ML framework images")
    sub.add_parser("onboard-ml", parents=[common], help="pre-pull the ML framework images")


# --- runners ---------------------------------------------------------------------------------


def run_status(
    args: argparse.Namespace,
    client: EngineClient,
    *,
    sleep: Callable[[float], None] = time.sleep,
) -> Any:
    reply: api.GpuStatusReply = client.call_blocking(api.GetGpuStatus())
    if not getattr(args, "watch", False):
        return reply
    as_json = getattr(args, "json", False)
    try:
        if as_json or not sys.stdout.isatty():
            while True:
                if as_json:
                    show_json(json_of(reply), indent=None, flush=True)
                else:
                    show(status_text(reply) + "\n", flush=True)
                sleep(WATCH_INTERVAL_S)
                reply = client.call_blocking(api.GetGpuStatus())
        from rich.live import Live
        from rich.text import Text

        with Live(Text(safe_lines(status_text(reply))), auto_refresh=False, screen=False) as live:
            while True:
                sleep(WATCH_INTERVAL_S)
                reply = client.call_blocking(api.GetGpuStatus())
                live.update(Text(safe_lines(status_text(reply))), refresh=True)
    except KeyboardInterrupt:
        return None


def run_doctor(
    args: argparse.Namespace,
    client: EngineClient,
    *,
    confirm: Callable[[str], str] = input,
    runner: Callable[[str], int] | None = None,
) -> Any:
    report: api.DoctorReport = client.call_blocking(api.GpuDoctor(), timeout=60.0)
    if not getattr(args, "fix", False):
        if report.ok:
            return report
        # The report still goes to stdout; the status says there is work to do (scripts:
        # `nunet-tui gpu doctor && start-rig`).
        if getattr(args, "json", False):
            show_json(json_of(report))
        else:
            show(doctor_text(report))
        problems = sum(not finding.ok for finding in report.findings)
        raise EngineError(
            "gpu_doctor", f"{problems} problem{'s' if problems != 1 else ''} found (see above)"
        )
    from engine.resources.gpu.doctor import apply_fixes, default_shell_runner

    show(doctor_text(report) + "\n")
    code = apply_fixes(report, confirm=confirm, runner=runner or default_shell_runner)
    if code != 0:
        raise EngineError("fix", "the fixes were not applied" if code == 1 else "a fix failed")
    return None


def run_capabilities(args: argparse.Namespace, client: EngineClient) -> Any:
    return client.call_blocking(
        api.GpuCapabilities(in_container=bool(args.in_container)), timeout=300.0
    )


def run_onboard_ml(args: argparse.Namespace, client: EngineClient) -> Any:
    as_json = getattr(args, "json", False)
    printer = PullPrinter(sys.stderr if as_json else sys.stdout)
    unsubscribe = client.subscribe(printer.on_event)
    try:
        report: api.MlImagesReport = client.call_blocking(
            api.PrepareMlImages(), timeout=PULL_TIMEOUT_S
        )
    finally:
        unsubscribe()
        printer.finish()
    if not report.ok:
        failures = [r.detail for r in report.results if r.status == "failed"]
        unique = list(dict.fromkeys(failures))
        if as_json:
            show_json(json_of(report))
        raise EngineError("pull_failed", "; ".join(unique))
    return report


RUNNERS: dict[str, Callable[[argparse.Namespace, EngineClient], Any]] = {
    "gpu status": run_status,
    "gpu doctor": run_doctor,
    "gpu capabilities": run_capabilities,
    "gpu onboard-ml": run_onboard_ml,
    "onboard-ml": run_onboard_ml,
}


# --- pull progress ---------------------------------------------------------------------------


class PullPrinter:
    """One line per image as its pull moves: a bar on a terminal, milestones otherwise."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream
        self._tty = bool(getattr(stream, "isatty", lambda: False)())
        self._lock = threading.Lock()
        self._last: dict[str, tuple[str, int]] = {}
        self._progress: Any = None
        self._tasks: dict[str, Any] = {}

    def on_event(self, event: api.Event) -> None:
        if not isinstance(event, api.ImagePullProgress):
            return
        with self._lock:
            if self._tty:
                self._bar(event)
            else:
                self._line(event)

    def _line(self, event: api.ImagePullProgress) -> None:
        step = int(event.percent // 10) * 10 if event.percent is not None else -1
        if self._last.get(event.image) == (event.status, step):
            return
        self._last[event.image] = (event.status, step)
        show(pull_line(event), file=self._stream, flush=True)

    def _bar(self, event: api.ImagePullProgress) -> None:
        if self._progress is None:
            from rich.console import Console
            from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn

            self._progress = Progress(
                TextColumn("{task.fields[image]}", markup=False),
                BarColumn(),
                TaskProgressColumn(),
                TextColumn("{task.fields[state]}", markup=False),
                console=Console(file=self._stream),
            )
            self._progress.start()
        task = self._tasks.get(event.image)
        if task is None:
            task = self._tasks[event.image] = self._progress.add_task(
                "", total=100.0, image=safe(event.image), state=safe(event.status)
            )
        state = event.detail if event.status == "failed" else event.status
        self._progress.update(task, completed=event.percent or 0.0, state=safe(state))

    def finish(self) -> None:
        with self._lock:
            if self._progress is not None:
                self._progress.stop()
                self._progress = None


def pull_line(event: api.ImagePullProgress) -> str:
    percent = f"{event.percent:5.1f}%" if event.percent is not None else "   ?  "
    size = (
        f"  {event.current_bytes / 1e6:,.0f}/{event.total_bytes / 1e6:,.0f} MB"
        if event.total_bytes
        else ""
    )
    tail = f"  {event.detail}" if event.detail else ""
    return f"{event.image:<50} {event.status:<10} {percent}{size}{tail}"


# --- JSON and text ---------------------------------------------------------------------------


def json_of(result: Any) -> dict[str, Any]:
    """What ``--json`` prints for a GPU result that this module prints as it goes (``--watch``,
    ``--fix``): the same as formatters.py's ``to_json`` for it."""
    data: dict[str, Any] = api.to_builtins(result)
    if (extra := JSON.get(type(result))) is not None:
        extra(result, data)
    return data


def _status_json(result: api.GpuStatusReply, data: dict[str, Any]) -> None:
    for gpu, snapshot in zip(data["gpus"], result.gpus, strict=True):
        gpu["memory_percent"] = snapshot.memory_percent


def _doctor_json(result: api.DoctorReport, data: dict[str, Any]) -> None:
    data["ok"] = result.ok
    data["fixes"] = list(result.fixes)


def _images_json(result: api.MlImagesReport, data: dict[str, Any]) -> None:
    data["ok"] = result.ok


def _na(value: float | int | None, unit: str = "", digits: int = 0) -> str:
    if value is None:
        return "n/a"
    return f"{value:,.{digits}f}{unit}"


def _bar(percent: float | None, width: int = 20) -> str:
    if percent is None:
        return "[" + " " * width + "]"
    filled = round(max(0.0, min(100.0, percent)) / 100 * width)
    return "[" + "#" * filled + "." * (width - filled) + "]"


def status_text(reply: api.GpuStatusReply) -> str:
    if not reply.gpus:
        return f"no GPU: {reply.reason or 'none found'}"
    lines: list[str] = []
    for gpu in reply.gpus:
        versions = ", ".join(
            part
            for part in (
                f"driver {gpu.driver_version}" if gpu.driver_version else "",
                f"CUDA {gpu.cuda_version}" if gpu.cuda_version else "",
                f"ROCm {gpu.rocm_version}" if gpu.rocm_version else "",
                f"CC {gpu.compute_capability}" if gpu.compute_capability else "",
            )
            if part
        )
        lines.append(f"GPU {gpu.index}  {gpu.vendor} {gpu.name}  {gpu.uuid}")
        if versions:
            lines.append(f"  {versions}")
        lines.append(f"  util   {_bar(gpu.utilization_gpu)} {_na(gpu.utilization_gpu, '%')}")
        memory = (
            f"{_na(gpu.memory_used_mb)} / {_na(gpu.memory_total_mb)} MB"
            if gpu.memory_total_mb
            else "n/a"
        )
        lines.append(f"  memory {_bar(gpu.memory_percent)} {memory}")
        temp = _na(gpu.temperature_c, " °C")
        if gpu.temperature_limit_c is not None:
            temp += f" (slowdown at {_na(gpu.temperature_limit_c, ' °C')})"
            if gpu.temperature_c is not None and gpu.temperature_c >= gpu.temperature_limit_c - 5:
                temp += "  HOT"
        lines.append(f"  temp   {temp}")
        power = _na(gpu.power_draw_w, " W", 1)
        if gpu.power_limit_w is not None:
            power += f" / {_na(gpu.power_limit_w, ' W', 0)}"
            if gpu.power_draw_w is not None and gpu.power_draw_w >= 0.95 * gpu.power_limit_w:
                power += "  AT LIMIT"
        lines.append(f"  power  {power}")
        for proc in gpu.processes:
            lines.append(
                f"    pid {proc.pid:<8} {safe(proc.name):<24} {_na(proc.used_memory_mb, ' MB')}"
            )
    return "\n".join(lines)


def doctor_text(report: api.DoctorReport) -> str:
    vendors = ", ".join(report.vendors) or "none"
    lines = [f"GPU doctor ({report.distro}; vendors: {vendors})"]
    for finding in report.findings:
        mark = "ok     " if finding.ok else "PROBLEM"
        lines.append(f"  {mark} {finding.check:<18} {finding.summary}")
        if finding.detail:
            lines.append(f"          {'':<18} {finding.detail}")
        if not finding.ok:
            for command in finding.fix:
                lines.append(f"          {'':<18} $ {command}")
    if report.ok:
        lines.append("all good")
    elif report.fixes:
        lines.append("fix with the commands above, or `nunet-tui gpu doctor --fix`")
    else:
        lines.append("problems found; none has a command that fixes it here")
    return "\n".join(lines)


def _capability_set(caps: api.CapabilitySet) -> list[str]:
    def flag(on: bool, version: str | None = None) -> str:
        return ("yes" + (f" ({version})" if version else "")) if on else "no"

    lines = [
        f"{caps.where}",
        f"  CUDA          {flag(caps.cuda, caps.cuda_version)}",
        f"  tensor cores  {flag(caps.tensor_cores)}",
        f"  ROCm          {flag(caps.rocm, caps.rocm_version)}",
        f"  HIP           {flag(caps.hip)}",
    ]
    for gpu in caps.gpus:
        cc = f"compute capability {gpu.compute_capability}" if gpu.compute_capability else ""
        tc = "" if gpu.tensor_cores is None else (", tensor cores" if gpu.tensor_cores else "")
        lines.append(f"  gpu {gpu.index}  {gpu.vendor} {gpu.name}  {cc}{tc}".rstrip())
    lines += [f"  note: {note}" for note in caps.notes]
    return lines


def capabilities_text(report: api.CapabilityReport) -> str:
    lines = _capability_set(report.host)
    if report.container is not None:
        lines += _capability_set(report.container)
    elif report.container_reason:
        lines.append(f"container: not checked: {report.container_reason}")
    return "\n".join(lines)


def images_text(report: api.MlImagesReport) -> str:
    if not report.results:
        return "no ML images selected (see [ml_images] in config.toml)"
    return "\n".join(
        f"{result.status:<8} {result.image}" + (f"  {result.detail}" if result.detail else "")
        for result in report.results
    )


# The GPU results this module formats (formatters.py merges every output module's TEXT), and
# the figures --json adds to their own fields.
TEXT: dict[type, Callable[[Any], str]] = {
    api.GpuStatusReply: status_text,
    api.DoctorReport: doctor_text,
    api.CapabilityReport: capabilities_text,
    api.MlImagesReport: images_text,
}
JSON: dict[type, Callable[[Any, dict[str, Any]], None]] = {
    api.GpuStatusReply: _status_json,
    api.DoctorReport: _doctor_json,
    api.MlImagesReport: _images_json,
}
