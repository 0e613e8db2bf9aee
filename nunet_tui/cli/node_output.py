"""The text of the node's own results: its info and capacity, peers, chat, the network.

Registered by result type in formatters.py (``TEXT``), beside the job, reward and GPU outputs.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from engine import api
from engine.domain.peer_names import peer_label
from engine.domain.safe_text import safe
from oracle_client.ntx import format_ntx


def _mb(n: int) -> str:
    return f"{n:,} MB"


def _check(check: api.Check) -> str:
    return f"{'ok  ' if check.ok else 'MISSING'} {check.detail}"


def _ago(at: float) -> str:
    seconds = max(0.0, time.time() - at)
    if seconds < 60:
        return f"{seconds:.0f}s ago"
    if seconds < 3600:
        return f"{seconds / 60:.0f}m ago"
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(at))


def _capacity(cap: api.Capacity) -> str:
    lines = [
        f"{cap.view} capacity",
        f"  cpu     {cap.cpu_cores} cores, {cap.cpu_mhz:,} MHz in all",
        f"  memory  {_mb(cap.memory_mb)}",
        f"  disk    {_mb(cap.disk_mb)}",
    ]
    if cap.cpu_load_percent is not None:
        lines.append(f"  load    {cap.cpu_load_percent:.0f}% of the CPU in use")
    if cap.gpus:
        for gpu in cap.gpus:
            lines.append(f"  gpu {gpu.index}   {gpu.vendor} {gpu.name}, {_mb(gpu.vram_mb)} VRAM")
    else:
        lines.append(f"  gpus    none ({cap.gpu_reason or 'none onboarded'})")
    return "\n".join(lines)


def _onboarding(ob: api.Onboarding) -> str:
    flags = [
        name
        for name, on in (("local discovery", ob.local_discovery), ("Cardano node", ob.cardano_node))
        if on
    ]
    return "\n".join(
        [
            f"onboarded ({ob.state}) on channel {ob.channel}",
            f"  memory  {_mb(ob.memory_mb)}",
            f"  cpu     {ob.cpu_mhz:,} MHz",
            f"  gpus    {len(ob.gpus) or 'none'}",
            f"  wallet  {ob.address}",
        ]
        + ([f"  extras  {', '.join(flags)}"] if flags else [])
    )


def _info(info: api.NodeInfo) -> str:
    m = info.machine
    lines = [
        f"peer id   {info.peer_id}",
        f"version   {info.version}" + ("  (daemon)" if info.daemon else ""),
        f"home      {info.home}",
        f"machine   {m.hostname}: {m.os}, kernel {m.kernel}, {m.arch}",
        f"cpu       {m.cpu_model}, {m.cpu_cores} x {m.cpu_mhz_per_core:,} MHz",
        f"mode      {info.mode or 'not chosen yet'}",
    ]
    if info.onboarded is None:
        lines.append("onboarded no (nunet-tui onboard -m MB -c MHZ -a ADDRESS)")
    else:
        lines.append(_onboarding(info.onboarded).replace("\n", "\n          "))
    lines += [
        "ML readiness",
        f"  docker       {_check(info.readiness.docker)}",
        f"  GPU driver   {_check(info.readiness.gpu_driver)}",
        f"  GPU runtime  {_check(info.readiness.gpu_runtime)}",
    ]
    if info.readiness.sandbox is not None:
        lines.append(f"  job sandbox  {_check(info.readiness.sandbox)}")
    return "\n".join(lines)


def _peers(result: api.PeerList) -> str:
    if not result.peers:
        return f"no peers seen on channel {result.channel or '-'} yet"
    lines = [f"{len(result.peers)} peer(s) on channel {result.channel}"]
    for peer in result.peers:
        res = peer.resources
        offer = "no advert yet"
        if res is not None:
            gpus = ", ".join(f"{g.model} {g.vram_mb:,} MB" for g in res.gpus) or "no GPU"
            offer = f"{res.cpu_mhz:,} MHz, {res.memory_mb:,} MB, {gpus}"
            if res.free_cpu_mhz is not None:
                offer += f" (free {res.free_cpu_mhz:,} MHz, {res.free_memory_mb or 0:,} MB)"
        latency = f"{peer.latency_ms:.1f} ms" if peer.latency_ms is not None else "- ms"
        # The whole id (what `chat start` and `--peer` take), after the provider's name if any.
        who = peer_label(peer.peer_id, peer.display_name, full_id=True)
        lines.append(f"  {who}  {latency:>9}  {offer}  seen {_ago(peer.last_seen)}")
        record = peer.reputation
        if record is not None and record.score is not None:
            lines.append(f"      record with us: {record.score:.2f} ({record.basis})")
        for addr in peer.addrs[:2]:
            lines.append(f"      {safe(addr)}")
    return "\n".join(lines)


def _chat_overview(result: api.ChatOverview) -> str:
    lines = ["chat requests" if result.requests else "no open chat requests"]
    for request in result.requests:
        lines.append(
            f"  [{request.id}] from {safe(request.peer_id)}  {_ago(request.at)}"
            f"  (nunet-tui chat join {request.id})"
        )
    if result.conversations:
        lines.append("conversations")
        for conv in result.conversations:
            lines.append(
                f"  {safe(conv.peer_id)}  {conv.messages} message(s), last {_ago(conv.last_at)}"
            )
    return "\n".join(lines)


def _chat_history(result: api.ChatHistoryReply) -> str:
    if not result.messages:
        return f"no messages with {safe(result.peer_id)}"
    lines = []
    for message in result.messages:
        who = "me" if message.direction == "out" else "peer"
        stamp = time.strftime("%H:%M:%S", time.localtime(message.at))
        queued = "  (queued)" if message.status == "queued" else ""
        lines.append(f"{stamp} {who:>4}: {safe(message.text)}{queued}")
    return "\n".join(lines)


def _network(status: api.NetworkStatus) -> str:
    if not status.online:
        return f"network offline (channel {status.channel}); start the daemon or the TUI"
    t = status.totals
    cpu = status.cpu_utilisation_percent
    return "\n".join(
        [
            f"channel {status.channel}: {t.providers} provider(s), "
            f"{status.connected_peers} connected peer(s)",
            f"  cpu     {t.free_cpu_mhz:,} of {t.cpu_mhz:,} MHz free"
            + (f" ({cpu:.0f}% used)" if cpu is not None else ""),
            f"  memory  {t.free_memory_mb:,} of {t.memory_mb:,} MB free",
            f"  gpus    {t.free_gpus} of {t.gpus} free, "
            f"{t.free_vram_mb:,} of {t.vram_mb:,} MB VRAM",
            f"  jobs    {t.running_jobs} running",
            f"  this node ran {status.jobs_run} job(s) ({status.cpu_mticks_run:,.0f} MTicks, "
            f"{format_ntx(status.metered_run_units, 'metered')}) and bought "
            f"{status.jobs_bought} ({format_ntx(status.metered_bought_units, 'metered')})",
            f"  NTX through escrow: {format_ntx(t.paid_units, 'paid')} to providers on "
            f"the channel; this node was {format_ntx(status.claimed_units, 'paid')}, "
            f"paid out {format_ntx(status.paid_out_units)}, has "
            f"{format_ntx(status.locked_units, 'locked')}",
        ]
    )


def _chat_message(result: api.ChatMessage) -> str:
    if result.status == "queued":
        return "queued: the peer is not reachable now; it is delivered when both are online"
    return f"delivered (#{result.seq})"


def _peer_self(result: api.PeerSelf) -> str:
    lines = [f"peer id  {result.peer_id}"]
    lines += [f"address  {addr}" for addr in result.addrs] or ["address  (not listening)"]
    return "\n".join(lines)


def _done(result: api.Done) -> str:
    return result.message or "done"


TEXT: dict[type, Callable[[Any], str]] = {
    api.PeerList: _peers,
    api.ChatOverview: _chat_overview,
    api.ChatHistoryReply: _chat_history,
    api.ChatMessage: _chat_message,
    api.NetworkStatus: _network,
    api.Capacity: _capacity,
    api.Onboarding: _onboarding,
    api.NodeInfo: _info,
    api.PeerSelf: _peer_self,
    api.Done: _done,
}
