"""What the connectivity doctor's report (``api.NetworkDoctorReport``) says in words: shared
by ``nunet-tui network doctor``, the network screen's panel and the provider dashboard."""

from __future__ import annotations

from engine.api import NetworkDoctorReport

VERDICT = {
    "public": "publicly reachable",
    "private": "not reachable from the internet (behind NAT or a firewall)",
    "unknown": "not known yet (no peer has dialled this node back)",
}


def consumers_line(report: NetworkDoctorReport) -> str:
    """One line: can consumers reach this node, and how."""
    if not report.online:
        return "network off: consumers cannot reach this node"
    n = len(report.reservations)
    relays = f"{n} relay{'s' if n != 1 else ''}"
    if report.consumers_reach == "direct":
        return "consumers reach this node directly (publicly reachable)"
    if report.consumers_reach == "relayed":
        return f"consumers reach this node through {relays} only"
    if report.consumers_reach == "no":
        return "consumers cannot reach this node"
    return "not known yet whether consumers reach this node"


def evidence_line(outcome: str, addr: str, detail: str) -> str:
    said = {
        "reached": "reached us at",
        "failed": "could not reach",
        "refused": "refused to dial",
        "no answer": "did not answer",
    }[outcome]
    text = f"{said} {addr}" if addr else said
    return f"{text}: {detail}" if detail else text
