"""``c``: chat with peers, like NuNet's ``chat start / list / join / clear``.

Left: open chat requests (marked) and conversations (ChatList). Right: the messages of the
selected conversation (ChatHistory) and a line to type in; Enter sends (ChatSend). A peer that
is offline gets the message later: the screen says so. New messages arrive live
(ChatMessageEvent). ``j`` joins the selected request, ``x`` clears every open request.
A request shows what its peer sent meanwhile (the engine holds it, unstored, until the request
is accepted): the newest line in the list, the preview on the right while it is selected, so
the user can decide whether to join.

Peer text is untrusted: it is shown literally (``[bold]`` stays brackets, ESC becomes ``\\x1b``)
because it only ever reaches the screen through ``safe()`` inside ``Content``.
"""

from __future__ import annotations

import contextlib
from typing import ClassVar

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.content import Content
from textual.widgets import Footer, Input, OptionList, Static
from textual.widgets.option_list import Option

from engine.api import (
    ChatClear,
    ChatHistory,
    ChatJoin,
    ChatList,
    ChatMessage,
    ChatMessageEvent,
    ChatOverview,
    ChatRequest,
    ChatRequestEvent,
    ChatSend,
    ChatStart,
)
from engine.errors import EngineError
from nunet_tui.events import handles
from nunet_tui.format import ELLIPSIS, chat_time, named_peer, safe
from nunet_tui.screens.base import CapabilityScreen
from nunet_tui.widgets.node_header import NodeHeader

MAX_TEXT_BYTES = 4096  # the engine's limit; checked here too so the error shows as you type
# A request's preview, as shown whatever the engine sent: a stranger's words get a few lines.
PREVIEW_LINES = 3
PREVIEW_CHARS = 200  # per line, after escaping (the engine cuts its lines at 200 as well)
SNIPPET_CHARS = 17  # the list's line of it: with its indent and quotes, one line at 80x24


