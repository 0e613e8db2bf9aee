"""The Prometheus endpoint: real engines and daemons scraped over HTTP on 127.0.0.1, read back
with Prometheus's own text parser; the Grafana dashboard's queries checked against it."""

from __future__ import annotations

import json
import re
import socket
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest
from prometheus_client.parser import text_string_to_metric_families

from engine import api
from engine.domain.spec import JobSpec
from engine.facade import Engine
from engine.metrics import Figures, metric_families
from engine.store import Store
from tests.conftest import MACHINE_TOML, REPO, TEST_ADDRESS, make_home, run_cli
from tests.daemon_harness import Daemon, daemons, wait_for
from tests.doubles.host import RIG_GPUS, fixed_host

__all__ = ["daemons"]

DASHBOARD = REPO / "docs" / "grafana" / "nunet-node.json"
Samples = dict[str, list[tuple[dict[str, str], float]]]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def scrape(url: str) -> tuple[Samples, set[str]]:
    """Sample name -> [(labels, value)], and every family name, as Prometheus reads them."""
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    samples: Samples = {}
    families = set()
    for family in text_string_to_metric_families(text):
        families.add(family.name)
        for sample in family.samples:
            samples.setdefault(sample.name, []).append((dict(sample.labels), sample.value))
    return samples, families


CHANNEL = "nunet-test"  # the test daemons' channel


def value(samples: Samples, name: str, **labels: str) -> float:
    found = [
        v for got, v in samples.get(name, []) if all(got.get(k) == w for k, w in labels.items())
    ]
    assert len(found) == 1, (name, labels, samples.get(name))
    return found[0]


def wait_scrape(url: str, timeout: float = 20.0) -> tuple[Samples, set[str]]:
    deadline = time.monotonic() + timeout
    while True:
        try:
            return scrape(url)
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def provider_job(job_id: str, state: str, wall_s: float, gpu_s: float) -> api.JobInfo:
    return api.JobInfo(
        job_id=job_id,
        role="provider",
        state=state,  # type: ignore[arg-type]
        provider="me",
        consumer="them",
        spec=JobSpec(name=job_id, framework="scikit-learn"),
        created_at=time.time(),
        metering=api.JobMetering(wall_s=wall_s, gpu_s=gpu_s, cost_units=500_000),
    )


@pytest.fixture
def gpu_engine(tmp_path: Path) -> Iterator[tuple[Engine, str]]:
    """An embedded engine as the TUI runs it (network deferred) on a rig with two GPUs, with
    jobs already in its database and the endpoint on a free loopback port."""
    port = free_port()
    home = make_home(
        tmp_path / "home", machine_toml=MACHINE_TOML + f'\n[metrics]\nlisten = "127.0.0.1:{port}"\n'
    )
    home.state_dir.mkdir(parents=True, exist_ok=True)
    store = Store(home.database)
    store.save_job(provider_job("done-1", "completed", 120.0, 60.0))
    store.save_job(provider_job("done-2", "completed", 30.0, 0.0))
    store.save_job(provider_job("broke", "failed", 5.0, 0.0))
    store.save_job(provider_job("busy", "running", 1000.0, 0.0))  # not yet sold
    store.close()
    host = fixed_host(tmp_path / "host", gpus=RIG_GPUS)
    engine = Engine(home, probes=host.probes, autostart_network=False).start()
    try:
        yield engine, f"http://127.0.0.1:{port}/metrics"
    finally:
        engine.close()


def test_a_scrape_reads_the_node_gpus_and_jobs(gpu_engine: tuple[Engine, str]) -> None:
    engine, url = gpu_engine
    samples, families = wait_scrape(url)
    assert all(name.startswith("nunet_") for name in families), families

    info = samples["nunet_node_info"][0][0]
    assert info["peer_id"] == engine.node.identity.peer_id
    assert value(samples, "nunet_node_onboarded") == 0
    assert {labels["check"] for labels, _ in samples["nunet_node_ready"]} == {
        "docker",
        "gpu_driver",
        "gpu_runtime",
    }
    assert value(samples, "nunet_node_ready", check="docker") == 1  # the fixed host's Docker
    assert value(samples, "nunet_network_online") == 0  # deferred, as the TUI starts it

    # The live GPU samples: the 3090 of the fixed rig, in base units.
    gpu = {"uuid": RIG_GPUS[0].uuid}
    assert value(samples, "nunet_gpu_utilization_ratio", **gpu) == pytest.approx(0.87)
    assert value(samples, "nunet_gpu_memory_used_bytes", **gpu) == 18_432 * 1024**2
    assert value(samples, "nunet_gpu_memory_total_bytes", **gpu) == 24 * 1024**3
    assert value(samples, "nunet_gpu_temperature_celsius", **gpu) == 84
    assert value(samples, "nunet_gpu_power_watts", **gpu) == pytest.approx(341)
    assert len(samples["nunet_gpu_power_watts"]) == 2

    assert value(samples, "nunet_jobs", role="provider", state="completed") == 2
    assert value(samples, "nunet_jobs", role="provider", state="running") == 1
    assert value(samples, "nunet_jobs", role="consumer", state="completed") == 0
    # Sold: the ended jobs' metered time, the running one not yet.
    assert value(samples, "nunet_machine_time_sold_seconds_total") == pytest.approx(155.0)
    assert value(samples, "nunet_gpu_time_sold_seconds_total") == pytest.approx(60.0)
    assert value(samples, "nunet_process_resident_memory_bytes") > 0

    # Each scrape reads the node as it is now: onboard and pause, scrape again.
    engine.call_blocking(
        api.OnboardRequest(memory_mb=8000, cpu_mhz=4000, address=TEST_ADDRESS, gpus=())
    )
    engine.call_blocking(api.Pause())
    samples, _ = scrape(url)
    assert value(samples, "nunet_node_onboarded") == 1
    assert value(samples, "nunet_node_paused") == 1


