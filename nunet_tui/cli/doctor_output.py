"""The text of ``nunet-tui network doctor``: reachability, its evidence, addresses, relay
reservations, port mapping (UPnP, NAT-PMP), each connection's path, and the one fix
(registered in formatters.py)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from engine import api
from nunet_tui.viewmodels.reachability import VERDICT, consumers_line, evidence_line


def _when(at: float | None, now: float) -> str:
    if not at:
        return "never"
    seconds = max(0.0, now - at)
    if seconds < 60:
        return f"{seconds:.0f}s ago"
    if seconds < 3600:
        return f"{seconds / 60:.0f}m ago"
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(at))


def _until(at: float, now: float) -> str:
    left = at - now
    if left <= 0:
        return "expired"
    if left < 3600:
        return f"expires in {left / 60:.0f}m"
    return f"expires {time.strftime('%H:%M', time.localtime(at))}"


def doctor_lines(report: api.NetworkDoctorReport, now: float) -> list[str]:
    if not report.online:
        return ["network offline", *([f"fix: {report.fix}"] if report.fix else [])]
    lines = [
        f"reachability  {report.reachability}: {VERDICT[report.reachability]}"
        + (f" (checked {_when(report.checked_at, now)})" if report.checked_at else ""),
        f"consumers     {consumers_line(report)}",
    ]
    if report.fix:
        lines.append(f"fix           {report.fix}")
    lines.append("evidence")
    if not report.evidence:
        lines.append("  none yet")
    for e in report.evidence:
        lines.append(f"  {e.peer_id} {evidence_line(e.outcome, e.addr, e.detail)}")
    lines.append("listening     " + (", ".join(report.listen_addrs) or "nowhere"))
    lines.append("observed as   " + (", ".join(report.observed_addrs) or "not yet"))
    lines.append("relays")
    if not report.reservations:
        lines.append("  no reservation")
    for r in report.reservations:
        lines.append(f"  {r.relay_peer_id} {r.circuit_addr} ({_until(r.expires_at, now)})")
    lines.append(f"port forward  {report.upnp}")
    lines.append(f"connections   {len(report.connections)}")
    for c in report.connections:
        via = f" via {c.via_relay}" if c.via_relay else ""
        lines.append(f"  {c.peer_id} {c.path} over {c.transport}{via} {c.remote_addr}")
    return lines


def _doctor(report: api.NetworkDoctorReport) -> str:
    return "\n".join(doctor_lines(report, time.time()))


TEXT: dict[type, Callable[[Any], str]] = {api.NetworkDoctorReport: _doctor}
