"""A new user's first hour, scripted (issue 22 §4): the real demo sandbox (three provider
daemons, the consumer daemon, the local ledger and the reference oracle) with the real app
attached to it, driven by keys only.

The walk: submit each example from the form (F1-F4), open the service's port through the
tunnel and fetch its page, start a notebook, cancel a paid job that runs, and check every
money figure the job view shows against ``account --json``.

Offline by design: the Gradio chatbot (F1) and the notebook pip-install Gradio or JupyterLab
first, from the package index (README, "Two commands"). Here the index is an address that
refuses connections, so both are submitted as what they are (a service with its port, a
notebook) and end with a failure that names what could not be installed; nothing downloads.

Slow by nature (about 90 s on the 2-core machine): one sandbox serves the whole walk, which is
cheaper than starting it once per step.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from textual.widgets import DataTable

from engine.config import Paths
from engine.connect import open_client
from nunet_tui.app import NunetApp
from nunet_tui.screens.confirm import ConfirmScreen
from nunet_tui.screens.job_detail import JobDetailScreen
from nunet_tui.screens.notebooks import LauncherUrlScreen, NotebooksScreen
from nunet_tui.screens.submit import SubmitScreen
from oracle_client.ntx import format_ntx
from tests.conftest import REPO, run_cli
from tests.pilot import anyio_backend, on_screen, rows, text_of, until

__all__ = ["anyio_backend"]

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(300)]

# pip gets an index that refuses at once: the two examples that install from it fail fast
# and say why, instead of downloading (or waiting out pip's retries offline).
OFFLINE_PIP = {"PIP_INDEX_URL": "http://127.0.0.1:9/simple", "PIP_RETRIES": "0"}
TERMINAL = ("completed", "failed", "cancelled", "interrupted")


def _start_demo(root: Path) -> tuple[subprocess.Popen[str], dict[str, Any]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NUNET_", "PIP_"))}
    proc = subprocess.Popen(
        [sys.executable, "-m", "nunet_tui", "demo", "--no-tui", "--root", str(root)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**env, **OFFLINE_PIP},
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line:
        proc.wait(30)
        raise AssertionError(proc.stderr.read() if proc.stderr else "the demo said nothing")
    return proc, json.loads(line)


def _account(home: Paths) -> dict[str, Any]:
    result = run_cli("account", "--json", home=home)
    assert result.returncode == 0, result.stderr
    return dict(json.loads(result.stdout))


def _consumption(home: Paths, job_id: str) -> dict[str, Any]:
    return next(c for c in _account(home)["consumption"] if c["job_id"] == job_id)


async def _submit_example(pilot: Any, key: str, name: str) -> JobDetailScreen:
    """``s``, the example's F-key, Ctrl-S: the job view of the submitted job."""
    app = pilot.app
    await pilot.press("s")
    form: SubmitScreen = await on_screen(pilot, SubmitScreen)
    await pilot.press(key)
    await until(pilot, lambda: form.check.ok and form.result is not None, 30)
    assert name in form.form.query_one("#name").value  # type: ignore[attr-defined]
    await pilot.press("ctrl+s")
    detail: JobDetailScreen = await on_screen(pilot, JobDetailScreen, 90)
    await until(pilot, lambda: detail.job is not None, 30)
    assert app.screen is detail
    return detail


async def _back_to_dashboard(pilot: Any) -> None:
    while type(pilot.app.screen).__name__ != "ConsumerDashboard":
        await pilot.press("escape")
        await pilot.pause(0.05)


def _money_matches(detail: JobDetailScreen, row: dict[str, Any]) -> None:
    """Every figure the job view shows is the account's, in the one format."""
    facts = text_of(detail, "#job-facts")
    for kind in ("locked", "metered", "paid", "refunded"):
        units = row.get(f"{kind}_units")
        if units is not None and units > 0:
            assert format_ntx(units, kind) in facts, (kind, units, facts)


