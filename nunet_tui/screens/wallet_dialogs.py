"""The wallet's dialogs: the keystore passphrase, importing words, and new words shown once.

Secrets (a passphrase, a mnemonic) live only in a password ``Input`` and in the one command
that carries them to the engine; fields are emptied as soon as the engine has them, nothing
is logged or notified, and the new words are dropped with their dialog.

``call_unlocking`` runs a command that may need the keystore: when the engine says it is
locked (or new), it asks for the passphrase, unlocks, and runs the command again.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar, cast

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Grid, Horizontal, Vertical
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Button, Footer, Input, Label, Static

from engine.api import Command, UnlockKeystore, WalletImport, WalletInfo
from engine.errors import EngineError
from nunet_tui.format import safe

if TYPE_CHECKING:
    from nunet_tui.app import NunetApp

KEYSTORE_CODES = ("keystore_locked", "keystore_new")
MIN_NEW_PASSPHRASE = 8  # the engine's rule for a new keystore; checked here to answer at once

DIALOG_CSS = """
    align: center middle;
    #dialog {
        width: 72;
        max-width: 100%;
        height: auto;
        max-height: 100%;
        border: round $primary;
        background: $surface;
        padding: 1 2;
    }
    #dialog.-warning { border: round $warning; }
    #title { text-style: bold; margin-bottom: 1; }
    #detail { color: $text-muted; margin-bottom: 1; }
    #error { color: $text-error; margin-top: 1; }
    #busy { color: $text-muted; margin-top: 1; }
    Input { margin-bottom: 0; }
    #buttons { height: auto; margin-top: 1; align-horizontal: right; }
    #buttons Button { margin-left: 1; }
"""


class Cancelled(Exception):
    """The person closed the passphrase prompt: the command was not run."""


async def call_unlocking(app: NunetApp, command: Command) -> Any:
    """Run ``command``; if the keystore wants its passphrase, ask for it and run it again.

    Must run in a worker (it waits on a dialog). Raises ``Cancelled`` when the prompt is
    closed, ``EngineError`` for every other failure (a daemon gone too)."""
    for _ in range(3):  # an unlock that another client undoes meanwhile: ask again, not forever
        try:
            return await app.client.call(command)
        except EngineError as exc:
            if exc.code not in KEYSTORE_CODES:
                raise
            prompt = PassphraseScreen(new=exc.code == "keystore_new")
            if not await app.push_screen_wait(prompt):
                raise Cancelled from None
    return await app.client.call(command)


def error_text(exc: EngineError) -> str:
    return safe(exc.message)


class _Dialog(ModalScreen[Any]):
    ALLOW_MODE_SWITCH = False  # the app's screen keys stay out of a dialog

    @property
    def nunet(self) -> NunetApp:
        return cast("NunetApp", self.app)

    def show_error(self, text: str) -> None:
        error = self.query_one("#error", Static)
        error.update(Content(text))
        error.display = bool(text)

    def set_busy(self, busy: str) -> None:
        label = self.query_one("#busy", Static)
        label.update(Content(busy))
        label.display = bool(busy)
        for widget in self.query(Input):
            widget.disabled = bool(busy)
        for button in self.query(Button):
            button.disabled = bool(busy)


class PassphraseScreen(_Dialog):
    """Unlock the encrypted keystore (``UnlockKeystore``), or choose its passphrase when it is
    new (typed twice). A wrong one is said in place; dismissed with True once unlocked."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "cancel", "Cancel", id="wallet_dialog.cancel")
    ]
    DEFAULT_CSS = "PassphraseScreen {" + DIALOG_CSS + "}"

    def __init__(self, *, new: bool = False) -> None:
        super().__init__()
        self.new = new

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog"):
            if self.new:
                yield Static("Choose the keystore's passphrase", id="title", markup=False)
                yield Static(
                    "This node keeps its wallet's words in an encrypted file. Choose a "
                    f"passphrase of {MIN_NEW_PASSPHRASE} characters or more: you will type it "
                    "each time nunet-tui starts (or set NUNET_KEYRING_PASSPHRASE).",
                    id="detail",
                    markup=False,
                )
            else:
                yield Static("Unlock the keystore", id="title", markup=False)
                yield Static(
                    "The wallet's words are in an encrypted file: its passphrase opens it "
                    "for as long as nunet-tui runs.",
                    id="detail",
                    markup=False,
                )
            yield Input(placeholder="passphrase", password=True, id="passphrase")
            if self.new:
                yield Input(placeholder="the same passphrase again", password=True, id="again")
            yield Static(id="error", markup=False)
            yield Static(id="busy", markup=False)
            with Horizontal(id="buttons"):
                yield Button("Unlock (enter)", id="unlock", variant="primary")
                yield Button("Cancel (esc)", id="cancel")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#error").display = False
        self.query_one("#busy").display = False
        self.query_one("#passphrase", Input).focus()

    @on(Input.Submitted)
    def _submitted(self, event: Input.Submitted) -> None:
        event.stop()
        if self.new and event.input.id == "passphrase":
            self.query_one("#again", Input).focus()
            return
        self.unlock()

    @on(Button.Pressed)
    def _pressed(self, event: Button.Pressed) -> None:
        event.stop()
        if event.button.id == "unlock":
            self.unlock()
        else:
            self.dismiss(False)

    def action_cancel(self) -> None:
        self.dismiss(False)

    @work(exclusive=True, group="unlock")
    async def unlock(self) -> None:
        field = self.query_one("#passphrase", Input)
        passphrase = field.value
        if self.new:
            again = self.query_one("#again", Input)
            problem = ""
            if len(passphrase) < MIN_NEW_PASSPHRASE:
                problem = f"Use at least {MIN_NEW_PASSPHRASE} characters."
            elif again.value != passphrase:
                problem = "The two passphrases differ: type them again."
            if problem:
                field.value = again.value = ""
                self.show_error(problem)
                field.focus()
                return
        elif not passphrase:
            self.show_error("Type the passphrase first.")
            return
        self.show_error("")
        self.set_busy("Unlocking… (the key is stretched on purpose: a second or two)")
        try:
            await self.nunet.client.call(UnlockKeystore(passphrase=passphrase))
        except EngineError as exc:
            self.set_busy("")
            for widget in self.query(Input):
                widget.value = ""
            self.show_error(error_text(exc))
            field.focus()
            return
        for widget in self.query(Input):
            widget.value = ""
        self.dismiss(True)