class ChatScreen(CapabilityScreen):
    CSS_PATH = "chat.tcss"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding(
            "escape", "app.pop_screen", "Back", tooltip="Back to the dashboard", id="chat.back"
        ),
        Binding("j", "join", "Join", tooltip="Join the selected chat request", id="chat.join"),
        Binding(
            "x",
            "clear_requests",
            "Clear requests",
            tooltip="Drop every open request",
            id="chat.clear_requests",
        ),
        Binding("tab", "app.focus_next", "Next pane", show=False, id="chat.next_pane"),
    ]

    def __init__(self, peer_id: str | None = None) -> None:
        super().__init__()
        self.peer_id = peer_id
        self.overview = ChatOverview()
        self.messages: list[ChatMessage] = []
        self._start_with = peer_id  # opened from the peers list: send a request if new
        self.request_id: int | None = None  # the request whose preview is on the right
        self._too_long = False

    def compose(self) -> ComposeResult:
        yield NodeHeader(getattr(self.app, "mode", None))
        with Horizontal(id="chat-body"):
            with Vertical(id="conversations", classes="panel") as panel:
                panel.border_title = "Conversations"
                yield OptionList(id="conversation-list")
            with Vertical(id="talk", classes="panel") as panel:
                panel.border_title = "Messages"
                with VerticalScroll(id="message-scroll"):
                    yield Static(id="messages", markup=False)
                yield Static(id="send-note", markup=False)
                yield Input(
                    placeholder="type a message, Enter sends (4 KiB at most)", id="message-input"
                )
        yield Footer()

    def on_mount(self) -> None:
        super().on_mount()
        self._show_messages()
        if self.peer_id is not None:
            self.query_one("#message-input", Input).focus()
        else:
            self.query_one("#conversation-list", OptionList).focus()

    # --- reading -------------------------------------------------------------------------

    def reload(self) -> None:
        self.load()

    @work(exclusive=True, group="refresh")
    async def load(self) -> None:
        overview = await self.nunet.call(ChatList(), title="Chat")
        if overview is not None:
            self.overview = overview
            if self._start_with is not None:
                peer, self._start_with = self._start_with, None
                known = {c.peer_id for c in overview.conversations}
                if peer not in known:
                    self.send_request(peer)
            if self.peer_id is None and overview.conversations:
                # Open on the most recent conversation.
                latest = max(overview.conversations, key=lambda c: c.last_at)
                self.peer_id = latest.peer_id
            self._show_list()
        await self._load_history()

    async def _load_history(self) -> None:
        if self.peer_id is None:
            self.messages = []
        else:
            reply = await self.nunet.call(ChatHistory(peer_id=self.peer_id), title="Chat")
            self.messages = list(reply.messages) if reply is not None else []
        self._show_messages()

    @work(group="chat-op")
    async def send_request(self, peer_id: str) -> None:
        try:
            await self.nunet.client.call(ChatStart(peer_id=peer_id))
        except EngineError as exc:
            self.notify(
                f"No chat request sent: {safe(exc.message)}. Messages you send are kept and "
                "delivered when the peer is reachable.",
                title="Chat",
                severity="warning",
                markup=False,
            )
        else:
            self.notify(
                f"Chat request sent to {self._peer_label(peer_id)}", title="Chat", markup=False
            )

    @handles(ChatMessageEvent)
    def _chat_message(self, event: ChatMessageEvent) -> None:
        if event.message.peer_id == self.peer_id:
            self.messages.append(event.message)
            self._show_messages()
        self.load_list()

    @handles(ChatRequestEvent)
    def _chat_request(self, event: ChatRequestEvent) -> None:
        self.load_list()

    @work(exclusive=True, group="chat-list")
    async def load_list(self) -> None:
        overview = await self.nunet.call(ChatList(), title="Chat")
        if overview is not None:
            self.overview = overview
            self._show_list()

    # --- showing -------------------------------------------------------------------------

    def _peer_label(self, peer_id: str, *, full: bool = False) -> str:
        """The peer's name from its advert (when the app has seen one) with its id: short,
        or whole (``full``, in the conversation's title)."""
        return named_peer(getattr(self.app, "peer_names", None), peer_id, full_id=full)

    def _show_list(self) -> None:
        options = self.query_one("#conversation-list", OptionList)
        now = self.nunet.clock()
        entries: list[Option] = []
        for request in self.overview.requests:
            entries.append(
                Option(
                    Content.assemble(
                        ("● request ", "bold $text-warning"),
                        (f"#{request.id} ", "$text-muted"),
                        self._peer_label(request.peer_id),
                        (f"\n  {chat_time(request.at, now)} · j to join", "$text-muted"),
                        *_snippet(request.preview),
                    ),
                    id=f"request:{request.id}",
                )
            )
        peers = [c.peer_id for c in self.overview.conversations]
        if self.peer_id is not None and self.peer_id not in peers:
            peers.insert(0, self.peer_id)  # a new conversation, nothing said yet
        counts = {c.peer_id: c for c in self.overview.conversations}
        for peer in peers:
            conversation = counts.get(peer)
            detail = (
                f"{conversation.messages} message{'s' if conversation.messages != 1 else ''}"
                f" · {chat_time(conversation.last_at, now)}"
                if conversation is not None
                else "new"
            )
            entries.append(
                Option(
                    Content.assemble(
                        (self._peer_label(peer), "bold"), (f"\n  {detail}", "$text-muted")
                    ),
                    id=f"peer:{peer}",
                )
            )
        highlighted = options.highlighted_option.id if options.highlighted_option else None
        options.set_options(entries)
        if self.request_id is not None and self.request_id not in {
            r.id for r in self.overview.requests
        }:
            self.request_id = None  # joined or cleared
            self._show_messages()
        if self.request_id is not None:
            wanted: str | None = f"request:{self.request_id}"  # still reading it
        else:
            wanted = f"peer:{self.peer_id}" if self.peer_id is not None else highlighted
        if wanted is not None:
            with contextlib.suppress(Exception):
                options.highlighted = options.get_option_index(wanted)
        self.query_one("#conversations").border_subtitle = (
            f"{len(self.overview.requests)} request(s)" if self.overview.requests else ""
        )

    def _show_messages(self) -> None:
        talk = self.query_one("#talk")
        body = self.query_one("#messages", Static)
        field = self.query_one("#message-input", Input)
        request = next((r for r in self.overview.requests if r.id == self.request_id), None)
        # Writing to a peer accepts its chat: not while its request is being looked at.
        field.disabled = self.peer_id is None or request is not None
        if request is not None:
            # Content, not a str: a border title string is parsed as markup.
            talk.border_title = Content(
                f"Chat request from {self._peer_label(request.peer_id, full=True)}"
            )
            body.update(_request_preview(request))
            return
        if self.peer_id is None:
            talk.border_title = "Messages"
            body.update(
                Content.assemble(
                    ("Pick a conversation on the left", "bold"),
                    ", or open a peer from the Peers screen (",
                    ("p", "bold $text-accent"),
                    ", then Enter) to start one.",
                )
            )
            return
        talk.border_title = Content(f"Chat with {self._peer_label(self.peer_id, full=True)}")
        now = self.nunet.clock()
        if not self.messages:
            body.update(Content.styled("No messages yet. Say hello below.", "$text-muted"))
        else:
            body.update(
                Content("\n").join(
                    _message(m, now, self._peer_label(m.sender)) for m in self.messages
                )
            )
        self.query_one("#message-scroll", VerticalScroll).scroll_end(animate=False)

    # --- acting --------------------------------------------------------------------------

    def on_option_list_option_highlighted(self, event: OptionList.OptionHighlighted) -> None:
        option_id = event.option.id or ""
        if option_id.startswith("request:"):
            self.request_id = int(option_id.removeprefix("request:"))
            self._show_messages()
        elif option_id.startswith("peer:"):
            peer = option_id.removeprefix("peer:")
            if self.request_id is not None:
                self.request_id = None
                self._show_messages()
            if peer != self.peer_id:
                self.peer_id = peer
                self.messages = []
                self._show_messages()
                self.load_history()
        self.refresh_bindings()

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        option_id = event.option.id or ""
        if option_id.startswith("request:"):
            self.join(int(option_id.removeprefix("request:")))
        elif option_id.startswith("peer:"):
            self.query_one("#message-input", Input).focus()

    @work(exclusive=True, group="history")
    async def load_history(self) -> None:
        await self._load_history()

    def on_input_changed(self, event: Input.Changed) -> None:
        size = len(event.value.encode("utf-8"))
        note = self.query_one("#send-note", Static)
        if size > MAX_TEXT_BYTES:
            self._too_long = True
            note.update(
                Content.styled(
                    f"Too long: {size:,} bytes; a message holds {MAX_TEXT_BYTES:,} bytes (4 KiB).",
                    "$text-error",
                )
            )
        elif self._too_long:
            self._too_long = False
            note.update("")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        text = event.value
        if not text.strip() or self.peer_id is None:
            return
        self.send(self.peer_id, text)

    @work(group="chat-op")
    async def send(self, peer_id: str, text: str) -> None:
        note = self.query_one("#send-note", Static)
        field = self.query_one("#message-input", Input)
        try:
            sent: ChatMessage = await self.nunet.client.call(ChatSend(peer_id=peer_id, text=text))
        except EngineError as exc:
            note.update(Content.styled(f"Not sent: {safe(exc.message)}", "$text-error"))
            return
        if field.value == text:
            field.value = ""
        if sent.status == "queued":
            note.update(
                Content.styled(
                    "queued — the peer is offline; it will be delivered when it is back",
                    "$text-warning",
                )
            )
        else:
            note.update("")
        if peer_id == self.peer_id:
            self.messages.append(sent)
            self._show_messages()
        self.load_list()

    def action_join(self) -> None:
        options = self.query_one("#conversation-list", OptionList)
        option = options.highlighted_option
        request_id: int | None = None
        if option is not None and (option.id or "").startswith("request:"):
            request_id = int((option.id or "").removeprefix("request:"))
        elif self.overview.requests:
            request_id = self.overview.requests[0].id
        if request_id is not None:
            self.join(request_id)

    @work(group="chat-op")
    async def join(self, request_id: int) -> None:
        request = next((r for r in self.overview.requests if r.id == request_id), None)
        done = await self.nunet.call(ChatJoin(request_id=request_id), title="Chat")
        if done is not None:
            self.notify(safe(done.message), title="Chat", markup=False)
            if request is not None:
                self.peer_id = request.peer_id
            await self._reload_all()

    @work(group="chat-op")
    async def action_clear_requests(self) -> None:
        done = await self.nunet.call(ChatClear(), title="Chat")
        if done is not None:
            self.notify(safe(done.message), title="Chat", markup=False)
            await self._reload_all()

    async def _reload_all(self) -> None:
        overview = await self.nunet.call(ChatList(), title="Chat")
        if overview is not None:
            self.overview = overview
            self._show_list()
        await self._load_history()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in ("join", "clear_requests"):
            return bool(self.overview.requests)
        return True


