"""Pilot tests of the job screens against real daemons: a provider with the process executor,
a consumer the TUI attaches to over its control socket, and the scripts on a real HTTP server.

The form is filled from the keyboard; everything the screens show comes from the real engines
(matching, the job protocol over libp2p, live log events, results fetched and verified)."""

from __future__ import annotations

import functools
import http.server
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
from textual.pilot import Pilot
from textual.widgets import Button, Input, OptionList

from engine.api import (
    JobInfo,
    JobLogLine,
    ListPeers,
    Peer,
    PeerList,
    PeerResources,
    SetMode,
    SubmitJob,
    SubmitProgress,
)
from engine.control_client import DAEMON_GONE, ControlClient
from engine.domain.spec import JobSpec
from engine.errors import EngineError
from engine.facade import Engine
from nunet_tui.app import NunetApp
from nunet_tui.format import DASH
from nunet_tui.presets import EXAMPLES, load_presets
from nunet_tui.screens.confirm import ConfirmScreen
from nunet_tui.screens.job_detail import JobDetailScreen, traceback_tail
from nunet_tui.screens.job_results import ResultsDirScreen, ResultsScreen, pretty_json
from nunet_tui.screens.submit import SubmitScreen
from nunet_tui.viewmodels.job_form import (
    EXTRA_FIELDS,
    FIELDS,
    extra_line,
    form_values_of,
    preset_extra,
    read_spec,
)
from nunet_tui.widgets.job_estimate import tier_table
from nunet_tui.widgets.job_form import JobForm
from nunet_tui.widgets.job_log import JobLogView, clean_line
from nunet_tui.widgets.key_table import KeyTable
from nunet_tui.widgets.running_jobs import RunningJobs
from tests.conftest import REPO, TEST_ADDRESS
from tests.daemon_harness import Daemon, daemons, wait_for
from tests.pilot import FakeEngineClient, anyio_backend, on_screen, text_of, until

__all__ = ["anyio_backend", "daemons"]

pytestmark = pytest.mark.anyio
SIZE = (120, 40)

PROCESS_JOBS = """
[jobs]
executors = ["process"]
checkpoint_interval_s = 1
"""
SLOW = """
import time
for i in range(400):
    print(f"tick {i}", flush=True)
    time.sleep(0.05)
"""
FAILING = """
print("about to fail", flush=True)
raise RuntimeError("The size of tensor a (5) must match the size of tensor b (3)")
"""


@pytest.fixture
def scripts(tmp_path: Path) -> Iterator[str]:
    root = tmp_path / "www"
    root.mkdir()
    (root / "iris.py").write_text((REPO / "examples/jobs/iris/train.py").read_text())
    (root / "slow.py").write_text(SLOW)
    (root / "failing.py").write_text(FAILING)
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    handler.log_message = lambda *a: None  # type: ignore[attr-defined]
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture
def market(daemons: Callable[..., Daemon]) -> Iterator[tuple[Daemon, Daemon, ControlClient]]:
    """A provider (process executor, one slot) and a consumer daemon that sees it; the TUI's
    client is attached to the consumer's control socket."""
    consumer = daemons("consumer", 41)
    provider = daemons("provider", 40, bootstrap=consumer.addrs()[0], extra_toml=PROCESS_JOBS)
    provider.cli("onboard", "-m", "8000", "-c", "4000", "-a", TEST_ADDRESS)
    provider_id = provider.peer_id

    def advertised() -> bool:
        peers = consumer.cli("peer", "list")["peers"]
        return any(p["peer_id"] == provider_id and p.get("resources") for p in peers)

    wait_for(advertised, "the consumer never saw the provider's advert", timeout=30)
    client = ControlClient(consumer.home.control_socket)
    client.call_blocking(SetMode(mode="consumer"))
    try:
        yield provider, consumer, client
    finally:
        client.close()


def log_lines(screen: Any) -> list[str]:
    return list(screen.query_one(JobLogView).lines)


