"""A gang's slot (issue 25 §2) against hostile peers, on a real provider daemon running Docker
jobs: an accepted slot is held, never started, until its own consumer's ``GangStart``; a
stranger's start is refused as for a job that does not exist, and the owner's start is
refused when it names another gang, another provider at the slot's rank, or one provider
twice. An offer of a distributed step that is no gang's slot is refused before any quote.
The held slot, cancelled, ends having run nothing."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.adversarial.hostile import JOB_PROTOCOL, HostilePeer, open_job, seal_job
from tests.conftest import TEST_ADDRESS
from tests.daemon_harness import Daemon, daemons, wait_for
from tests.docker_fixture import TORCH_IMAGE, docker_host, sklearn_image, torch_image
from tests.http_files import serve_files

__all__ = ["daemons", "docker_host", "sklearn_image", "torch_image"]

JOBS = (
    '[jobs]\nexecutors = ["docker"]\ncheckpoint_interval_s = 0\n'
    f'[ml_images]\npytorch_cpu = "{TORCH_IMAGE}"\n'
)
JOB_ID = "9a9b9c9d9e9f"
GANG = "feedbeef"


def _ask(peer: HostilePeer, provider: str, message: dict[str, Any]) -> dict[str, Any]:
    framed = peer.request(provider, JOB_PROTOCOL, [seal_job(peer.identity, message)])
    return open_job(framed[0])


def _spec(url: str, gang: dict[str, Any] | None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "framework": "pytorch",
        "script_url": url,
        "expected_minutes": 2,
        "subtasks": [{"name": "train", "replicas": 2, "distributed": True}],
    }
    if gang is not None:
        spec["gang"] = gang
    return spec


def _start(job_id: str, gang_id: str, members: list[str]) -> dict[str, Any]:
    return {"t": "gang_start", "v": 1, "job_id": job_id, "gang_id": gang_id, "members": members}


def test_a_held_slot_starts_only_for_its_owner_and_the_right_members(
    daemons: Callable[..., Daemon],
    docker_host: str,
    torch_image: str,
    hostile: Callable[..., HostilePeer],
    tmp_path: Path,
) -> None:
    provider = daemons("provider", 80, extra_toml=JOBS, env={"DOCKER_HOST": docker_host})
    provider.cli("onboard", "-m", "8000", "-c", "4000", "-a", TEST_ADDRESS)
    owner = hostile(seed=b"\x81" * 32, bootstrap=[provider.addrs()[0]])
    stranger = hostile(seed=b"\x82" * 32, bootstrap=[provider.addrs()[0]])
    me = provider.peer_id
    with serve_files(tmp_path / "www", {"train.py": "print('ran')\n"}) as base:
        url = f"{base}/train.py"
        # A distributed step that is no slot: refused before a quote.
        offer = {"t": "offer", "v": 1, "consumer": owner.peer_id}
        refused = _ask(owner, me, {**offer, "job_id": "a0a0a0a0a0a0", "spec": _spec(url, None)})
        assert refused["t"] == "refusal" and "runs as a gang" in refused["reason"], refused

        slot = {"gang_id": GANG, "rank": 0, "world_size": 2}
        quote = _ask(owner, me, {**offer, "job_id": JOB_ID, "spec": _spec(url, slot)})
        assert quote["t"] == "quote", quote
        confirm = {"t": "confirm", "v": 1, "job_id": JOB_ID, "total_ntx": quote["total_ntx"]}
        assert _ask(owner, me, confirm)["t"] == "accepted"

    held = provider.cli("job", "show", JOB_ID)
    assert held["state"] == "accepted" and held["gang_members"] == [], held

    answer = _ask(stranger, me, _start(JOB_ID, GANG, [me, stranger.peer_id]))
    assert answer == {**answer, "t": "refusal", "reason": "no such job of yours"}, answer
    for members, gang, why in (
        ([me, owner.peer_id], "0badc0de", "no slot of gang 0badc0de"),
        ([owner.peer_id, me], GANG, "gives rank 0 to another provider"),
        ([me, me], GANG, "one provider for two ranks"),
        ([me, owner.peer_id, stranger.peer_id], GANG, "the start names 3 members"),
    ):
        answer = _ask(owner, me, _start(JOB_ID, gang, members))
        assert answer["t"] == "refusal" and why in answer["reason"], (members, answer)

    # Below the schema's bound (a gang has 2 members at least): reset, never answered.
    lone = _start(JOB_ID, GANG, [me])
    assert owner.request(me, JOB_PROTOCOL, [seal_job(owner.identity, lone)]) == []
    held = provider.cli("job", "show", JOB_ID)
    assert held["state"] == "accepted" and held["gang_members"] == [], held  # still held
    cancel = {"t": "cancel", "v": 1, "job_id": JOB_ID}
    assert _ask(owner, me, cancel)["t"] == "accepted"
    ended = provider.cli("job", "show", JOB_ID)
    assert ended["state"] == "cancelled" and not ended["steps"], ended  # nothing ran
    # A start for the ended slot says so, and starts nothing.
    answer = _ask(owner, me, _start(JOB_ID, GANG, [me, owner.peer_id]))
    assert answer["t"] == "refusal" and "the slot ended (cancelled)" in answer["reason"]


def test_a_slot_whose_start_never_comes_ends_never_started_saying_so(
    daemons: Callable[..., Daemon],
    docker_host: str,
    torch_image: str,
    hostile: Callable[..., HostilePeer],
    tmp_path: Path,
) -> None:
    """A consumer that places a slot and never starts it holds the provider's slot for
    ``[jobs] gang_start_wait_s`` only (2 s here; 600 s by default)."""
    jobs = JOBS.replace(
        "checkpoint_interval_s = 0\n", "checkpoint_interval_s = 0\ngang_start_wait_s = 2\n"
    )
    provider = daemons("provider", 83, extra_toml=jobs, env={"DOCKER_HOST": docker_host})
    provider.cli("onboard", "-m", "8000", "-c", "4000", "-a", TEST_ADDRESS)
    owner = hostile(seed=b"\x84" * 32, bootstrap=[provider.addrs()[0]])
    me = provider.peer_id
    with serve_files(tmp_path / "www", {"train.py": "print('ran')\n"}) as base:
        slot = {"gang_id": GANG, "rank": 1, "world_size": 2}
        offer = {"t": "offer", "v": 1, "consumer": owner.peer_id, "job_id": JOB_ID}
        quote = _ask(owner, me, {**offer, "spec": _spec(f"{base}/train.py", slot)})
        assert quote["t"] == "quote", quote
        confirm = {"t": "confirm", "v": 1, "job_id": JOB_ID, "total_ntx": quote["total_ntx"]}
        assert _ask(owner, me, confirm)["t"] == "accepted"
    ended = wait_for(
        lambda: (job := provider.cli("job", "show", JOB_ID))["state"] == "failed" and job,
        "the held slot never ended",
        30,
    )
    assert "never started" in ended["reason"] and f"start of gang {GANG}" in ended["reason"]
    assert "within 2 s" in ended["reason"] and not ended["steps"], ended
