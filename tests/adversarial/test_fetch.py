"""A consumer makes the provider fetch its own local services (SSRF), against real daemons.

The consumer names a script URL or a git repository; the provider's machine fetches it and a
failing script's SyntaxError would carry what it read back in the job's log. A server on
127.0.0.1 (and [::1]) holds a secret; the provider allows only 127.0.0.2, where an honest
server and git repository live. Every plain spelling of loopback (the C library's octal, hex
and short ones are refused at validation, with a reason), a redirect from the allowed host
to the secret one, git over http to it and git redirected to it: each job fails with a clear
reason, the secret server never sees a request, and an honest job from 127.0.0.2 still
completes after each attack. A provider without the setting refuses loopback altogether.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import pytest

from engine import api
from engine.control_client import ControlClient
from engine.domain.spec import JobSpec
from engine.errors import EngineError
from tests.adversarial.hostile import JOB_PROTOCOL, HostilePeer, open_job, seal_job
from tests.daemon_harness import Daemon, wait_for
from tests.daemons.test_jobs_e2e import TERMINAL, _pair
from tests.unit.test_fetch_policy import Served, git_server, serving

SECRET = b"PROVIDER_SECRET = 'do-not-leak-4a7f'\n"
HONEST = b"print('honest job ran', flush=True)\n"
ALLOW_2 = {"NUNET_JOBS_FETCH_ALLOW_NETWORKS": "127.0.0.2/32"}
NO_SETTING = {"NUNET_JOBS_FETCH_ALLOW_NETWORKS": ""}


def _has_ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
    except OSError:
        return False
    return True


@contextmanager
def secret_servers() -> Iterator[list[Served]]:
    """The provider's "local service": on 127.0.0.1 and, same port, on [::1] where possible."""
    with ExitStack() as stack:
        v4 = stack.enter_context(serving("127.0.0.1"))
        v4.routes["/secret"] = (200, {}, SECRET)
        servers = [v4]
        if _has_ipv6_loopback():
            v6 = stack.enter_context(serving("::1", v4.port))
            v6.routes["/secret"] = (200, {}, SECRET)
            servers.append(v6)
        yield servers


@dataclass(frozen=True)
class Refused:
    """The provider refused the offer (no job was made): the consumer's error, as it reads."""

    reason: str


class Consumer:
    """The consumer daemon's control socket, held open: a job is a few calls on it, not a
    CLI process each (this suite runs two dozen jobs)."""

    def __init__(self, daemon: Daemon, provider: Daemon) -> None:
        self.client = ControlClient(daemon.home.control_socket)
        self.provider_id = provider.peer_id

    def submit(self, spec: dict[str, Any]) -> str | Refused:
        """While the consumer still counts the provider's last job as running (the next
        heartbeat says otherwise) it answers busy: ask again. A script the provider cannot
        fetch is refused at the offer, before any job exists (engine/jobs/provider.py fetches
        it before quoting): that refusal is the answer."""
        command = api.SubmitJob(
            spec=msgspec.convert({**spec, "expected_minutes": 1}, JobSpec), peer_id=self.provider_id
        )

        def submitted() -> str | Refused | None:
            try:
                job: api.JobInfo = self.client.call_blocking(command, timeout=60)
            except EngineError as exc:
                if "cannot fetch the job's script" in exc.message:
                    return Refused(exc.message)
                # Busy, or this loop's own asking (23 jobs back to back, most refused at
                # once) went past the provider's per-peer offer rate: ask again either way.
                assert "busy" in exc.message or "too many offers" in exc.message, exc.message
                return None
            return job.job_id

        answer: str | Refused = wait_for(submitted, f"the provider stayed busy for {spec}", 30)
        return answer

    def run(self, spec: dict[str, Any]) -> tuple[api.JobInfo, str] | Refused:
        """One job, once it has ended, and its log; or the offer's refusal."""
        job_id = self.submit(spec)
        if isinstance(job_id, Refused):
            return job_id

        def ended() -> api.JobInfo | None:
            job: api.JobInfo = self.client.call_blocking(api.GetJob(job_id=job_id))
            return job if job.state in TERMINAL else None

        job: api.JobInfo = wait_for(ended, f"job {job_id} never ended", 90)
        logs: api.JobLogs = self.client.call_blocking(api.GetJobLogs(job_id=job_id))
        return job, "\n".join(line.text for line in logs.lines)

    def close(self) -> None:
        self.client.close()