def test_the_endpoint_binds_only_where_configured(gpu_engine: tuple[Engine, str]) -> None:
    _, url = gpu_engine
    wait_scrape(url)
    port = int(url.rsplit(":", 1)[1].split("/")[0])
    with pytest.raises(OSError):  # 127.0.0.2 is loopback too, but not the configured address
        socket.create_connection(("127.0.0.2", port), timeout=2).close()
    listening = {
        c.laddr
        for c in psutil.Process().net_connections(kind="inet")
        if c.status == psutil.CONN_LISTEN
    }
    assert ("127.0.0.1", port) in listening


def _listening() -> set[tuple[str, int]]:
    return {
        (c.laddr.ip, c.laddr.port)
        for c in psutil.Process().net_connections(kind="inet")
        if c.status == psutil.CONN_LISTEN
    }


def test_no_setting_no_listening_socket(tmp_path: Path) -> None:
    before = _listening()  # other tests' servers may live in this process: only new ones count
    engine = Engine(make_home(tmp_path / "home"), autostart_network=False).start()
    try:
        engine.call_blocking(api.GetInfo())
        assert _listening() - before == set()
    finally:
        engine.close()


def test_a_bad_listen_value_is_one_line(tmp_path: Path) -> None:
    home = make_home(tmp_path / "home")
    for bad, words in (
        ("9464", "HOST:PORT"),
        ("example.com:9464", "not an IP address"),
        ("127.0.0.1:99999", "above 65535"),
    ):
        result = run_cli("info", home=home, env={"NUNET_METRICS_LISTEN": bad})
        assert result.returncode == 1
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and "metrics.listen" in lines[0] and words in lines[0], lines
        assert "Traceback" not in result.stderr