async def test_first_hour_walk_through_the_demo_from_the_keyboard(tmp_path: Path) -> None:
    """Slow (about 90 s): the whole demo, once, walked through by keys (module docstring)."""
    proc, described = _start_demo(tmp_path / "demo")
    consumer = Paths.for_home(described["consumer_home"])
    client = open_client(consumer, attach=True, reconnect=True)
    try:
        app = NunetApp(client=client, examples=described)
        async with app.run_test(size=(160, 48)) as pilot:
            await until(pilot, lambda: type(app.screen).__name__ == "ConsumerDashboard", 60)
            await until(pilot, lambda: app.network.peers >= 3, 60)

            # F3: the iris decision tree completes and is paid; its figures are the account's.
            iris = await _submit_example(pilot, "f3", "iris")
            job = iris.job
            assert job is not None and job.spec.framework == "scikit-learn"
            await until(pilot, lambda: iris.job is not None and iris.job.state == "completed", 120)
            await until(
                pilot,
                lambda: iris.escrow is not None and iris.escrow.state == "paid_out",
                90,
            )
            await pilot.pause(0.5)
            _money_matches(iris, _consumption(consumer, job.job_id))
            await _back_to_dashboard(pilot)

            # F2: the HTTP service runs; its port opens through the tunnel and answers.
            service = await _submit_example(pilot, "f2", "hello service")
            svc = service.job
            assert svc is not None and svc.spec.kind == "service" and svc.spec.ports == (8000,)
            await until(pilot, lambda: service.job is not None and service.job.state == "running")
            await until(pilot, lambda: service.check_action("forward_ports", ()) is True, 60)
            await pilot.press("t")
            await until(pilot, lambda: bool(service.forwards), 60)
            url = service.forwards[0].url
            assert url.startswith("http://127.0.0.1:")
            async with httpx.AsyncClient(timeout=30) as http:
                page = await http.get(url)
            assert page.status_code == 200
            await _back_to_dashboard(pilot)

            # F1: the Gradio chatbot is a service with its port; offline, its install step
            # fails and the job says what it could not install.
            chat = await _submit_example(pilot, "f1", "gradio")
            gradio = chat.job
            assert gradio is not None and gradio.spec.kind == "service"
            assert gradio.spec.ports == (7860,) and gradio.spec.deps == ("gradio",)
            await until(pilot, lambda: chat.job is not None and chat.job.state in TERMINAL, 120)
            assert chat.job is not None and chat.job.state == "failed"
            assert "installing dependencies failed" in chat.job.reason
            await _back_to_dashboard(pilot)

            # F4: the PyTorch training starts; cancelling it while it runs pays its machine
            # time so far and refunds the rest, as the dialog says and the account agrees.
            torch_view = await _submit_example(pilot, "f4", "pytorch")
            await until(
                pilot,
                lambda: torch_view.job is not None and torch_view.job.state == "running",
                90,
            )
            await until(pilot, lambda: torch_view.escrow is not None, 30)
            await pilot.press("x")
            dialog: ConfirmScreen = await on_screen(pilot, ConfirmScreen)
            said = text_of(dialog, "#detail")
            assert "to the provider" in said and "refunded to you" in said
            await pilot.press("y")
            await until(
                pilot,
                lambda: torch_view.job is not None and torch_view.job.state == "cancelled",
                60,
            )
            cancelled = torch_view.job
            assert cancelled is not None
            await until(
                pilot,
                lambda: (
                    torch_view.escrow is not None
                    and torch_view.escrow.state in ("paid_out", "refunded")
                ),
                120,
            )
            await pilot.pause(0.5)
            row = _consumption(consumer, cancelled.job_id)
            assert row["locked_units"] == row["paid_units"] + row["refunded_units"]
            assert row["refunded_units"] > 0
            assert f"(of {format_ntx(row['locked_units'], 'locked')};" in said
            _money_matches(torch_view, row)
            await _back_to_dashboard(pilot)

            # A notebook: started from the Notebooks screen with the demo's launcher; offline,
            # its JupyterLab install fails and the list says so.
            await pilot.press("b")
            notebooks: NotebooksScreen = await on_screen(pilot, NotebooksScreen)
            await pilot.press("n")
            await on_screen(pilot, LauncherUrlScreen)
            await pilot.press("enter")
            known = {job.job_id, svc.job_id, gradio.job_id, cancelled.job_id}

            def new_notebook() -> Any:
                return next((j for i, j in notebooks.jobs.items() if i not in known), None)

            await until(pilot, lambda: new_notebook() is not None, 90)
            notebook = new_notebook()
            assert notebook.spec.kind == "service" and "jupyterlab" in notebook.spec.deps
            table = notebooks.query_one(DataTable)
            await until(pilot, lambda: any(notebook.job_id in r for r in rows(table)))
            await until(
                pilot,
                lambda: notebooks.jobs[notebook.job_id].state in TERMINAL,
                120,
            )
            assert "installing dependencies failed" in notebooks.jobs[notebook.job_id].reason

        # The account, read by the CLI: every job of the walk, each figure consistent.
        account = _account(consumer)
        by_job = {c["job_id"]: c for c in account["consumption"]}
        assert {job.job_id, svc.job_id, gradio.job_id, cancelled.job_id} <= set(by_job)
        for row in by_job.values():
            if row["state"] in TERMINAL and row.get("paid_units") is not None:
                assert row["paid_units"] + row["refunded_units"] <= row["locked_units"]
    finally:
        client.close()
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
