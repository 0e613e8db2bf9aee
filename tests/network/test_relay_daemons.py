"""Two real daemons behind two different NATs, and a third on the lab's public segment with
``relay_service``: the provider reserves a slot on its bootstrap peer and advertises its
circuit address; the consumer lists it and chats with it through the relay."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import TEST_ADDRESS, run_cli
from tests.daemon_harness import wait_for
from tests.netlab import Lab, NatKind

RELAY_PORT = 4001


@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    ("provider_kind", "consumer_kind"),
    [(NatKind.PORT_RESTRICTED, NatKind.SYMMETRIC), (NatKind.SYMMETRIC, NatKind.SYMMETRIC)],
    ids=str,
)
def test_consumer_reaches_a_provider_behind_nat_through_the_relay(
    nat_lab: Lab, lab_daemons: Any, provider_kind: NatKind, consumer_kind: NatKind
) -> None:
    relay = lab_daemons(
        "relay",
        60,
        env={
            "NUNET_NETWORK_LISTEN": f"/ip4/{nat_lab.relay.addr}/tcp/{RELAY_PORT}",
            "NUNET_NETWORK_RELAY_SERVICE": "true",
        },
        netns=nat_lab.relay.ns,
    )
    boot = f"/ip4/{nat_lab.relay.addr}/tcp/{RELAY_PORT}/p2p/{relay.peer_id}"
    # Not the default listen address: a node with the default one listens on loopback until
    # onboarded, then restarts its network, and after that restart its bootstrap peer never
    # got its heartbeats in the lab (docs/network-nat.md, "Noticed"): a separate bug.
    anywhere = {"NUNET_NETWORK_LISTEN": "/ip4/0.0.0.0/tcp/9001"}
    provider = lab_daemons(
        "provider",
        61,
        bootstrap=boot,
        env=anywhere,
        netns=nat_lab.homes[provider_kind].hosts[0].ns,
    )
    consumer = lab_daemons(
        "consumer",
        62,
        bootstrap=boot,
        env=anywhere,
        netns=nat_lab.homes[consumer_kind].hosts[1].ns,
    )
    provider.cli("onboard", "-m", "8000", "-c", "4000", "-a", TEST_ADDRESS)
    provider_id = provider.peer_id
    circuit = f"{boot}/p2p-circuit/p2p/{provider_id}"

    def listed_with_circuit() -> bool:
        peer = consumer.listed(provider_id)
        return peer is not None and circuit in peer.get("addrs", [])

    wait_for(listed_with_circuit, "the consumer never listed the provider's relay address", 120)
    sent = consumer.cli("chat", "send", provider_id, "hello through the relay")
    assert sent["status"] == "delivered", sent
    history = provider.cli("chat", "history", consumer.peer_id)["messages"]
    assert [m["text"] for m in history] == ["hello through the relay"]
    # ...and back, over the connection the consumer opened through the relay.
    back = provider.cli("chat", "send", consumer.peer_id, "and back")
    assert back["status"] == "delivered", back


# Runs past two circuits' lives (relay_circuit_s = 3 below): the consumer's follow stream dies
# with each circuit and is opened again through a new one.
JOB = """
import pathlib, time
print("hello from behind two NATs", flush=True)
for i in range(8):
    print(f"tick {i}", flush=True)
    time.sleep(1)
pathlib.Path("outputs").mkdir(exist_ok=True)
pathlib.Path("outputs/answer.txt").write_text("42")
"""
PROCESS_JOBS = '\n[jobs]\nexecutors = ["process"]\n'


@pytest.fixture
def job_server(nat_lab: Lab, tmp_path: Path) -> Iterator[str]:
    """A plain HTTP server on public-1 serving JOB as job.py: where the provider fetches it."""
    (tmp_path / "www").mkdir()
    (tmp_path / "www" / "job.py").write_text(JOB)
    server = nat_lab.public[1]
    argv = [sys.executable, "-m", "http.server", "8080", "--bind", server.addr]
    proc = nat_lab.popen(
        server,
        [*argv, "-d", str(tmp_path / "www")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )

    def up() -> bool:
        with nat_lab.socket(nat_lab.public[2], socket.SOCK_STREAM) as probe:
            probe.settimeout(1)
            return probe.connect_ex((server.addr, 8080)) == 0

    try:
        wait_for(up, "the lab's HTTP server never listened")
        yield f"http://{server.addr}:8080"
    finally:
        proc.kill()
        proc.wait(timeout=10)


@pytest.mark.timeout(300)
def test_a_job_runs_on_a_provider_behind_nat_through_the_relay(
    nat_lab: Lab, lab_daemons: Any, job_server: str, tmp_path: Path
) -> None:
    relay = lab_daemons(
        "relay",
        63,
        env={
            "NUNET_NETWORK_LISTEN": f"/ip4/{nat_lab.relay.addr}/tcp/{RELAY_PORT}",
            "NUNET_NETWORK_RELAY_SERVICE": "true",
            "NUNET_NETWORK_RELAY_CIRCUIT_S": "3",
        },
        netns=nat_lab.relay.ns,
    )
    boot = f"/ip4/{nat_lab.relay.addr}/tcp/{RELAY_PORT}/p2p/{relay.peer_id}"
    env = {"NUNET_NETWORK_LISTEN": "/ip4/0.0.0.0/tcp/9001"}
    provider = lab_daemons(
        "provider",
        64,
        bootstrap=boot,
        extra_toml=PROCESS_JOBS,
        env={**env, "NUNET_JOBS_FETCH_ALLOW_NETWORKS": "198.18.0.0/15"},
        netns=nat_lab.homes[NatKind.PORT_RESTRICTED].hosts[0].ns,
    )
    consumer = lab_daemons(
        "consumer", 65, bootstrap=boot, env=env, netns=nat_lab.homes[NatKind.SYMMETRIC].hosts[0].ns
    )
    provider.cli("onboard", "-m", "8000", "-c", "4000", "-a", TEST_ADDRESS)
    provider_id = provider.peer_id
    circuit = f"{boot}/p2p-circuit/p2p/{provider_id}"
    wait_for(
        lambda: circuit in (consumer.listed(provider_id) or {}).get("addrs", []),
        "the consumer never listed the provider's relay address",
        120,
    )
    job = consumer.cli(
        "job", "submit", "--url", f"{job_server}/job.py", "--framework", "scikit-learn",
        "--expected-minutes", "1",
    )  # fmt: skip
    assert job["state"] == "accepted" and job["provider"] == provider_id, job
    job_id = job["job_id"]
    wait_for(
        lambda: consumer.cli("job", "show", job_id)["state"] == "completed",
        "the job never completed",
        120,
    )
    logs = run_cli("job", "logs", job_id, home=consumer.home)
    assert "hello from behind two NATs" in logs.stdout
    assert [f"tick {i}" in logs.stdout for i in range(8)] == [True] * 8
    results = consumer.cli("job", "results", job_id, "-o", str(tmp_path / "out"))
    assert (Path(results["directory"]) / "outputs" / "answer.txt").read_text() == "42"