def who(screen: Any) -> str:
    options = screen.query_one("#who-list", OptionList)
    return "\n".join(
        str(options.get_option_at_index(i).prompt) for i in range(options.option_count)
    )


async def fill_form(pilot: Pilot[Any], url: str) -> None:
    """By keyboard: URL, scikit-learn, then 1 minute expected and a budget of 1 NTX."""
    await pilot.press(*url)
    await pilot.press("tab", "tab")  # name, then the framework
    await pilot.press("right", "right", "enter")  # PyTorch → TensorFlow → scikit-learn
    await pilot.press("tab", "tab", "tab", "tab")  # device, usage, deps, steps
    await pilot.press("tab", "ctrl+u", "1")  # expected minutes
    await pilot.press("tab", "tab", "tab", *"1")  # max minutes, spec, then the budget NTX


async def test_submit_iris_follow_it_and_view_its_results(
    market: tuple[Daemon, Daemon, ControlClient], scripts: str, tmp_path: Path
) -> None:
    provider, _, client = market
    provider_id = provider.peer_id
    app = NunetApp(client=client)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: type(app.screen).__name__ == "ConsumerDashboard")
        await pilot.press("s")
        await until(pilot, lambda: isinstance(app.screen, SubmitScreen))
        form: SubmitScreen = app.screen  # type: ignore[assignment]
        await fill_form(pilot, f"{scripts}/iris.py")
        assert form.query_one(JobForm).framework == "scikit-learn"
        # GPU is off the table for scikit-learn, and the form says why.
        assert form.query_one("#dev-gpu").disabled
        assert "CPU only" in text_of(form, "#device-hint")
        estimate = text_of(form, "#estimate-text")
        assert "Static estimate" in estimate and "NTX for 1 min" in estimate
        assert f"▸ Low      1     1{DASH}2" in text_of(form, "#tier-table")
        await until(pilot, lambda: provider_id[-4:] in who(form))
        assert who(form).startswith("✓") and "NTX" in who(form)
        assert not any(form.problems.values()), form.problems

        await pilot.press("ctrl+s")
        await until(pilot, lambda: isinstance(app.screen, JobDetailScreen), timeout=60)
        detail: JobDetailScreen = app.screen  # type: ignore[assignment]
        await until(pilot, lambda: any("accuracy" in ln for ln in log_lines(detail)), 60)
        await until(pilot, lambda: detail.job is not None and detail.job.state == "completed")
        assert any("confusion matrix" in line for line in log_lines(detail))
        assert "completed" in text_of(detail, "#job-timeline")
        facts = detail.query_one("#job-facts", KeyTable).plain_text()
        assert "Metering" in facts and "MTicks" in facts and "NTX metered" in facts
        # The consumer fetches and verifies the archive on its own; then o unpacks it.
        await until(pilot, lambda: detail.job is not None and bool(detail.job.results_dir))
        await pilot.press("o")
        await until(pilot, lambda: isinstance(app.screen, ResultsDirScreen))
        folder = app.screen.query_one("#folder", Input)
        assert folder.value == "~/nunet-results"
        folder.value = str(tmp_path / "results")
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, ResultsScreen))
        results: ResultsScreen = app.screen  # type: ignore[assignment]
        assert "outputs/metrics.json" in results.results.files
        await until(pilot, lambda: results.shown == "outputs/metrics.json")
        shown = text_of(results, "#view-text")
        assert '"accuracy":' in shown and '"confusion_matrix": [' in shown
        await pilot.press("escape")
        await until(pilot, lambda: isinstance(app.screen, JobDetailScreen))

        # A failing job: the traceback's tail and the exit code, under the facts.
        await pilot.press("escape")
        await pilot.press("s")
        await until(pilot, lambda: isinstance(app.screen, SubmitScreen))
        form = app.screen  # type: ignore[assignment]
        await fill_form(pilot, f"{scripts}/failing.py")
        await until(pilot, lambda: provider_id[-4:] in who(form))
        await pilot.press("ctrl+s")
        await until(
            pilot,
            lambda: isinstance(app.screen, JobDetailScreen) and app.screen is not detail,
            timeout=60,
        )
        failed: JobDetailScreen = app.screen  # type: ignore[assignment]
        await until(pilot, lambda: failed.job is not None and failed.job.state == "failed", 60)
        await until(pilot, lambda: "Traceback" in text_of(failed, "#job-failure"))
        failure = text_of(failed, "#job-failure")
        assert "exit code 1" in failure and "The size of tensor a (5)" in failure

        # Both jobs in the list, newest first, with their states.
        await pilot.press("escape")
        await pilot.press("j")
        await until(pilot, lambda: type(app.screen).__name__ == "JobsScreen")
        jobs: Any = app.screen
        await until(pilot, lambda: len(jobs.jobs) == 2)
        table = jobs.query_one("#jobs-table")
        states = [str(table.get_row_at(i)[2]) for i in range(table.row_count)]
        assert states == ["✗ failed", "✓ completed"]