class ImportScreen(_Dialog):
    """Restore a wallet from its words (``WalletImport``). The words are typed hidden; a bad
    word or checksum is said in place, and the words stay so a typo can be fixed. Dismissed
    with the wallet, or None."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "cancel", "Cancel", id="wallet_dialog.cancel")
    ]
    DEFAULT_CSS = "ImportScreen {" + DIALOG_CSS + "}"

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog"):
            yield Static("Import a wallet", id="title", markup=False)
            yield Static(
                "Type or paste the wallet's 12 to 24 words, separated by spaces. They are "
                "hidden as you type, checked here, then kept only in this node's keystore.",
                id="detail",
                markup=False,
            )
            yield Input(placeholder="the wallet's words", password=True, id="mnemonic")
            yield Static(id="error", markup=False)
            yield Static(id="busy", markup=False)
            with Horizontal(id="buttons"):
                yield Button("Import (enter)", id="import", variant="primary")
                yield Button("Cancel (esc)", id="cancel")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#error").display = False
        self.query_one("#busy").display = False
        self.query_one("#mnemonic", Input).focus()

    @on(Input.Submitted)
    def _submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.import_words()

    @on(Button.Pressed)
    def _pressed(self, event: Button.Pressed) -> None:
        event.stop()
        if event.button.id == "import":
            self.import_words()
        else:
            self.dismiss(None)

    def action_cancel(self) -> None:
        self.query_one("#mnemonic", Input).value = ""
        self.dismiss(None)

    @work(exclusive=True, group="wallet-import")
    async def import_words(self) -> None:
        field = self.query_one("#mnemonic", Input)
        if not field.value.strip():
            self.show_error("Type the words first.")
            return
        self.show_error("")
        self.set_busy("Checking the words and deriving the keys…")
        try:
            reply = await call_unlocking(self.nunet, WalletImport(mnemonic=field.value))
        except Cancelled:
            self.set_busy("")
            self.show_error("The keystore stayed locked, so the wallet was not imported.")
            return
        except EngineError as exc:
            self.set_busy("")
            self.show_error(error_text(exc))
            field.focus()
            return
        field.value = ""
        self.dismiss(cast(WalletInfo, reply.wallet))


class MnemonicScreen(_Dialog):
    """A new wallet's words, numbered, shown this once. It closes only through its button:
    the person says they wrote the words down. Nothing here can copy them."""

    # Nothing focused at first: an Enter still held from the confirmation must not close it.
    AUTO_FOCUS = ""
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "remind", "Close", show=False, id="wallet_words.close"),
    ]
    DEFAULT_CSS = (
        "MnemonicScreen {"
        + DIALOG_CSS
        + """
    #words {
        grid-size: 4;
        grid-columns: 1fr 1fr 1fr 1fr;
        grid-rows: 1;
        height: auto;
        margin-bottom: 1;
        padding: 1 1 0 1;
        background: $boost;
    }
    #words Label { height: 1; }
    #hint { color: $text-muted; }
}"""
    )

    def __init__(self, words: list[str]) -> None:
        super().__init__()
        self._words = list(words)

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog", classes="-warning"):
            yield Static(f"Your wallet's {len(self._words)} words", id="title", markup=False)
            yield Static(
                Content.assemble(
                    ("Write them down now, in this order, on paper. ", "bold $text-warning"),
                    "They are the only way to restore this wallet and its NTX; anyone who "
                    "has them can spend it. nunet-tui will not show them again.",
                ),
                id="detail",
            )
            with Grid(id="words"):
                for number, word in enumerate(self._words, start=1):
                    yield Label(
                        Content.assemble((f"{number:>2} ", "$text-muted"), (safe(word), "bold")),
                        markup=False,
                    )
            yield Static("Once they are on paper: tab, then enter.", id="hint", markup=False)
            with Horizontal(id="buttons"):
                yield Button("I have written them down", id="done", variant="warning")
        yield Footer()

    @on(Button.Pressed)
    def _pressed(self, event: Button.Pressed) -> None:
        event.stop()
        self._words.clear()
        self.dismiss(None)

    def action_remind(self) -> None:
        self.notify(
            "Write the words down first, then press the button: they are not shown again.",
            title="Wallet",
            severity="warning",
        )


__all__ = [
    "Cancelled",
    "ImportScreen",
    "MnemonicScreen",
    "PassphraseScreen",
    "call_unlocking",
    "error_text",
]
