"""The Data screen's two questions: a path to add (``a``) and a CID to fetch (``g``).

Each dialog returns what was typed, as typed; the screen runs the engine call in a worker
(an add or a fetch may take minutes) and, when the engine refuses, opens the dialog again
with the same values and the engine's sentence as one line under the fields: nothing typed
is lost."""

from __future__ import annotations

from typing import ClassVar, NamedTuple

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Footer, Input, Label, Static

from nunet_tui.format import safe

DIALOG_CSS = """
    align: center middle;
    /* At 80x24 the get dialog with a two-line error fits in the 21 rows under the header. */
    #dialog { width: 76; max-width: 100%; height: auto; max-height: 100%; border: round $primary;
              background: $surface; padding: 1 2 0 2; }
    .data-error { height: auto; color: $text-error; }
    #buttons { height: auto; margin-top: 1; align-horizontal: right; }
    #buttons Button { margin-left: 1; }
"""


class DataFetch(NamedTuple):
    """What the get dialog asks: a CID, the folder to write it into, a peer to ask first."""

    cid: str
    folder: str
    peer: str = ""


class _DataDialog(ModalScreen[object]):
    ALLOW_MODE_SWITCH = False
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "cancel", "Cancel", id="data_dialog.cancel"),
    ]

    def __init__(self, error: str = "") -> None:
        super().__init__()
        self.error = error

    def error_line(self) -> Static:
        line = Static(safe(self.error), classes="data-error", markup=False)
        line.display = bool(self.error)
        return line

    def buttons(self, label: str) -> ComposeResult:
        with Horizontal(id="buttons"):
            yield Button("Cancel", id="cancel")
            yield Button(label, id="ok", variant="primary")

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        if event.button.id == "ok":
            self.submit()
        else:
            self.dismiss(None)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.submit()

    def action_cancel(self) -> None:
        self.dismiss(None)

    def submit(self) -> None:
        """Dismiss with what was typed (dialogs override)."""


class AddPathScreen(_DataDialog):
    """``a``: a file or folder on this machine; ``~`` and relative paths are made absolute
    by the screen (the engine reads it on this machine)."""

    DEFAULT_CSS = "AddPathScreen {" + DIALOG_CSS + "}"

    def __init__(self, path: str = "", error: str = "") -> None:
        super().__init__(error)
        self.path = path

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog"):
            yield Label("Add a file or folder (kept by its CID, pinned):")
            yield Input(self.path, placeholder="~/datasets/cifar10", id="data-path")
            yield self.error_line()
            yield from self.buttons("Add")
        yield Footer()

    def submit(self) -> None:
        path = self.query_one("#data-path", Input).value.strip()
        if path:
            self.dismiss(path)


class GetCidScreen(_DataDialog):
    """``g``: a CID (the selected row's, or typed), the folder it is written into, and
    optionally a peer id to ask first (then the DHT's providers and our connections)."""

    DEFAULT_CSS = "GetCidScreen {" + DIALOG_CSS + "}"

    def __init__(self, asked: DataFetch, error: str = "") -> None:
        super().__init__(error)
        self.asked = asked

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog"):
            yield Label("CID to fetch:")
            yield Input(self.asked.cid, placeholder="bafy…", id="data-cid")
            yield Label("Into the folder:")
            yield Input(self.asked.folder, placeholder="~/Downloads", id="data-folder")
            yield Label("Peer to ask first (optional):")
            yield Input(self.asked.peer, placeholder="12D3KooW…", id="data-peer")
            yield self.error_line()
            yield from self.buttons("Fetch")
        yield Footer()

    def on_mount(self) -> None:
        # The CID is usually the selected row's: the folder is what is left to type.
        if self.asked.cid and not self.error:
            self.query_one("#data-folder", Input).focus()

    def submit(self) -> None:
        cid, folder, peer = (
            self.query_one(f"#data-{name}", Input).value.strip()
            for name in ("cid", "folder", "peer")
        )
        if not cid:
            self.query_one("#data-cid", Input).focus()
        elif not folder:
            self.query_one("#data-folder", Input).focus()
        else:
            self.dismiss(DataFetch(cid, folder, peer))


__all__ = ["AddPathScreen", "DataFetch", "GetCidScreen"]
