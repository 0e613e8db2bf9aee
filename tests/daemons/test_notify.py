"""Notifications: which events are told (once), and their delivery to a real webhook server on
127.0.0.1, a real command hook and a stand-in notify-send; end to end with two daemons."""

from __future__ import annotations

import functools
import http.server
import json
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest
import trio

from engine import api
from engine.config import NotifySettings
from engine.domain.spec import JobSpec
from engine.facade import Engine
from engine.notices import NoticeFilter
from engine.notify import Notifier, redact_url
from tests.conftest import MACHINE_TOML, TEST_ADDRESS, make_home
from tests.daemon_harness import Daemon, daemons, wait_for

__all__ = ["daemons"]


class Hook:
    """A webhook receiver: records each POST; can fail the first few or hang."""

    def __init__(self) -> None:
        self.attempts: list[bytes] = []
        self.accepted: list[dict[str, Any]] = []
        self.fail_first = 0
        self.status = 500
        self.hang = threading.Event()  # set: answer; clear: hold every request
        self.hang.set()
        self.lock = threading.Lock()
        hook = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(min(int(self.headers.get("content-length", 0)), 1 << 20))
                with hook.lock:
                    hook.attempts.append(body)
                    failing = len(hook.attempts) <= hook.fail_first
                hook.hang.wait(30)
                if failing:
                    self.send_response(hook.status)
                    self.end_headers()
                    return
                with hook.lock:
                    hook.accepted.append(json.loads(body))
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hooks/SECRET-PATH?token=T0K"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.hang.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def hook() -> Iterator[Hook]:
    server = Hook()
    try:
        yield server
    finally:
        server.close()


def ended_job(job_id: str = "job-1", state: str = "completed", **extra: Any) -> api.JobChanged:
    now = time.time()
    job = api.JobInfo(
        job_id=job_id,
        role="consumer",
        state=state,  # type: ignore[arg-type]
        provider="prov",
        consumer="me",
        spec=JobSpec(name="iris", framework="scikit-learn"),
        estimate_units=250_000,
        updated_at=now,
        finished_at=extra.pop("finished_at", now),
        metering=api.JobMetering(wall_s=12.0, cost_units=50_000),
        **extra,
    )
    return api.JobChanged(at=now, job=job)


def escrow_event(
    state: str, role: str = "provider", paid: int | None = None, refunded: int | None = None
) -> api.EscrowChanged:
    escrow = api.EscrowInfo(
        job_id="job-1",
        role=role,  # type: ignore[arg-type]
        state=state,  # type: ignore[arg-type]
        amount=2_500_000,
        deadline_ms=0,
        consumer_pkh="",
        provider_pkh="",
        oracle_key="",
        claim_tx="ab" * 32,
        metered_units=None if paid is None else paid,
        paid_units=paid,
        refunded_units=refunded,
    )
    return api.EscrowChanged(at=time.time(), escrow=escrow)


# --- which events ----------------------------------------------------------------------------


def test_a_job_is_told_once_when_it_ends() -> None:
    notices = NoticeFilter(node_id="me")
    running = ended_job(state="running")
    assert notices.observe(running) is None
    notice = notices.observe(ended_job())
    assert notice is not None and notice.kind == "job_ended" and not notice.bad
    assert notice.payload["job"]["job_id"] == "job-1"
    assert notice.payload["job"]["estimate_units"] == 250_000
    assert notice.payload["job"]["metered_units"] == 50_000
    assert notice.payload["node"] == "me"
    assert notices.observe(ended_job()) is None  # saved again (results fetched): not again
    failed = notices.observe(ended_job("job-2", "failed", reason="boom\x1b[2J"))
    assert failed is not None and failed.bad and "\\x1b" in failed.text  # shown, not obeyed


def test_a_job_that_ended_before_we_watched_is_not_told() -> None:
    notices = NoticeFilter(since=time.time())
    assert notices.observe(ended_job(finished_at=time.time() - 3600)) is None


