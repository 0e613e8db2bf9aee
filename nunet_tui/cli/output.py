"""How scripting commands print: one JSON object, or a few readable lines."""

from __future__ import annotations

from typing import Any

from engine import api


def to_json(key: str, result: Any) -> dict[str, Any]:
    data = api.to_builtins(result)
    return data if isinstance(data, dict) else {"result": data}


def _mb(n: int) -> str:
    return f"{n:,} MB"


def _check(check: api.Check) -> str:
    return f"{'ok  ' if check.ok else 'MISSING'} {check.detail}"


def to_text(key: str, result: Any) -> str:
    if isinstance(result, api.Capacity):
        return _capacity(result)
    if isinstance(result, api.Onboarding):
        return _onboarding(result)
    if isinstance(result, api.NodeInfo):
        return _info(result)
    if isinstance(result, api.PeerSelf):
        lines = [f"peer id  {result.peer_id}"]
        lines += [f"address  {addr}" for addr in result.addrs] or ["address  (not listening)"]
        return "\n".join(lines)
    if isinstance(result, api.Done):
        return result.message or "done"
    return str(result)


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
    return "\n".join(lines)