async def test_live_log_search_and_cancel(
    market: tuple[Daemon, Daemon, ControlClient], scripts: str
) -> None:
    provider, _, client = market
    app = NunetApp(client=client)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: type(app.screen).__name__ == "ConsumerDashboard")
        await pilot.press("s")
        await until(pilot, lambda: isinstance(app.screen, SubmitScreen))
        form: SubmitScreen = app.screen  # type: ignore[assignment]
        await fill_form(pilot, f"{scripts}/slow.py")
        await until(pilot, lambda: provider.peer_id[-4:] in who(form))
        await pilot.press("ctrl+s")
        await until(pilot, lambda: isinstance(app.screen, JobDetailScreen), timeout=60)
        detail: JobDetailScreen = app.screen  # type: ignore[assignment]
        view = detail.query_one(JobLogView)
        # Lines keep arriving while we watch: the live tail, not only a backlog.
        await until(pilot, lambda: detail.job is not None and detail.job.state == "running")
        await until(pilot, lambda: view.total >= 5)
        seen = view.total
        await until(pilot, lambda: view.total >= seen + 10)
        assert detail.job is not None and detail.job.state == "running"
        assert view.lines[-1].startswith("tick ")
        numbers = [int(line.split()[1]) for line in view.lines if line.startswith("tick ")]
        assert numbers == list(range(numbers[0], numbers[0] + len(numbers)))  # none twice

        # f pauses: the view stays while lines arrive.
        await pilot.press("f")
        assert not view.following
        assert "paused" in str(detail.query_one("#log-panel").border_title)
        await pilot.press("f")
        assert view.following

        # / finds a line and pauses there.
        await pilot.press("slash", *"tick 3")
        await pilot.press("enter")
        assert view.match is not None and "tick 3" in view.lines[view.match - view.dropped]
        assert not view.following

        # x asks first, then cancels.
        await pilot.press("x")
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        await pilot.press("y")
        await until(pilot, lambda: isinstance(app.screen, JobDetailScreen))
        await until(pilot, lambda: detail.job is not None and detail.job.state == "cancelled")
        assert "cancelled" in text_of(detail, "#job-timeline")