def test_rewards_paid_and_refunds_are_told_once() -> None:
    notices = NoticeFilter()
    assert notices.observe(escrow_event("verified")) is None
    paid = notices.observe(escrow_event("claimed"))
    assert paid is not None and paid.kind == "reward_paid"
    assert paid.payload["escrow"]["amount_ntx_base_units"] == 2_500_000
    assert notices.observe(escrow_event("claimed")) is None
    assert notices.observe(escrow_event("paid_out", role="consumer")) is None
    refund = notices.observe(escrow_event("refunded", role="consumer"))
    assert refund is not None and refund.kind == "refunded"


def test_a_reward_notice_says_what_was_paid_not_what_was_locked() -> None:
    """Issue 20 §9: the toast and the webhook said the lock (2.5 NTX) for a job that paid
    0.6 NTX; every figure now says what it is, and the webhook carries each under its key."""
    paid = NoticeFilter().observe(escrow_event("claimed", paid=600_000, refunded=1_900_000))
    assert paid is not None
    assert paid.text == "0.6 NTX paid (of 2.5 NTX locked) for job job-1"
    figures = paid.payload["escrow"]
    assert (figures["locked_units"], figures["paid_units"], figures["refunded_units"]) == (
        2_500_000,
        600_000,
        1_900_000,
    )
    assert figures["metered_units"] == 600_000
    refund = NoticeFilter().observe(
        escrow_event("refunded", role="consumer", paid=600_000, refunded=1_900_000)
    )
    assert (
        refund is not None and refund.text == "1.9 NTX refunded (of 2.5 NTX locked) for job job-1"
    )
    # A row settled before the split was recorded: all one way, by its state.
    whole = NoticeFilter().observe(escrow_event("claimed"))
    assert whole is not None and whole.text.startswith("2.5 NTX paid (of 2.5 NTX locked)")


def test_the_logged_webhook_address_keeps_no_token() -> None:
    shown = redact_url("https://user:pw@hooks.example:8443/services/T0/B0/XYZ?token=abc")
    assert shown == "https://hooks.example:8443/…"


# --- delivery ----------------------------------------------------------------------------------


def settings(**changes: Any) -> NotifySettings:
    return msgspec.structs.replace(NotifySettings(), **changes)


def deliver(notifier_settings: NotifySettings, **kwargs: Any) -> Any:
    notice = NoticeFilter(node_id="me").observe(ended_job())
    assert notice is not None

    async def main() -> Any:
        async with httpx.AsyncClient(timeout=notifier_settings.webhook_timeout_s) as client:
            notifier = Notifier(notifier_settings, client, **kwargs)
            began = trio.current_time()
            await notifier.deliver(notice)
            return trio.current_time() - began

    return trio.run(main)


def test_a_failing_server_gets_the_event_once_after_retries(hook: Hook) -> None:
    hook.fail_first = 2
    deliver(settings(webhook_url=hook.url, webhook_backoff_s=0.05, webhook_retries=3))
    assert len(hook.attempts) == 3
    assert len(set(hook.attempts)) == 1  # the same event each time
    assert len(hook.accepted) == 1
    event = hook.accepted[0]
    assert event["event"] == "job_ended"
    assert event["job"]["job_id"] == "job-1" and event["job"]["state"] == "completed"


def test_a_refusal_is_not_retried_and_retries_are_bounded(hook: Hook) -> None:
    hook.fail_first, hook.status = 10, 400
    deliver(settings(webhook_url=hook.url, webhook_backoff_s=0.01, webhook_retries=3))
    assert len(hook.attempts) == 1 and hook.accepted == []
    hook.attempts.clear()
    hook.status = 503
    deliver(settings(webhook_url=hook.url, webhook_backoff_s=0.01, webhook_retries=2))
    assert len(hook.attempts) == 3 and hook.accepted == []