def _snippet(preview: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    """The list's line of a request: its newest message, literally, on one line."""
    if not preview:
        return ()
    newest = safe(preview[-1])  # one line: a newline shows as \x0a
    if len(newest) > SNIPPET_CHARS:
        newest = newest[: SNIPPET_CHARS - 1] + ELLIPSIS
    return (("\n  “", "$text-muted"), (newest, "italic"), ("”", "$text-muted"))


def _request_preview(request: ChatRequest) -> Content:
    """A request on the right: who, and what it sent meanwhile (a stranger's words: each
    line literal, at most PREVIEW_CHARS, the newest PREVIEW_LINES), and what the keys do."""
    lines = [safe(text) for text in request.preview[-PREVIEW_LINES:]]
    parts: list[Content | str | tuple[str, str]] = [
        ("Not accepted yet. ", "bold"),
        "Nothing it sends is stored until you join.\n\n",
    ]
    if lines:
        parts.append(("What it sent meanwhile, newest last:\n", "$text-muted"))
        for line in lines:
            if len(line) > PREVIEW_CHARS:
                line = line[: PREVIEW_CHARS - 1] + ELLIPSIS
            # Content never parses markup; safe() already showed every control character.
            parts.extend([("│ ", "$text-warning"), Content(line), "\n"])
        parts.append("\n")
    else:
        parts.append(("It has sent no message yet.\n\n", "$text-muted"))
    parts.extend(
        [
            ("j", "bold $text-accent"),
            " joins (what it sent is kept) · ",
            ("x", "bold $text-accent"),
            " clears every request",
        ]
    )
    return Content.assemble(*parts)


def _message(message: ChatMessage, now: float, sender: str) -> Content:
    """One message; ``sender``: the peer's label (name and short id), unless it is ours."""
    mine = message.direction == "out"
    who = ("you", "bold $text-accent") if mine else (sender, "bold")
    state = ""
    if mine and message.status == "queued":
        state = " · queued"
    return Content.assemble(
        who,
        (f"  {chat_time(message.at, now)}{state}", "$text-muted"),
        "\n",
        # The peer's words, literally: safe() shows control codes, Content never parses markup.
        Content(safe(message.text)),
        "\n",
    )


__all__ = ["ChatScreen"]
