"""At 80x24 every main screen's footer shows the keys a person needs most there: back, the
screen's main actions and ``?`` (whose help lists the rest); issue 22 said they were cut."""

from __future__ import annotations

from typing import Any, Literal

import pytest
from textual.widgets import Footer
from textual.widgets._footer import FooterKey

from engine.api import SetMode
from engine.facade import Engine
from nunet_tui.app import NunetApp
from tests.pilot import anyio_backend, until

__all__ = ["anyio_backend"]

# Per screen, the keys that must be readable (Binding.key), in each mode that has the screen.
# A key whose action is off now (claim without an escrow) is not drawn at all: not listed.
PRIMARY: dict[str, tuple[str, ...]] = {
    "peers": ("escape", "d", "r", "question_mark", "slash", "o"),
    "chat": ("escape", "question_mark"),
    "network": ("escape", "r", "question_mark", "slash", "o"),
    "jobs": ("escape", "r", "question_mark", "slash", "o"),
    "wallet": ("escape", "r", "n", "i", "question_mark"),
    "rewards": ("escape", "v", "r", "question_mark"),
    "gpus": ("escape", "d", "i", "question_mark", "slash", "o"),
    "resources": ("escape", "n", "e", "d", "question_mark"),
    "notebooks": ("escape", "n", "question_mark", "slash"),
    "account": ("escape", "r", "question_mark", "slash", "o"),
    "data": ("escape", "a", "g", "p", "u", "d", "question_mark"),
    "submit": ("ctrl+s", "escape"),  # a text field has the focus: ? would be typed
}
SCREENS = {
    "provider": (
        "peers",
        "chat",
        "network",
        "jobs",
        "wallet",
        "rewards",
        "gpus",
        "resources",
        "data",
    ),
    "consumer": (
        "peers",
        "chat",
        "network",
        "jobs",
        "wallet",
        "rewards",
        "notebooks",
        "account",
        "data",
    ),
}
# A dashboard's footer: where each mode goes most (submit, jobs, peers, GPUs) and the help;
# Mode and Quit come last and may be cut (the help lists them).
DASHBOARD = {
    "consumer": ("s", "j", "p", "n", "c", "question_mark"),
    "provider": ("j", "p", "g", "n", "c", "question_mark"),
}


def readable_keys(app: Any) -> set[str]:
    """The footer's keys drawn in full: on the screen and not under the palette's key."""
    footer = app.screen.query_one(Footer)
    keys = list(footer.query(FooterKey))
    palette = [k for k in keys if k.has_class("-command-palette")]
    right = palette[0].region.x if palette else app.size.width
    return {
        k.key
        for k in keys
        if not k.has_class("-command-palette") and k.region.width and k.region.right <= right
    }


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ["provider", "consumer"])
async def test_every_main_screen_shows_its_main_keys_and_help_at_80x24(
    engine_client: Engine, mode: Literal["provider", "consumer"]
) -> None:
    engine_client.call_blocking(SetMode(mode=mode))
    app = NunetApp(client=engine_client)
    async with app.run_test(size=(80, 24)) as pilot:
        await until(pilot, lambda: type(app.screen).__name__.endswith("Dashboard"))
        dashboard = app.screen
        await until(pilot, lambda: set(DASHBOARD[mode]) <= readable_keys(app))
        names = (*SCREENS[mode], "submit") if mode == "consumer" else SCREENS[mode]
        for name in names:
            app.open_screen(name)
            await until(pilot, lambda: app.screen is not dashboard)
            wanted = set(PRIMARY[name])

            def shown(wanted: set[str] = wanted) -> bool:
                return wanted <= readable_keys(app)

            try:
                await until(pilot, shown, timeout=10)
            except AssertionError:
                missing = wanted - readable_keys(app)
                raise AssertionError(f"{name} ({mode}): {sorted(missing)} not readable") from None
            app.pop_screen()
            await until(pilot, lambda: app.screen is dashboard)


@pytest.mark.anyio
async def test_the_keys_a_full_footer_cuts_are_in_the_help(engine_client: Engine) -> None:
    """The wallet's footer ends at ? at 80 columns: / and o are cut, and the help lists them
    (with O, which no footer shows)."""
    from nunet_tui.widgets.key_table import KeyTable

    engine_client.call_blocking(SetMode(mode="consumer"))
    app = NunetApp(client=engine_client)
    async with app.run_test(size=(80, 24)) as pilot:
        await until(pilot, lambda: type(app.screen).__name__.endswith("Dashboard"))
        app.open_screen("wallet")
        await until(pilot, lambda: type(app.screen).__name__ == "WalletScreen")
        await until(pilot, lambda: "question_mark" in readable_keys(app))
        assert "slash" not in readable_keys(app)
        await pilot.press("question_mark")
        await until(pilot, lambda: type(app.screen).__name__ == "HelpScreen")
        here = app.screen.query_one("#here KeyTable", KeyTable).rows
        keys = {str(key) for key, _ in here}
        assert {"/", "o", "O", "$"} <= keys, keys