def test_a_hanging_server_costs_one_timeout_per_try(hook: Hook) -> None:
    hook.hang.clear()
    took = deliver(
        settings(
            webhook_url=hook.url, webhook_timeout_s=0.3, webhook_retries=1, webhook_backoff_s=0.01
        )
    )
    assert len(hook.attempts) == 2
    assert took < 3.0


def test_the_command_hook_gets_the_event_on_stdin(tmp_path: Path) -> None:
    out = tmp_path / "event.json"
    script = f"import sys, pathlib; pathlib.Path({str(out)!r}).write_bytes(sys.stdin.buffer.read())"
    deliver(settings(command=[sys.executable, "-c", script]))
    event = json.loads(out.read_bytes())
    assert event["event"] == "job_ended" and event["job"]["job_id"] == "job-1"


def test_a_command_that_hangs_is_killed_in_time(tmp_path: Path) -> None:
    took = deliver(
        settings(
            command=[sys.executable, "-c", "import time; time.sleep(60)"], command_timeout_s=0.5
        )
    )
    assert took < 5.0


def test_desktop_notifications_where_notify_send_is(tmp_path: Path) -> None:
    argv_file = tmp_path / "argv.json"
    fake = tmp_path / "notify-send"
    fake.write_text(
        f"#!{sys.executable}\nimport json, sys, pathlib\n"
        f"pathlib.Path({str(argv_file)!r}).write_text(json.dumps(sys.argv[1:]))\n"
    )
    fake.chmod(0o755)
    deliver(settings(desktop=True), which=lambda name: str(fake) if name == "notify-send" else None)
    argv = json.loads(argv_file.read_text())
    assert argv[0] == "--app-name=nunet-tui" and argv[1] == "--"
    assert argv[2] == "Job completed" and "iris" in argv[3]
    # Where there is none, nothing happens and nothing fails.
    deliver(settings(desktop=True), which=lambda name: None)


def test_a_hanging_webhook_does_not_slow_the_node(hook: Hook, tmp_path: Path) -> None:
    hook.hang.clear()
    home = make_home(
        tmp_path / "home",
        machine_toml=MACHINE_TOML
        + f'\n[notify]\nwebhook_url = "{hook.url}"\nwebhook_timeout_s = 5\nwebhook_retries = 10\n',
    )
    engine = Engine(home, autostart_network=False).start()
    try:
        node = engine.node

        async def burst() -> None:
            for i in range(1000):  # more than the queue holds: the rest are dropped
                node.emit(ended_job(f"job-{i}"))

        began = time.monotonic()
        engine._require_thread().call_blocking(burst, timeout=10)
        assert time.monotonic() - began < 2.0
        wait_for(lambda: hook.attempts, "the webhook was never tried")
        began = time.monotonic()
        for _ in range(20):
            engine.call_blocking(api.GetPeerSelf())
        assert time.monotonic() - began < 2.0  # the node answers while the webhook hangs
    finally:
        began = time.monotonic()
        engine.close()
        assert time.monotonic() - began < 5.0  # and stops without waiting for it


# --- end to end ------------------------------------------------------------------------------


def command_hook_toml(events: Path) -> str:
    """A ``[notify]`` section whose command appends each notice to ``events``, one a line."""
    append = (
        f"import sys; f = open({str(events)!r}, 'ab'); "
        "f.write(sys.stdin.buffer.read() + b'\\n'); f.close()"
    )
    return f'\n[notify]\ncommand = [{json.dumps(sys.executable)}, "-c", {json.dumps(append)}]\n'


def notices(events: Path) -> list[dict[str, Any]]:
    """What a ``command_hook_toml`` hook was given so far."""
    if not events.exists():
        return []
    return [json.loads(line) for line in events.read_bytes().splitlines() if line.strip()]


