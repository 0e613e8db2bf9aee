"""A distributed step's gang (issue 25 §2; docs/cluster-overlay.md): its slots, the network
its replicas meet on, and the environment each replica starts with.

The consumer places a gang as one ordinary job a slot, each carrying ``JobSpec.gang`` (gang
id, rank, world size); everything a replica needs besides the members' peer ids follows from
that: the gang's /24 (from its id), each rank's address (``.rank+1``), rank 0's as
MASTER_ADDR, and a fixed MASTER_PORT. The members come with the consumer's ``GangStart``."""

from __future__ import annotations

import hashlib

import msgspec

from engine.domain.spec import GangSlot, JobSpec

MAX_GANG = 64  # the overlay's most members (engine/domain/overlay_packets.py)
MASTER_PORT = 29500  # torchrun's default: scripts written for it need no change


def distributed_step(spec: JobSpec) -> int | None:
    """The index (0-based) of the spec's distributed step, or None."""
    return next((i for i, step in enumerate(spec.subtasks) if step.distributed), None)


def gang_size(spec: JobSpec) -> int:
    """The slots a spec's gang has (0: no distributed step)."""
    index = distributed_step(spec)
    return 0 if index is None else spec.subtasks[index].replicas


def slot_spec(spec: JobSpec, gang_id: str, rank: int) -> JobSpec:
    """The spec of the gang's slot ``rank``: what that slot's provider is offered."""
    slot = GangSlot(gang_id=gang_id, rank=rank, world_size=gang_size(spec))
    return msgspec.structs.replace(spec, gang=slot)


def subnet_of(gang_id: str) -> str:
    """The gang's /24 in 10.0.0.0/8, from its id: both providers derive the same one, and two
    gangs that meet on one provider still never share packets (each overlay has its own
    device and members), so a collision costs nothing."""
    digest = hashlib.sha256(gang_id.encode()).digest()
    return f"10.{digest[0]}.{digest[1]}.0/24"


def address_of(gang_id: str, rank: int) -> str:
    """Rank ``rank``'s address in the gang's /24: ``.rank+1`` (rank 0 is ``.1``)."""
    return subnet_of(gang_id).rsplit(".", 1)[0] + f".{rank + 1}"


def gang_env(slot: GangSlot) -> dict[str, str]:
    """What ``torch.distributed`` (``init_method="env://"``) reads, as torchrun sets it; one
    replica a provider, so LOCAL_RANK is 0."""
    return {
        "RANK": str(slot.rank),
        "WORLD_SIZE": str(slot.world_size),
        "LOCAL_RANK": "0",
        "LOCAL_WORLD_SIZE": "1",
        "MASTER_ADDR": address_of(slot.gang_id, 0),
        "MASTER_PORT": str(MASTER_PORT),
        # The replicas reach each other on the overlay's device only (network_mode: none).
        "GLOO_SOCKET_IFNAME": "nunet0",
        "NCCL_SOCKET_IFNAME": "nunet0",
    }


# A gang's replica starts before its provider has given its container the overlay's device
# (the device is made in the running container's network namespace), and gloo binds to
# GLOO_SOCKET_IFNAME at once: so the replica's own command runs once ``nunet0`` is up (at
# most DEVICE_WAIT_S), the user's script unchanged. Run as ``python3 -c WAIT cmd args...``.
DEVICE_WAIT_S = 120
_WAIT_FOR_DEVICE = f"""
import os, sys, time
end = time.monotonic() + {DEVICE_WAIT_S}
while time.monotonic() < end:
    try:
        with open("/sys/class/net/nunet0/flags") as f:
            if int(f.read(), 16) & 1:
                os.execvp(sys.argv[1], sys.argv[1:])
    except OSError:
        pass
    time.sleep(0.1)
sys.exit("nunet: the gang's network (nunet0) never came up in {DEVICE_WAIT_S} s")
"""


def gang_command(words: tuple[str, ...]) -> tuple[str, ...]:
    """``words`` run once the overlay's device is up in the replica's container."""
    return ("python3", "-c", _WAIT_FOR_DEVICE, *words)


def members_problem(slot: GangSlot, members: tuple[str, ...], own_peer: str) -> str:
    """Why ``members`` (peer ids by rank) cannot be this slot's gang, or ""."""
    if len(members) != slot.world_size:
        return f"the gang has {slot.world_size} slots, the start names {len(members)} members"
    if len(set(members)) != len(members):
        return "the start names one provider for two ranks: one replica a provider"
    if members[slot.rank] != own_peer:
        return f"the start gives rank {slot.rank} to another provider"
    return ""