def test_a_taken_port_is_said_and_the_node_keeps_running(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        home = make_home(
            tmp_path / "home",
            machine_toml=MACHINE_TOML + f'\n[metrics]\nlisten = "127.0.0.1:{port}"\n',
        )
        from engine.network.supervise import FAILURES

        before = FAILURES.counts.get("metrics", 0)
        engine = Engine(home, autostart_network=False).start()
        try:
            assert engine.call_blocking(api.GetInfo()).peer_id
            wait_for(
                lambda: FAILURES.counts.get("metrics", 0) > before, "the failure was not counted"
            )
            assert engine.call_blocking(api.GetInfo()).peer_id  # still serving
        finally:
            engine.close()


def test_escrow_book_figures_in_base_units() -> None:
    def escrow(job_id: str, role: str, state: str, amount: int) -> api.EscrowInfo:
        return api.EscrowInfo(
            job_id=job_id,
            role=role,  # type: ignore[arg-type]
            state=state,  # type: ignore[arg-type]
            amount=amount,
            deadline_ms=0,
            consumer_pkh="",
            provider_pkh="",
            oracle_key="",
        )

    figures = Figures(
        peer_id="p",
        version="v",
        mode="provider",
        channel="c",
        started_at=1.0,
        payments=True,
        escrows=(
            escrow("a", "provider", "claimed", 2_500_000),
            escrow("b", "provider", "claimed", 500_000),
            escrow("c", "provider", "verified", 1_000_000),
            escrow("d", "consumer", "locked", 3_000_000),
            escrow("e", "consumer", "paid_out", 7_000_000),
            escrow("f", "consumer", "refunded", 4_000_000),
        ),
    )
    from prometheus_client import CollectorRegistry, generate_latest

    class Fixed:
        def collect(self) -> Iterator[object]:
            yield from metric_families(figures)

    registry = CollectorRegistry(auto_describe=False)
    registry.register(Fixed())  # type: ignore[arg-type]
    text = generate_latest(registry).decode()
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples.setdefault(sample.name, []).append((dict(sample.labels), sample.value))
    assert value(samples, "nunet_earned_ntx_base_units_total") == 3_000_000
    assert value(samples, "nunet_locked_ntx_base_units") == 4_000_000  # verified + locked
    assert value(samples, "nunet_spent_ntx_base_units_total") == 7_000_000
    assert value(samples, "nunet_refunded_ntx_base_units_total") == 4_000_000
    assert value(samples, "nunet_escrows", role="provider", state="claimed") == 2


def _exprs(panels: list[dict[str, object]]) -> Iterator[tuple[str, str]]:
    for panel in panels:
        yield from _exprs(panel.get("panels", []))  # type: ignore[arg-type]
        for target in panel.get("targets", []):  # type: ignore[attr-defined]
            yield str(panel["title"]), str(target["expr"])


def test_every_dashboard_query_names_an_exported_metric(gpu_engine: tuple[Engine, str]) -> None:
    _, url = gpu_engine
    samples, families = wait_scrape(url)
    exported = set(samples) | families
    dashboard = json.loads(DASHBOARD.read_text())
    queries = list(_exprs(dashboard["panels"]))
    queries += [("variable", v["definition"]) for v in dashboard["templating"]["list"]]
    assert len(queries) >= 20
    for title, expr in queries:
        names = re.findall(r"\bnunet_[a-z0-9_]+", expr)
        assert names, (title, expr)
        for name in names:
            # A counter with no sample yet (no failure contained in this process) is still
            # exported: its family, whose samples will be NAME_total.
            known = name in exported or name.removesuffix("_total") in families
            assert known, f"panel {title!r}: {name} is not exported"
    titles = {title for title, _ in queries}
    for wanted in ("GPU temperature", "Peers by channel", "NTX earned", "Machine time sold"):
        assert any(t.startswith(wanted) for t in titles), wanted


def _metrics_url(daemon: Daemon) -> str:
    def find() -> str | None:
        text = (
            daemon.home.log_file.read_text(errors="replace")
            if daemon.home.log_file.exists()
            else ""
        )
        found = re.findall(r"metrics: serving (http://127\.0\.0\.1:\d+/metrics)", text)
        return found[-1] if found else None

    return str(wait_for(find, "the daemon never said where its metrics are"))


def test_daemons_export_peers_network_and_a_finished_job(
    daemons: Callable[..., Daemon], tmp_path: Path
) -> None:
    import functools
    import http.server
    import threading

    root = tmp_path / "www"
    root.mkdir()
    (root / "hello.py").write_text("print('hello', flush=True)\n")
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    handler.log_message = lambda *a: None  # type: ignore[attr-defined]
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        metrics = '\n[metrics]\nlisten = "127.0.0.1:0"\n'
        consumer = daemons("consumer", 41, extra_toml=metrics)
        provider = daemons(
            "provider",
            40,
            bootstrap=consumer.addrs()[0],
            extra_toml=metrics + '\n[jobs]\nexecutors = ["process"]\n',
        )
        provider.cli("onboard", "-m", "8000", "-c", "4000", "-a", TEST_ADDRESS)
        consumer_url, provider_url = _metrics_url(consumer), _metrics_url(provider)

        def sees_provider() -> bool:
            # No nunet_peers sample at all until the consumer's peer table has a channel.
            samples, _ = scrape(consumer_url)
            peers = [v for got, v in samples.get("nunet_peers", []) if got == {"channel": CHANNEL}]
            return bool(peers) and peers[0] >= 1

        wait_for(sees_provider, "the consumer's metrics never counted the provider")
        samples, _ = scrape(consumer_url)
        assert value(samples, "nunet_network_online") == 1
        assert value(samples, "nunet_network_connected_peers") >= 1
        assert value(samples, "nunet_network_restarts_total") == 0

        address = server.server_address
        job = consumer.cli(
            "job",
            "submit",
            "--url",
            f"http://127.0.0.1:{address[1]}/hello.py",
            "--framework",
            "scikit-learn",
            "--expected-minutes",
            "1",
        )
        wait_for(
            lambda: consumer.cli("job", "show", job["job_id"])["state"] == "completed",
            "the job never completed",
            timeout=60,
        )
        samples, _ = scrape(provider_url)
        assert value(samples, "nunet_node_onboarded") == 1
        assert value(samples, "nunet_jobs", role="provider", state="completed") == 1
        assert value(samples, "nunet_machine_time_sold_seconds_total") > 0
        samples, _ = scrape(consumer_url)
        assert value(samples, "nunet_jobs", role="consumer", state="completed") == 1
    finally:
        server.shutdown()
        server.server_close()