def test_a_finished_job_is_posted_once_and_given_to_the_provider_hook(
    daemons: Callable[..., Daemon], hook: Hook, tmp_path: Path
) -> None:
    root = tmp_path / "www"
    root.mkdir()
    (root / "hello.py").write_text("print('hello', flush=True)\n")
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    handler.log_message = lambda *a: None  # type: ignore[attr-defined]
    scripts = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=scripts.serve_forever, daemon=True).start()
    events = tmp_path / "provider-events.ndjson"
    try:
        consumer = daemons("consumer", 51, extra_toml=f'\n[notify]\nwebhook_url = "{hook.url}"\n')
        provider = daemons(
            "provider",
            50,
            bootstrap=consumer.addrs()[0],
            extra_toml='\n[jobs]\nexecutors = ["process"]\n' + command_hook_toml(events),
        )
        provider.cli("onboard", "-m", "8000", "-c", "4000", "-a", TEST_ADDRESS)
        provider_id = provider.peer_id
        wait_for(
            lambda: any(p["peer_id"] == provider_id for p in consumer.cli("peer", "list")["peers"]),
            "the consumer never saw the provider",
        )
        url = f"http://127.0.0.1:{scripts.server_address[1]}/hello.py"
        job = consumer.cli(
            "job",
            "submit",
            "--url",
            url,
            "--framework",
            "scikit-learn",
            "--expected-minutes",
            "1",
            "--name",
            "hello",
        )
        wait_for(lambda: hook.accepted, "the consumer never posted the job's end", timeout=60)
        wait_for(lambda: events.exists() and events.read_bytes().strip(), "no provider hook")
        shown = consumer.cli("job", "show", job["job_id"])
        assert shown["state"] == "completed"
        assert len(hook.accepted) == 1
        posted = hook.accepted[0]
        assert posted["event"] == "job_ended"
        assert posted["job"]["job_id"] == job["job_id"]
        assert posted["job"]["state"] == "completed"
        assert posted["job"]["role"] == "consumer"
        assert posted["job"]["estimate_units"] == shown["estimate_units"]
        assert posted["job"]["locked_units"] == shown["lock_units"]
        # No escrow: the job's own metered figure, the one `job show` gives, saying so.
        metered = shown["money"]["metered_units"]
        assert metered is not None and posted["job"]["metered_units"] == metered
        assert not any(key.endswith("_ntx") for key in posted["job"])  # base units only
        lines = events.read_bytes().strip().splitlines()
        assert len(lines) == 1
        told = json.loads(lines[0])
        assert told["job"]["job_id"] == job["job_id"] and told["job"]["role"] == "provider"
    finally:
        scripts.shutdown()
        scripts.server_close()


# --- the TUI ---------------------------------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # Textual's loop
async def test_the_tui_rings_and_shows_a_notice_once(
    engine_client: Engine, anyio_backend: str
) -> None:
    import asyncio

    from engine.api import SetMode
    from nunet_tui.app import NunetApp

    engine_client.call_blocking(SetMode(mode="consumer"))
    app = NunetApp(client=engine_client)
    rings: list[float] = []
    shown: list[tuple[str, str]] = []
    original = app.notify

    def notify(message: str, *, title: str = "", **kwargs: Any) -> None:
        shown.append((title, message))
        original(message, title=title, **kwargs)

    app.bell = lambda: rings.append(time.time())  # type: ignore[method-assign]
    app.notify = notify  # type: ignore[method-assign]
    async with app.run_test(size=(100, 32)) as pilot:

        async def emit() -> None:
            node = engine_client.node
            node.emit(ended_job("tui-job", "failed", reason="exit 1"))
            node.emit(ended_job("tui-job", "failed", reason="exit 1"))  # saved again
            node.emit(escrow_event("refunded", role="consumer"))

        await asyncio.to_thread(engine_client._require_thread().call_blocking, emit)
        deadline = time.monotonic() + 10
        while len(rings) < 2 and time.monotonic() < deadline:
            await pilot.pause(0.02)
        await pilot.pause(0.1)
    assert len(rings) == 2
    titles = [title for title, _ in shown if title in ("Job failed", "Refund")]
    assert titles == ["Job failed", "Refund"]
    assert any("iris" in message and "exit 1" in message for _, message in shown)
