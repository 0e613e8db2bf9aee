"""Every binding has an id and a description; ``[keys]`` in config.toml remaps them by id;
``?`` shows the keys as mapped, with their ids."""

from __future__ import annotations

import pytest
from textual.binding import Binding

from engine.api import SetMode
from engine.facade import Engine
from nunet_tui import keymap
from nunet_tui.app import NunetApp
from nunet_tui.screens.help import HelpScreen
from nunet_tui.screens.jobs import JobsScreen
from nunet_tui.screens.peers import PeersScreen
from nunet_tui.screens.provider_dashboard import ProviderDashboard
from tests.pilot import anyio_backend, on_screen, settle, text_of, until

__all__ = ["anyio_backend"]

SIZE = (100, 32)


@pytest.fixture
def provider_engine(engine_client: Engine) -> Engine:
    engine_client.call_blocking(SetMode(mode="provider"))
    return engine_client


def test_every_binding_has_an_id_and_a_description() -> None:
    scopes = keymap.binding_scopes()
    assert "nunet_tui.app.NunetApp" in scopes
    assert "nunet_tui.screens.submit.SubmitScreen" in scopes  # the F1-F9 examples
    assert "nunet_tui.widgets.recent_runs.RunList" in scopes
    problems: list[str] = []
    for scope, bindings in scopes.items():
        keys_of: dict[str, str] = {}
        for binding in bindings:
            if not isinstance(binding, Binding) or not binding.id:
                problems.append(f"{scope}: {binding!r} has no id")
                continue
            if not binding.description:
                problems.append(f"{scope}: {binding.id} has no description")
            # One id twice in a scope only for one key bound twice (one enabled at a time).
            if keys_of.setdefault(binding.id, binding.key) != binding.key:
                problems.append(f"{scope}: {binding.id} is on two different keys")
    assert not problems, "\n".join(problems)


def test_an_id_means_one_key_everywhere_and_no_default_keys_clash() -> None:
    by_id: dict[str, set[str]] = {}
    for bindings in keymap.binding_scopes().values():
        for binding in bindings:
            assert isinstance(binding, Binding) and binding.id
            by_id.setdefault(binding.id, set()).add(binding.key)
    assert {i: keys for i, keys in by_id.items() if len(keys) > 1} == {}
    assert keymap._clash({}, keymap.binding_scopes(), by_id) is None
    assert {"app.quit", "jobs.open", "job.cancel", "table.sort_next"} <= set(keymap.catalog())


def test_bad_remaps_are_one_line_each_and_keep_their_default() -> None:
    good, problems = keymap.check_remaps(
        {
            "jobs.opn": "space",  # no such id: the closest is named
            "jobs.reload": "ctrl+nokey",  # no key Textual knows
            "job.follow": "x",  # x cancels the job on the same screen
            "app.jobs": "J",
            "table.sort_next": "O",  # a swap is fine
            "table.sort_reverse": "o",
        }
    )
    assert good == {"app.jobs": "J", "table.sort_next": "O", "table.sort_reverse": "o"}
    assert len(problems) == 3 and all("\n" not in line for line in problems)
    assert 'did you mean "jobs.open"' in problems[0]
    assert '"jobs.reload" = "ctrl+nokey"' in problems[1] and "no key" in problems[1]
    assert '"job.follow"' in problems[2] and '"job.cancel"' in problems[2]


def test_key_problem_reads_keys_as_textual_does() -> None:
    for fine in ("a", "?", "space", "ctrl+s", "f5", "shift+tab", "e,enter", "question_mark"):
        assert keymap.key_problem(fine) is None, fine
    for bad in ("", "a,", "cntrl+a", "nokey"):
        assert keymap.key_problem(bad) is not None, bad


@pytest.mark.anyio
async def test_a_remapped_key_works_and_the_old_one_does_not(provider_engine: Engine) -> None:
    app = NunetApp(client=provider_engine, keys={"app.jobs": "J", "table.filter": "ctrl+f"})
    async with app.run_test(size=SIZE) as pilot:
        dashboard = await on_screen(pilot, ProviderDashboard)
        await until(pilot, lambda: app.node is not None)
        await pilot.press("j")
        await settle(pilot)
        assert app.screen is dashboard
        await pilot.press("J")
        await on_screen(pilot, JobsScreen)
        await pilot.press("escape")
        await on_screen(pilot, ProviderDashboard)
        # A screen's binding too: the peers' filter is on ctrl+f, no longer on /.
        await pilot.press("p")
        peers = await on_screen(pilot, PeersScreen)
        await settle(pilot)
        actions = {key: active.binding.action for key, active in peers.active_bindings.items()}
        assert actions.get("ctrl+f") == "filter" and actions.get("slash") != "filter"
        # ... and its help says so, with the id.
        await pilot.press("question_mark")
        help_screen = await on_screen(pilot, HelpScreen)
        here = {text: keys for keys, text in help_screen.under_keys}
        assert here["Filter the list by any text in a row"] == "^f", here
        assert "table.filter" in text_of(help_screen, "#here KeyTable")


@pytest.mark.anyio
async def test_help_shows_the_keys_as_mapped_with_their_ids(provider_engine: Engine) -> None:
    app = NunetApp(client=provider_engine, keys={"app.jobs": "J", "app.rewards": "dollar_sign"})
    async with app.run_test(size=SIZE) as pilot:
        await on_screen(pilot, ProviderDashboard)
        await pilot.press("question_mark")
        help_screen = await on_screen(pilot, HelpScreen)
        lines = dict(help_screen.everywhere_keys)
        assert lines["J"].startswith("jobs:") and "j" not in lines
        assert lines["$"].startswith("rewards:") and "$ or R" not in lines
        assert "app.jobs" in text_of(help_screen, "#everywhere KeyTable")


@pytest.mark.anyio
async def test_a_bad_keys_entry_is_one_line_and_the_app_starts(provider_engine: Engine) -> None:
    app = NunetApp(client=provider_engine, keys={"jobs.opn": "space", "app.jobs": "J"})
    async with app.run_test(size=SIZE) as pilot:
        await on_screen(pilot, ProviderDashboard)
        said = [n.message for n in app._notifications]
        assert any('"jobs.opn"' in m and 'did you mean "jobs.open"' in m for m in said), said
        assert app.keys == {"app.jobs": "J"}
        await pilot.press("J")
        await on_screen(pilot, JobsScreen)
