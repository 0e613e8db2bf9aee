"""The resources screen's form (nunet_tui/screens/resources.py): one record's fields, each with
its problems under it (the engine's own rules, as typed), then the form's other problems.
"""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.content import Content
from textual.widgets import Input, Static

from nunet_tui.format import problem_lines
from nunet_tui.viewmodels import resources as vm


class Editor(Vertical):
    """One record's form: an input per field, its problems under it, then the others."""

    def __init__(self, kind: vm.Kind) -> None:
        super().__init__(id=f"{kind}-editor", classes="editor panel")
        self.kind: vm.Kind = kind
        self.editing: str | None = None  # the name of the record edited; None: a new one
        # What fill() put in each field, and whether a save was tried: a field shows its
        # problems once its value is not what was filled in (typed, not prefilled) or a save
        # was tried, so a new form does not open full of errors.
        self.filled: dict[str, str] = {}
        self.revealed = False

    def compose(self) -> ComposeResult:
        with VerticalScroll(classes="editor-fields"):
            for field in vm.FIELDS[self.kind]:
                with Horizontal(classes="editor-row"):
                    yield Static(field.label, classes="editor-label", markup=False)
                    yield Input(
                        placeholder=field.placeholder,
                        id=f"{self.kind}-{field.key}",
                        compact=True,
                    )
                yield Static(
                    id=f"{self.kind}-{field.key}-problems", classes="problems", markup=False
                )
            yield Static(id=f"{self.kind}-general", classes="problems", markup=False)
        yield Static(
            Content.assemble(
                ("ctrl+s", "bold $text-accent"),
                " save · ",
                ("esc", "bold $text-accent"),
                " cancel",
            ),
            classes="editor-keys",
            markup=False,
        )

    def values(self) -> dict[str, str]:
        return {
            field.key: self.query_one(f"#{self.kind}-{field.key}", Input).value
            for field in vm.FIELDS[self.kind]
        }

    def fill(self, values: dict[str, str]) -> None:
        self.filled = {field.key: values.get(field.key, "") for field in vm.FIELDS[self.kind]}
        self.revealed = False
        for field in vm.FIELDS[self.kind]:
            box = self.query_one(f"#{self.kind}-{field.key}", Input)
            box.value = values.get(field.key, "")
            box.disabled = field.key == "name" and self.editing is not None

    def touched(self) -> set[str]:
        """The fields whose value is not what was filled in."""
        values = self.values()
        return {key for key, value in values.items() if value != self.filled.get(key, "")}

    def show_problems(self, problems: vm.Problems, general: list[str]) -> None:
        touched = self.touched()
        for field in vm.FIELDS[self.kind]:
            label = self.query_one(f"#{self.kind}-{field.key}-problems", Static)
            shown = self.revealed or field.key in touched
            messages = problems.get(field.key, []) if shown else []
            label.display = bool(messages)
            label.update(problem_lines(messages))
        other = self.query_one(f"#{self.kind}-general", Static)
        general = general if (self.revealed or touched) else []
        other.display = bool(general)
        other.update(problem_lines(general))

    def first_input(self) -> Input:
        for box in self.query(Input).results(Input):
            if not box.disabled:
                return box
        return self.query_one(Input)
