"""A yes/no question before anything that changes what this machine offers."""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Button, Footer, Static


class ConfirmScreen(ModalScreen[bool]):
    """Dismissed with True (confirmed) or False; ``danger`` focuses Cancel first."""

    ALLOW_MODE_SWITCH = False
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("y", "answer(True)", "Yes", id="confirm.yes"),
        Binding("n", "answer(False)", "No", id="confirm.no"),
        Binding("escape", "answer(False)", "Cancel", id="confirm.cancel"),
        Binding(
            "left,right",
            "app.focus_previous",
            "Other button",
            show=False,
            id="confirm.other_button",
        ),
    ]
    DEFAULT_CSS = """
    ConfirmScreen {
        align: center middle;
        #dialog {
            width: 64;
            max-width: 100%;
            height: auto;
            border: round $primary;
            background: $surface;
            padding: 1 2;
        }
        #dialog.-danger { border: round $error; }
        #question { text-style: bold; margin-bottom: 1; }
        #buttons { height: auto; margin-top: 1; align-horizontal: right; }
        #buttons Button { margin-left: 1; }
    }
    """

    def __init__(
        self,
        question: str,
        detail: Content | str = "",
        *,
        confirm_label: str = "Yes",
        decline_label: str | None = None,
        danger: bool = False,
    ) -> None:
        super().__init__()
        self.question = question
        self.detail = detail
        self.confirm_label = confirm_label
        # "Cancel job (y)" beside "Cancel (n)" reads as two ways to cancel: the way back is
        # then named for what it does.
        if decline_label is None:
            decline_label = "Back" if confirm_label.lower().startswith("cancel") else "Cancel"
        self.decline_label = decline_label
        self.danger = danger

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog", classes="-danger" if self.danger else ""):
            yield Static(self.question, id="question", markup=False)
            yield Static(
                self.detail if isinstance(self.detail, Content) else Content(self.detail),
                id="detail",
            )
            with Horizontal(id="buttons"):
                yield Button(
                    f"{self.confirm_label} (y)",
                    id="confirm",
                    variant="error" if self.danger else "primary",
                )
                yield Button(f"{self.decline_label} (n)", id="cancel")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#cancel" if self.danger else "#confirm", Button).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        self.dismiss(event.button.id == "confirm")

    def action_answer(self, answer: bool) -> None:
        self.dismiss(answer)