def _script(url: str) -> dict[str, Any]:
    return {"framework": "scikit-learn", "script_url": url}


def _git_job(url: str) -> dict[str, Any]:
    return {"framework": "scikit-learn", "git": {"url": url, "entry": "train.py", "ref": "main"}}


def _refused(ended: tuple[api.JobInfo, str] | Refused, *expected: str) -> None:
    """Refused with a reason that says why: at the offer (a script URL) or at the job's start
    (a git clone), and never with the secret in the reason or the log."""
    if isinstance(ended, Refused):
        reason, logs = ended.reason, ""
    else:
        job, logs = ended
        assert job.state == "failed", job
        reason = job.reason
    assert "refused to fetch from" in reason, reason
    for text in expected:
        assert text in reason, (text, reason)
    assert "\n" not in reason
    assert "do-not-leak" not in reason and "do-not-leak" not in logs


def _completed(ended: tuple[api.JobInfo, str] | Refused) -> None:
    assert not isinstance(ended, Refused), ended
    job, logs = ended
    assert job.state == "completed", job
    assert "honest job ran" in logs


@pytest.fixture
def market(daemons: Callable[..., Daemon], request: pytest.FixtureRequest) -> Iterator[Consumer]:
    """A consumer and a provider (process executor) whose fetch setting is the test's
    parameter; the consumer's control socket to drive jobs with."""
    provider, consumer = _pair(daemons, env=request.param)
    client = Consumer(consumer, provider)
    try:
        yield client
    finally:
        client.close()


@pytest.mark.timeout(300)  # 23 jobs and a daemon pair, on a machine shared with others
@pytest.mark.parametrize("market", [ALLOW_2], indirect=True)
def test_a_consumer_cannot_make_the_provider_fetch_its_local_services(
    market: Consumer, tmp_path: Path
) -> None:
    with (
        secret_servers() as secrets,
        serving("127.0.0.2") as allowed,
        git_server("127.0.0.1", tmp_path / "secret-git", SECRET.decode()) as secret_git,
        git_server("127.0.0.2", tmp_path / "honest-git", HONEST.decode()) as honest_git,
    ):
        port = secrets[0].port
        allowed.routes["/honest.py"] = (200, {}, HONEST)
        allowed.routes["/to-secret"] = (302, {"Location": f"http://127.0.0.1:{port}/secret"}, b"")
        allowed.routes["/to-secret-by-name"] = (
            307,
            {"Location": f"http://localhost:{port}/secret"},
            b"",
        )
        allowed.routes["/moved.git/info/refs"] = (
            301,
            {"Location": f"{secret_git.url}/info/refs?service=git-upload-pack"},
            b"",
        )
        attacks: list[tuple[dict[str, Any], tuple[str, ...]]] = [
            (_script(f"http://127.0.0.1:{port}/secret"), ("'127.0.0.1' (127.0.0.1)", "loopback")),
            (_script(f"http://localhost:{port}/secret"), ("'localhost'", "loopback")),
            (_script(f"http://[::1]:{port}/secret"), ("(::1)", "loopback")),
            (_script(f"http://[::ffff:127.0.0.1]:{port}/secret"), ("IPv4-mapped",)),
            (
                _script(f"{allowed.url}/to-secret"),
                (f"{allowed.url}/to-secret redirected to http://127.0.0.1:{port}/secret",),
            ),
            (_script(f"{allowed.url}/to-secret-by-name"), ("redirected to", "'localhost'")),
            (_git_job(secret_git.url), (f"cannot clone {secret_git.url}",)),
            (
                _git_job(f"{allowed.url}/moved.git"),
                (f"cannot clone {allowed.url}/moved.git", "redirected to"),
            ),
        ]
        # One after the other, an honest job after each: no attack may leave the provider
        # unable to serve the next consumer.
        for spec, expected in attacks:
            _refused(market.run(spec), *expected)
            _completed(market.run(_script(f"{allowed.url}/honest.py")))
        _completed(market.run(_git_job(honest_git.url)))
        for secret in secrets:
            assert secret.seen == [], secret.seen
        assert secret_git.requests == []
        assert ("/to-secret", f"127.0.0.2:{allowed.port}") in allowed.seen  # the attack ran