async def test_a_provider_sees_the_job_it_runs(
    market: tuple[Daemon, Daemon, ControlClient], scripts: str
) -> None:
    provider, consumer, _ = market
    job = consumer.cli(
        "job", "submit", "--url", f"{scripts}/slow.py", "--framework", "scikit-learn"
    )
    client = ControlClient(provider.home.control_socket)
    try:
        client.call_blocking(SetMode(mode="provider"))
        app = NunetApp(client=client)
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: type(app.screen).__name__ == "ProviderDashboard")
            running = app.screen.query_one(RunningJobs)
            await until(pilot, lambda: running.display)
            assert job["job_id"] in running.render().plain
            await pilot.press("j")
            await until(pilot, lambda: type(app.screen).__name__ == "JobsScreen")
            jobs: Any = app.screen
            await until(pilot, lambda: job["job_id"] in jobs.jobs)
            table = jobs.query_one("#jobs-table")
            assert str(table.get_row_at(0)[1]) == "provider"
            await pilot.press("enter")
            await until(pilot, lambda: isinstance(app.screen, JobDetailScreen))
            detail: JobDetailScreen = app.screen  # type: ignore[assignment]
            view = detail.query_one(JobLogView)
            await until(pilot, lambda: view.total >= 3)
            seen = view.total
            await until(pilot, lambda: view.total > seen)  # read as the job prints
            # Cancelling and fetching results are the consumer's.
            assert not detail.check_action("cancel_job", ())
            assert not detail.check_action("results", ())
    finally:
        consumer.cli("job", "cancel", job["job_id"])
        client.close()


# --- the submit form against scripted engine replies --------------------------------------

FAKE_PROVIDER = Peer(
    peer_id="12D3KooWFakeProviderOfTheFormTestxyz9",
    channel="nunet-test",
    latency_ms=12.0,
    resources=PeerResources(
        cpu_mhz=8000,
        memory_mb=16000,
        disk_mb=50000,
        price_units={"low": 1_000_000, "moderate": 2_000_000, "high": 4_000_000},
        executors=("process",),
        frameworks=("pytorch", "tensorflow", "scikit-learn"),
    ),
)


async def _submit_form(app: NunetApp, pilot: Pilot[Any]) -> SubmitScreen:
    await until(pilot, lambda: type(app.screen).__name__ == "ConsumerDashboard")
    await pilot.press("s")
    screen: SubmitScreen = await on_screen(pilot, SubmitScreen)
    return screen


async def test_a_daemon_gone_at_submit_is_one_line_under_the_form(engine_client: Engine) -> None:
    """The control client's EngineError(daemon_gone) is the only error the screen catches:
    it shows as the form's general problem and the form stays, ready to submit again."""
    gone = EngineError(DAEMON_GONE, "the daemon closed the connection (stopped or restarted)")
    client = FakeEngineClient({SubmitJob: gone}, delegate=engine_client)
    engine_client.call_blocking(SetMode(mode="consumer"))
    app = NunetApp(client=client)
    async with app.run_test(size=SIZE) as pilot:
        form = await _submit_form(app, pilot)
        await pilot.press(*"http://127.0.0.1:9/train.py")
        await pilot.press("ctrl+s")
        await until(pilot, lambda: "closed the connection" in text_of(form, "#general-problems"))
        assert isinstance(app.screen, SubmitScreen)
        assert [type(c) for c in client.calls].count(SubmitJob) == 1
        assert not form.query_one("#submit", Button).disabled


