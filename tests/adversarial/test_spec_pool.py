"""A pool-restricted spec (issue 12): a provider daemon sells a cheap spec to the members of a
group only. A hostile peer outside the group offers a job on that spec directly (no matching
on its side to stop it) and is refused with "reserved for group X", decided by the provider
from its own pools; offering under a member's name does not help (the provider judges the
peer that signed the offer); its tier job is quoted the public spec, never the reserved one.
A real consumer daemon in the group sees the spec in the advert, matching picks it for it
(the cheapest it may use), and the job runs and is billed at that spec's price on both
sides."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.adversarial.hostile import JOB_PROTOCOL, HostilePeer, open_job, seal_job
from tests.conftest import run_cli
from tests.daemon_harness import Daemon, wait_for
from tests.daemons.test_jobs_e2e import _pair, _state, scripts

__all__ = ["scripts"]


def _offer(peer: HostilePeer, provider: str, job_id: str, spec: dict[str, Any], **kw: str) -> Any:
    payload = {
        "t": "offer",
        "v": 1,
        "job_id": job_id,
        "spec": spec,
        "consumer": kw.get("consumer", peer.peer_id),
    }
    frames = peer.request(provider, JOB_PROTOCOL, [seal_job(peer.identity, payload)])
    assert frames, "the provider answered nothing"
    return open_job(frames[0])


@pytest.mark.timeout(300)  # two daemons and real jobs, on a machine that may be busy
def test_a_pool_spec_is_refused_to_an_outsider_and_sold_to_a_member(
    daemons: Callable[..., Daemon],
    hostile: Callable[..., HostilePeer],
    scripts: str,
    tmp_path: Path,
) -> None:
    provider, consumer = _pair(daemons)
    member = consumer.peer_id
    provider.cli("resource", "group", "add", "lab-members", "--member", member)
    provider.cli("resource", "pool", "add", "lab", "--group", "lab-members")
    provider.cli("resource", "spec", "add", "public", "--cpu", "1", "--ram", "2048", "--price", "3")
    provider.cli(
        "resource", "spec", "add", "lab-only", "--cpu", "1", "--ram", "2048",
        "--price", "0.5", "--pool", "lab",
    )  # fmt: skip

    outsider = hostile(seed=b"\x66" * 32, bootstrap=[provider.addrs()[0]])
    outsider.wait_connected(provider.peer_id)
    url = f"{scripts}/iris.py"
    job = {"framework": "scikit-learn", "script_url": url, "expected_minutes": 1}
    named = _offer(outsider, provider.peer_id, "a00000000001", {**job, "resource_spec": "lab-only"})
    assert named["t"] == "refusal"
    assert named["reason"] == "spec lab-only: reserved for group lab-members"
    # Claiming to be the member changes nothing: the offer is judged for its signer.
    posing = _offer(
        outsider,
        provider.peer_id,
        "a00000000002",
        {**job, "resource_spec": "lab-only"},
        consumer=member,
    )
    assert posing["t"] == "refusal" and posing["reason"] == "offer names another consumer"
    tier = _offer(outsider, provider.peer_id, "a00000000003", job)
    assert tier["t"] == "quote"
    assert (tier["spec_name"], tier["price_units_hour"]) == ("public", 3_000_000)

    # The member's own node sees the specs in the signed advert, the pool's members with them.
    def sold() -> list[dict[str, Any]]:
        peers = consumer.cli("peer", "list")["peers"]
        listed = [p for p in peers if p["peer_id"] == provider.peer_id]
        return listed[0]["resources"]["specs"] if listed and listed[0]["resources"] else []

    wait_for(lambda: len(sold()) == 2, "the consumer never saw the provider's specs")
    job_file = tmp_path / "job.toml"
    job_file.write_text(
        f'framework = "scikit-learn"\nscript_url = "{url}"\nexpected_minutes = 1\n', "utf-8"
    )
    accepted = consumer.cli("job", "submit", "-f", str(job_file))
    assert accepted["state"] == "accepted", accepted
    assert (accepted["resource_spec"], accepted["price_units_hour"]) == ("lab-only", 500_000)
    job_id = accepted["job_id"]
    wait_for(lambda: _state(consumer, job_id) == "completed", "the member's job failed", 90)
    mine, theirs = consumer.cli("job", "show", job_id), provider.cli("job", "show", job_id)
    for side in (mine, theirs):
        assert side["resource_spec"] == "lab-only" and side["price_units_hour"] == 500_000
        assert (side["estimate_units"], side["lock_units"]) == (8_333, 8_333)  # 0.5 NTX/h, 1 min
    # The provider's own record of the outsider's refusals: nothing stored of them.
    shown = run_cli("job", "show", "a00000000001", home=provider.home)
    assert shown.returncode == 1 and "no job" in shown.stderr
    assert json.loads(run_cli("job", "list", "--json", home=provider.home).stdout)["jobs"]
