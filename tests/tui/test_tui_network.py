"""Pilot tests of the peers, chat and network-status screens against two real engines.

Both engines run in this process with the real libp2p network on 127.0.0.1: ``alice`` (the
TUI's engine, consumer mode) is the bootstrap peer, ``bob`` (a provider, onboarded, heartbeat
every second) joins her. Host probes read the fixed host of tests/doubles/host.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from textual.content import Content
from textual.widgets import DataTable, Input, OptionList, Static

from engine.api import (
    ChatHistory,
    ChatSend,
    ChatStart,
    GetPeerSelf,
    ListPeers,
    OnboardRequest,
    SetMode,
)
from engine.facade import Engine
from engine.identity import short_peer_id
from nunet_tui.app import NunetApp
from nunet_tui.screens.chat import ChatScreen
from nunet_tui.screens.consumer_dashboard import ConsumerDashboard
from nunet_tui.screens.network import NetworkScreen
from nunet_tui.screens.peers import PeersScreen
from nunet_tui.widgets.key_table import KeyTable
from tests.conftest import MACHINE_TOML, TEST_ADDRESS, make_home
from tests.daemon_harness import wait_for
from tests.doubles.host import fixed_host
from tests.pilot import anyio_backend, on_screen, until

__all__ = ["anyio_backend"]

SIZE = (140, 36)
LITERAL = "[bold red]x[/] and \x1b[2J"
# Bob's display name (issue 22): markup that must stay literal, always with his short id.
BOB_NAME = "[b]bob[/b]"
LONG_LINES = "line one\nline two \u202e " + "y" * 300  # past the preview's 200 characters
pytestmark = pytest.mark.anyio


def _network_toml(bootstrap: str | None = None, name: str = "") -> str:
    toml = MACHINE_TOML + "heartbeat_interval_s = 1\n"
    if bootstrap:
        toml += f'bootstrap = ["{bootstrap}"]\n'
    if name:
        toml += f'[provider]\ndisplay_name = "{name}"\n'
    return toml


def _start(root: Path, seed: int, bootstrap: str | None = None, name: str = "") -> Engine:
    toml = _network_toml(bootstrap, name)
    home = make_home(root / "home", seed=bytes([seed]) * 32, machine_toml=toml)
    engine = Engine(home, probes=fixed_host(root / "host").probes).start()
    wait_for(lambda: engine.call_blocking(GetPeerSelf()).addrs, f"{root} never listened", 30)
    return engine


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Engine, Engine]]:
    """(alice, bob): two real engines on 127.0.0.1 that see each other."""
    root = tmp_path_factory.mktemp("pair")
    alice = _start(root / "alice", 31)
    bob: Engine | None = None
    try:
        alice.call_blocking(SetMode(mode="consumer"))
        boot = alice.call_blocking(GetPeerSelf()).addrs[0]
        bob = _start(root / "bob", 32, bootstrap=boot, name=BOB_NAME)
        bob.call_blocking(SetMode(mode="provider"))
        bob.call_blocking(OnboardRequest(memory_mb=6000, cpu_mhz=2000, address=TEST_ADDRESS))
        bob_id = bob.call_blocking(GetPeerSelf()).peer_id

        def bob_beats() -> bool:
            peers = {p.peer_id: p for p in alice.call_blocking(ListPeers()).peers}
            found = peers.get(bob_id)
            return bool(found and found.resources and found.last_heartbeat)

        wait_for(bob_beats, "alice never heard bob's heartbeat", 30)
        yield alice, bob
    finally:
        if bob is not None:
            bob.close()
        alice.close()


def peer_id(engine: Engine) -> str:
    return str(engine.call_blocking(GetPeerSelf()).peer_id)


def table_text(table: DataTable[Any]) -> str:
    return "\n".join(
        " ".join(str(cell) for cell in table.get_row_at(row)) for row in range(table.row_count)
    )


def messages_text(screen: ChatScreen) -> str:
    return str(screen.query_one("#messages", Static).render())


async def test_peers_lists_bob_filters_and_opens_a_chat(pair: tuple[Engine, Engine]) -> None:
    alice, bob = pair
    bob_id = peer_id(bob)
    app = NunetApp(client=alice)
    async with app.run_test(size=SIZE) as pilot:
        await on_screen(pilot, ConsumerDashboard)
        await until(pilot, lambda: app.network.state == "online")
        await pilot.press("p")
        screen = await on_screen(pilot, PeersScreen)
        table = screen.query_one("#peers-table", DataTable)
        await until(pilot, lambda: bob_id in table.rows)
        row = table_text(table)
        assert bob_id[:8] in row and "direct" in row and "127.0.0.1" in row
        assert "6,000" in row  # bob's onboarded RAM, from his advert
        assert "ago" in row or "just now" in row
        assert "online" in str(app.screen.query_one("#network", Static).render())

        await pilot.press("slash")
        assert isinstance(app.focused, Input)
        await pilot.press(*bob_id[-6:])
        await until(pilot, lambda: table.row_count == 1)
        await pilot.press(*"zzz")
        await until(pilot, lambda: not table.display)
        assert "No peer matches" in str(screen.query_one("#peers-note", Static).render())
        await pilot.press("escape")  # clears the filter, stays
        await until(pilot, lambda: table.display and bob_id in table.rows)
        assert isinstance(app.screen, PeersScreen)

        await pilot.press("d")  # the DHT lookup keeps bob in the list
        await until(pilot, lambda: bob_id in table.rows)

        table.move_cursor(row=table.get_row_index(bob_id))
        table.focus()
        await pilot.press("enter")
        chat = await on_screen(pilot, ChatScreen)
        assert chat.peer_id == bob_id


async def test_peers_show_bobs_name_with_his_short_id(pair: tuple[Engine, Engine]) -> None:
    alice, bob = pair
    bob_id = peer_id(bob)
    label = f"{BOB_NAME} · {short_peer_id(bob_id)}"
    app = NunetApp(client=alice)
    async with app.run_test(size=(80, 24)) as pilot:
        await on_screen(pilot, ConsumerDashboard)
        await pilot.press("p")
        screen = await on_screen(pilot, PeersScreen)
        table = screen.query_one("#peers-table", DataTable)
        await until(pilot, lambda: bob_id in table.rows)
        cell = table.get_row(bob_id)[0]
        assert cell.plain == label  # the markup literal, never a style; the id always there
        await pilot.press("slash", *"bob")  # the name is searchable too
        await until(pilot, lambda: table.row_count == 1 and bob_id in table.rows)
        await pilot.press("escape")
        table.move_cursor(row=table.get_row_index(bob_id))
        table.focus()
        await pilot.press("enter")
        chat = await on_screen(pilot, ChatScreen)
        assert app.peer_names.get(bob_id) == BOB_NAME

        # The getter gives the title as markup: the name's brackets come back escaped.
        def title() -> str:
            return Content.from_markup(chat.query_one("#talk").border_title or "").plain

        await until(pilot, lambda: title().startswith("Chat with"))
        assert title() == f"Chat with {BOB_NAME} · {bob_id}"


async def test_chat_round_trip_shows_peer_text_literally(pair: tuple[Engine, Engine]) -> None:
    alice, bob = pair
    alice_id, bob_id = peer_id(alice), peer_id(bob)
    app = NunetApp(client=alice)
    async with app.run_test(size=SIZE) as pilot:
        await on_screen(pilot, ConsumerDashboard)
        await until(pilot, lambda: app.node is not None)
        app.open_screen("chat", peer_id=bob_id)
        chat = await on_screen(pilot, ChatScreen)
        await until(pilot, lambda: isinstance(app.focused, Input))
        await pilot.press(*"hello bob", "enter")
        wait_for(
            lambda: any(
                m.text == "hello bob"
                for m in bob.call_blocking(ChatHistory(peer_id=alice_id)).messages
            ),
            "bob never got the message",
            30,
        )
        await until(pilot, lambda: "hello bob" in messages_text(chat))
        assert chat.query_one("#message-input", Input).value == ""

        # Bob answers with markup and a terminal escape: both must show as plain text.
        bob.call_blocking(ChatSend(peer_id=alice_id, text=LITERAL))
        await until(pilot, lambda: "[bold red]x[/]" in messages_text(chat))
        shown = messages_text(chat)
        assert "\\x1b[2J" in shown
        assert "\x1b" not in shown
        # The conversation list counts both messages.
        options = chat.query_one("#conversation-list", OptionList)
        await until(pilot, lambda: options.option_count >= 1)


async def test_a_chat_request_is_announced_and_joined(pair: tuple[Engine, Engine]) -> None:
    alice, bob = pair
    alice_id = peer_id(alice)
    app = NunetApp(client=alice)
    async with app.run_test(size=SIZE) as pilot:
        await on_screen(pilot, ConsumerDashboard)
        await until(pilot, lambda: app.network.state == "online")
        bob.call_blocking(ChatStart(peer_id=alice_id))
        await until(pilot, lambda: any("wants to chat" in n.message for n in app._notifications))
        await pilot.press("c")
        chat = await on_screen(pilot, ChatScreen)
        await until(pilot, lambda: bool(chat.overview.requests))
        options = chat.query_one("#conversation-list", OptionList)
        options.focus()
        await pilot.press("j")
        await until(pilot, lambda: not chat.overview.requests)
        assert chat.peer_id == peer_id(bob)


async def test_a_chat_request_shows_what_the_stranger_sent_literally(
    pair: tuple[Engine, Engine], tmp_path: Path
) -> None:
    """A stranger's messages wait unstored until its request is accepted; the request shows
    them, so the user can decide: markup and control characters literally, each line cut,
    in a window of 80x24."""
    alice, _bob = pair
    alice_id = peer_id(alice)
    carol = _start(tmp_path / "carol", 33, bootstrap=alice.call_blocking(GetPeerSelf()).addrs[0])
    try:
        carol_id = peer_id(carol)
        carol.call_blocking(ChatStart(peer_id=alice_id))
        carol.call_blocking(ChatSend(peer_id=alice_id, text=LITERAL))
        carol.call_blocking(ChatSend(peer_id=alice_id, text=LONG_LINES))
        app = NunetApp(client=alice)
        async with app.run_test(size=(80, 24)) as pilot:
            await on_screen(pilot, ConsumerDashboard)
            await until(pilot, lambda: app.node is not None)
            await pilot.press("c")
            chat = await on_screen(pilot, ChatScreen)

            def carols() -> Any:
                found = [r for r in chat.overview.requests if r.peer_id == carol_id]
                return found[0] if found and len(found[0].preview) == 2 else None

            await until(pilot, lambda: carols() is not None)
            request = carols()
            options = chat.query_one("#conversation-list", OptionList)
            options.focus()
            options.highlighted = options.get_option_index(f"request:{request.id}")
            await until(pilot, lambda: chat.request_id == request.id)
            await pilot.pause()

            # The list: the newest message, on one short line.
            listed = str(options.get_option(f"request:{request.id}").prompt)
            assert "“line one\\x0aline…”" in listed  # escaped, cut
            # One line of the list, cut to its width.
            lines = [options.render_line(y).text for y in range(options.size.height)]
            assert [line.strip()[:9] for line in lines if "line one" in line] == ["“line one"]
            assert not any("yyy" in line for line in lines)
            # The right pane: both messages, literally, each line bounded.
            shown = messages_text(chat)
            assert "[bold red]x[/] and \\x1b[2J" in shown
            assert "\\u202e" in shown and "…" in shown
            assert "\x1b" not in shown and "\u202e" not in shown
            assert "y" * 150 in shown and "y" * 200 not in shown
            assert "Chat request from" in str(chat.query_one("#talk").border_title)
            # Writing to the peer would accept its chat: not while its request is looked at.
            assert chat.query_one("#message-input", Input).disabled
            # 80x24: the preview has room to be read.
            region = chat.query_one("#messages", Static).region
            assert region.width >= 30 and region.height >= 8, region
            # Joining keeps what it sent: the conversation shows it.
            await pilot.press("j")
            await until(
                pilot, lambda: not any(r.peer_id == carol_id for r in chat.overview.requests)
            )
            await until(pilot, lambda: "[bold red]x[/]" in messages_text(chat))
            assert not chat.query_one("#message-input", Input).disabled
    finally:
        carol.close()


async def test_network_status_counts_bob(pair: tuple[Engine, Engine]) -> None:
    alice, bob = pair
    bob_id = peer_id(bob)
    app = NunetApp(client=alice)
    async with app.run_test(size=SIZE) as pilot:
        await on_screen(pilot, ConsumerDashboard)
        await until(pilot, lambda: app.node is not None)
        await pilot.press("n")
        screen = await on_screen(pilot, NetworkScreen)
        await until(pilot, lambda: screen.status is not None and screen.status.online)
        await until(
            pilot, lambda: screen.status is not None and screen.status.totals.providers >= 1
        )
        facts = screen.query_one("#channel-facts", KeyTable).plain_text()
        assert "online" in facts and "1 onboarded" in facts
        table = screen.query_one("#beats-table", DataTable)
        await until(pilot, lambda: bob_id in table.rows)
        assert "6,000" in table_text(table)
        await pilot.press("escape")
        await on_screen(pilot, ConsumerDashboard)


async def test_offline_peer_gets_a_queued_message_and_limits_are_explained(
    tmp_path: Path,
) -> None:
    """Without the network: peers explain why, chat keeps messages for later, 4 KiB holds."""
    host = fixed_host(tmp_path / "host")
    engine = Engine(make_home(tmp_path / "home"), network=False, probes=host.probes).start()
    other = "12D3KooWD3eckifWpRn9wQpMG9R9hX3sD158z7EqHWmweQc7XWbW"
    try:
        engine.call_blocking(SetMode(mode="consumer"))
        app = NunetApp(client=engine)
        async with app.run_test(size=SIZE) as pilot:
            await on_screen(pilot, ConsumerDashboard)
            await until(pilot, lambda: app.network.state == "off")
            await pilot.press("p")
            peers = await on_screen(pilot, PeersScreen)
            note = peers.query_one("#peers-note", Static)
            await until(pilot, lambda: "without the network" in str(note.render()))

            app.open_screen("chat", peer_id=other)
            chat = await on_screen(pilot, ChatScreen)
            await until(pilot, lambda: isinstance(app.focused, Input))
            await pilot.press(*"see you later", "enter")
            send_note = chat.query_one("#send-note", Static)
            await until(pilot, lambda: "queued" in str(send_note.render()))
            assert "delivered when it is back" in str(send_note.render())
            await until(pilot, lambda: "see you later" in messages_text(chat))

            field = chat.query_one("#message-input", Input)
            field.value = "x" * 5000
            await until(pilot, lambda: "Too long" in str(send_note.render()))
            await pilot.press("enter")
            await until(pilot, lambda: "Not sent" in str(send_note.render()))
            assert "see you later" in messages_text(chat)
    finally:
        engine.close()