async def test_the_submit_form_shows_each_step_of_the_submit(
    engine_client: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ "Submitting…" could last a minute with no word of what it waited for: each
    SubmitProgress of this submit is a line under the button as it arrives."""
    shown: list[list[str]] = []
    original = JobForm.show_progress

    def spy(form: JobForm, lines: Any) -> None:
        shown.append(list(lines))
        original(form, lines)

    monkeypatch.setattr(JobForm, "show_progress", spy)

    def submit(command: SubmitJob) -> JobInfo:
        for step, detail in (("matching", "3 peers on this channel"), ("asking", "provider x")):
            event = SubmitProgress(
                at=0.0, submit_id=command.submit_id, step=step, detail=detail, elapsed_s=0.5
            )
            client.emit(event)
        other = SubmitProgress(
            at=0.0, submit_id="not-ours", step="locking", detail="x", elapsed_s=1
        )
        client.emit(other)
        raise EngineError("no_match", "no provider can run this job")

    client = FakeEngineClient({SubmitJob: submit}, delegate=engine_client)
    engine_client.call_blocking(SetMode(mode="consumer"))
    app = NunetApp(client=client)
    async with app.run_test(size=SIZE) as pilot:
        form = await _submit_form(app, pilot)
        await pilot.press(*"http://127.0.0.1:9/train.py")
        await pilot.press("ctrl+s")
        await until(pilot, lambda: "no provider" in text_of(form, "#general-problems"))
        await until(pilot, lambda: any(len(lines) == 2 for lines in shown))
        last = next(lines for lines in reversed(shown) if lines)
        assert "matching: 3 peers on this channel" in last[0] and "asking" in last[1]
        assert not any("locking" in line for lines in shown for line in lines)
        submitted = [c for c in client.calls if isinstance(c, SubmitJob)]
        assert submitted and submitted[0].submit_id


async def test_enter_on_a_provider_picks_it_and_again_goes_back_to_the_best(
    engine_client: Engine,
) -> None:
    """The "who can run it" list posts Picked; the screen puts the peer in the form."""
    client = FakeEngineClient(
        {ListPeers: PeerList(channel="nunet-test", peers=(FAKE_PROVIDER,))},
        delegate=engine_client,
    )
    engine_client.call_blocking(SetMode(mode="consumer"))
    app = NunetApp(client=client)
    async with app.run_test(size=SIZE) as pilot:
        form = await _submit_form(app, pilot)
        await until(pilot, lambda: FAKE_PROVIDER.peer_id[-4:] in who(form))
        options = form.query_one("#who-list", OptionList)
        options.focus()
        options.highlighted = 0
        await pilot.press("enter")
        field = form.query_one("#peer_id", Input)
        await until(pilot, lambda: field.value == FAKE_PROVIDER.peer_id)
        assert "← picked" in who(form)
        assert str(form.query_one("#submit", Button).label).startswith("Submit to 12D3KooW")
        await pilot.press("enter")
        await until(pilot, lambda: field.value == "")
        assert str(form.query_one("#submit", Button).label) == "Submit to best match"


async def test_two_providers_with_one_name_are_told_apart_by_their_ids(
    engine_client: Engine,
) -> None:
    """Issue 22: a name is the provider's own words (markup in it stays literal) and never
    shown without the short id, so a hostile twin of a name is not the same row."""
    name = "[b]Twin[/b]"
    twin = msgspec.structs.replace(
        FAKE_PROVIDER, peer_id="12D3KooWAnotherProviderWithTheNameab12", display_name=name
    )
    first = msgspec.structs.replace(FAKE_PROVIDER, display_name=name)
    client = FakeEngineClient(
        {ListPeers: PeerList(channel="nunet-test", peers=(first, twin))}, delegate=engine_client
    )
    engine_client.call_blocking(SetMode(mode="consumer"))
    app = NunetApp(client=client)
    async with app.run_test(size=SIZE) as pilot:
        form = await _submit_form(app, pilot)
        await until(pilot, lambda: "ab12" in who(form) and "xyz9" in who(form))
        rows = who(form)
        assert f"{name} · 12D3KooW…xyz9" in rows and f"{name} · 12D3KooW…ab12" in rows
        form.query_one("#peer_id", Input).value = twin.peer_id
        button = form.query_one("#submit", Button)
        await until(pilot, lambda: str(button.label) == f"Submit to {name} · 12D3KooW…ab12")


# --- pieces, on real inputs ------------------------------------------------------------


def test_log_lines_are_shown_literally() -> None:
    assert clean_line("[bold red]x[/] stays") == "[bold red]x[/] stays"
    assert clean_line("\x1b[2Jwiped?\x07") == "\\x1b[2Jwiped?\\x07"
    assert clean_line("a\tb") == "a       b"


def test_traceback_tail_starts_at_the_last_traceback() -> None:
    lines = ["x", "Traceback (most recent call last):", '  File "a.py"', "E: one"]
    lines += ["y", "Traceback (most recent call last):", '  File "b.py"', "RuntimeError: two"]
    assert traceback_tail(lines) == lines[5:]
    assert traceback_tail(["a", "b"], limit=1) == ["b"]


def test_presets_come_from_the_example_job_files() -> None:
    examples = {
        "scripts_url": "http://127.0.0.1:9/",
        "examples": {"iris": "...", "pytorch_checkpoint": "...", "tensor_shape_error": "..."},
    }
    presets = load_presets(examples)
    assert [p.name for p in presets] == ["iris", "pytorch_checkpoint", "tensor_shape_error"]
    iris = presets[0].spec
    assert iris is not None and iris.script_url == "http://127.0.0.1:9/iris/train.py"
    assert iris.framework == "scikit-learn"
    assert presets[1].spec is not None and presets[1].spec.env["EPOCHS"] == "8"
    assert load_presets(None) == []


def test_the_tier_table_is_the_engine_one() -> None:
    text = tier_table("gpu", "moderate").plain
    assert "▸ Moderate" in text and "VRAM GB" in text and f"12{DASH}24" in text


def test_json_results_are_pretty_printed() -> None:
    assert pretty_json(b'{"a": [1, 2]}') == '{\n  "a": [\n    1,\n    2\n  ]\n}'
    assert pretty_json(b"not json") == "not json"


def test_log_line_of_the_system_stream_is_marked() -> None:
    from nunet_tui.screens.job_detail import log_text

    line = JobLogLine(seq=0, stream="system", text="resumed from checkpoint 2", at=0.0)
    assert log_text(line) == "» resumed from checkpoint 2"


def test_job_detail_names_where_a_paid_jobs_money_is() -> None:
    from engine.api import EscrowInfo
    from nunet_tui.screens.job_detail import _escrow_fact
    from nunet_tui.viewmodels.money import escrow_figures, summary

    escrow = EscrowInfo(
        job_id="b742d0b1c66f",
        role="consumer",
        state="paid_out",
        amount=20_000,
        deadline_ms=0,
        consumer_pkh="aa" * 28,
        provider_pkh="bb" * 28,
        oracle_key="cc" * 32,
        lock_tx="6fee1b3d" + "0" * 52 + "b7b6",
        claim_tx="91ac" + "1" * 56 + "9f00",
        reward_type="withdraw",
        error="[bold]oracle[/] said \x1b[2J",
    )
    text = _escrow_fact(escrow).plain
    assert "lock 6fee1b3d…b7b6" in text and "settle 91ac1111…9f00" in text
    # A record from before billing settled all or nothing: the whole lock was paid.
    assert summary(escrow_figures(escrow)) == (
        "0.02 NTX locked · 0.02 NTX metered · 0.02 NTX paid · 0 NTX refunded"
    )
    assert "[bold]oracle[/]" in text and "\x1b" not in text  # literal, and no escapes


def test_every_example_read_back_from_the_form_is_its_job_file() -> None:
    """F1... fill the form from each example; what the form then submits is the example's
    spec, service kind and ports included (they were dropped: the Gradio and HTTP examples
    ran as batch jobs with nothing to forward)."""
    names = sorted(p.name for p in EXAMPLES.iterdir() if (p / "job.toml").exists())
    examples = {"scripts_url": "http://127.0.0.1:9/", "examples": dict.fromkeys(names, "...")}
    presets = load_presets(examples)
    assert [p.name for p in presets] == names[: len(presets)] and presets
    for preset in presets:
        assert preset.spec is not None, preset.error
        spec, unread = read_spec(form_values_of(preset.spec))
        assert not unread and spec == preset.spec, preset.name
    services = [p.spec for p in presets if p.spec is not None and p.spec.kind == "service"]
    assert services and all(s.ports for s in services)
    line = extra_line(preset_extra(services[0]))
    assert line.startswith(f"service on port {services[0].ports[0]}"), line


def test_the_form_carries_every_spec_field() -> None:
    form = {alias for aliases in FIELDS.values() for alias in aliases if "." not in alias}
    every = {f.name for f in msgspec.structs.fields(JobSpec)}
    assert every <= form | {"name"} | set(EXTRA_FIELDS), every - form - set(EXTRA_FIELDS)