@pytest.mark.parametrize("market", [NO_SETTING], indirect=True)
def test_without_the_setting_loopback_is_refused_and_the_provider_carries_on(
    market: Consumer,
) -> None:
    with secret_servers() as secrets, serving("127.0.0.2") as other:
        other.routes["/honest.py"] = (200, {}, HONEST)
        port = secrets[0].port
        _refused(
            market.run(_script(f"http://127.0.0.1:{port}/secret")),
            "loopback",
            'jobs.fetch_allow_networks = ["127.0.0.1/32"]',
        )
        # Every loopback address is off without the setting, not only 127.0.0.1; the provider
        # still takes the next job and answers it with a clear reason.
        _refused(market.run(_script(f"{other.url}/honest.py")), "'127.0.0.2' (127.0.0.2)")
        assert all(secret.seen == [] for secret in secrets) and other.seen == []
    peers: api.PeerList = market.client.call_blocking(api.ListPeers())
    assert any(p.peer_id == market.provider_id for p in peers.peers)


# IPv4 addresses in the C library's other spellings: refused with the reason at validation
# (test_odd_ipv4_spellings_are_refused_with_a_reason); a redirect to one is refused too.
ODD_IPV4 = ("0177.0.0.1", "0x7f.1", "0x7f000001", "2130706433", "127.1", "017700000001")


@pytest.mark.timeout(120)
def test_odd_ipv4_spellings_are_refused_with_a_reason(
    daemons: Callable[..., Daemon], hostile: Callable[..., HostilePeer]
) -> None:
    """`http://0177.0.0.1/` made httpx raise while parsing, an error no handler expected:
    the provider ended the offer's stream with no answer at all."""
    provider, consumer = _pair(daemons, env=NO_SETTING)
    client = ControlClient(consumer.home.control_socket)
    peer = hostile(seed=b"\x68" * 32, bootstrap=[provider.addrs()[0]])
    peer.wait_connected(provider.peer_id)
    try:
        for host in ODD_IPV4:
            spec = {**_script(f"http://{host}:8000/secret"), "expected_minutes": 1}
            command = api.SubmitJob(spec=msgspec.convert(spec, JobSpec), peer_id=provider.peer_id)
            with pytest.raises(EngineError, match="octal, hex or short form") as info:
                client.call_blocking(command, timeout=30)
            assert f"host {host!r}" in info.value.message
            assert "(it means 127.0.0.1)" in info.value.message
        # A peer that skips its own node's check: the provider answers, with the reason.
        spec = {**_script("http://0177.0.0.1:8000/secret"), "expected_minutes": 1}
        offer = {"t": "offer", "v": 1, "job_id": "a00000000021", "spec": spec,
                 "consumer": peer.peer_id}  # fmt: skip
        frames = peer.request(provider.peer_id, JOB_PROTOCOL, [seal_job(peer.identity, offer)])
        assert frames, "no answer to an offer for http://0177.0.0.1/"
        answer = open_job(frames[0])
        assert answer["t"] == "refusal" and "octal, hex or short form" in answer["reason"]
    finally:
        client.close()
