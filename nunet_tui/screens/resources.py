"""``e`` (provider): what this machine sells, in four tabs.

System: what detection found and what is onboarded (the onboarded capacity bounds every
spec). Custom: names for detected GPUs regrouped, or accelerators detection does not know.
Specs: what a consumer picks, each priced in NTX per machine-hour (NuNet's Low/Moderate/High
tiers while none is defined). Pools: who may use a pool's specs (peer ids and groups), and the
groups.

``n`` new, ``e``/Enter edit, ``d`` delete (asks first), ``ctrl+s`` save, Esc cancel. Every
field is checked as it is typed by the engine's own rules (viewmodels/resources.py on
engine/domain/specs.py); the engine checks again when it saves, and its problems land
under the same fields. On a narrow terminal the form takes the table's place while it is
open; on a wide one it stands beside the table.
"""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.content import Content
from textual.widgets import DataTable, Footer, Input, Static, TabbedContent, TabPane, Tabs

from engine.api import DEFAULT_POOL, ResourceList, Resources, ResourcesChanged
from engine.errors import EngineError
from nunet_tui.events import handles
from nunet_tui.format import mb, plural, safe, table_cell, tilde
from nunet_tui.screens.base import TABLE_BINDINGS, CapabilityScreen
from nunet_tui.screens.confirm import ConfirmScreen
from nunet_tui.viewmodels import resources as vm
from nunet_tui.widgets.key_table import KeyTable
from nunet_tui.widgets.node_header import NodeHeader
from nunet_tui.widgets.resource_editor import Editor
from nunet_tui.widgets.resource_rows import gpu_name, row_cells, sort_value, table_note
from nunet_tui.widgets.sortable_table import Row, SortableTables, TableSort
from nunet_tui.widgets.table_rows import selected_key

WIDE_FROM = 120  # columns: from here the form stands beside its table
EDITOR_W = 66  # the form's width beside the table
TABLES: dict[vm.Kind, str] = {
    "custom": "custom-table",
    "spec": "spec-table",
    "pool": "pool-table",
    "group": "group-table",
}
COLUMNS: dict[vm.Kind, tuple[tuple[str, str], ...]] = {
    "spec": (
        ("name", "Spec"),
        ("cpu", "CPU"),
        ("ram", "RAM"),
        ("disk", "Disk"),
        ("gpus", "GPUs"),
        ("price", "Price"),
        ("min", "Min charge"),
        ("pool", "Pool"),
    ),
    "custom": (
        ("name", "Name"),
        ("kind", "Kind"),
        ("count", "Count"),
        ("from", "From GPUs"),
        ("vram", "VRAM"),
        ("model", "Model"),
    ),
    "pool": (("name", "Pool"), ("members", "Members"), ("groups", "Groups")),
    "group": (("name", "Group"), ("members", "Members")),
}
NARROW_HIDDEN: dict[vm.Kind, tuple[str, ...]] = {
    "spec": ("disk", "min"),
    "custom": ("model",),
    "pool": (),
    "group": (),
}


class ResourcesScreen(SortableTables, CapabilityScreen):
    CSS_PATH = "resources.tcss"
    TITLE_TEXT = "resources"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding(
            "escape",
            "back",
            "Back",
            tooltip="Close the form, else back to the dashboard",
            id="resources.back",
        ),
        Binding("n", "new", "New", tooltip="A new record in this tab", id="resources.new"),
        Binding(
            "N",
            "new_group",
            "New group",
            tooltip="A new group of peer ids (pools tab)",
            id="resources.new_group",
        ),
        Binding(
            "e,enter",
            "edit",
            "Edit",
            key_display="e",
            tooltip="Edit the selected record",
            id="resources.edit",
        ),
        Binding(
            "d",
            "delete",
            "Delete",
            tooltip="Delete the selected record (asks first)",
            id="resources.delete",
        ),
        Binding(
            "ctrl+s",
            "save",
            "Save",
            tooltip="Save the form (the engine checks it again)",
            id="resources.save",
        ),
        Binding(
            "r", "reload", "Refresh", tooltip="Read the resources again", id="resources.reload"
        ),
        Binding("1", "tab('system')", "System", show=False, id="resources.tab_system"),
        Binding("2", "tab('custom')", "Custom", show=False, id="resources.tab_custom"),
        Binding("3", "tab('specs')", "Specs", show=False, id="resources.tab_specs"),
        Binding("4", "tab('pools')", "Pools", show=False, id="resources.tab_pools"),
        *TABLE_BINDINGS,
    ]

    def __init__(self) -> None:
        super().__init__()
        self.listing: Resources | None = None
        self.problem: str | None = None
        self.loaded = False
        self.open_kind: vm.Kind | None = None  # the form shown, if any
        self.saving = False
        sorts: dict[vm.Kind, tuple[tuple[str, str], ...]] = {"spec": (("price", "price"),)}
        self.sorters = {
            table_id: TableSort(sorts.get(kind, ()), sort_value)
            for kind, table_id in TABLES.items()
        }

    def compose(self) -> ComposeResult:
        yield NodeHeader(getattr(self.app, "mode", None))
        yield self.filter_box()
        with TabbedContent(id="tabs", initial="specs"):
            with (
                TabPane("1 System", id="system"),
                VerticalScroll(classes="panel", id="system-panel"),
            ):
                yield KeyTable(id="system-facts")
            with TabPane("2 Custom", id="custom"), Horizontal(classes="tab-body"):
                with Vertical(classes="list panel", id="custom-list"):
                    yield Static(id="custom-note", classes="note", markup=False)
                    yield DataTable(id="custom-table", cursor_type="row", zebra_stripes=True)
                yield Editor("custom")
            with TabPane("3 Specs", id="specs"), Horizontal(classes="tab-body"):
                with Vertical(classes="list panel", id="spec-list"):
                    yield Static(id="spec-note", classes="note", markup=False)
                    yield DataTable(id="spec-table", cursor_type="row", zebra_stripes=True)
                yield Editor("spec")
            with TabPane("4 Pools", id="pools"), Horizontal(classes="tab-body"):
                with Vertical(classes="list", id="pool-lists"):
                    with Vertical(classes="panel", id="pool-list"):
                        yield Static(id="pool-note", classes="note", markup=False)
                        yield DataTable(id="pool-table", cursor_type="row", zebra_stripes=True)
                    with Vertical(classes="panel", id="group-list"):
                        yield Static(id="group-note", classes="note", markup=False)
                        yield DataTable(id="group-table", cursor_type="row", zebra_stripes=True)
                yield Editor("pool")
                yield Editor("group")
        yield Static(id="status", markup=False)
        yield Footer()

    def on_mount(self) -> None:
        super().on_mount()
        for editor in self.query(Editor).results(Editor):
            editor.display = False
        self.query_one("#status").display = False
        self._build_columns()
        self.query_one("#spec-list", Vertical).border_title = "Specs"
        self.query_one("#custom-list", Vertical).border_title = "Custom resources"
        self.query_one("#pool-list", Vertical).border_title = "Pools"
        self.query_one("#group-list", Vertical).border_title = "Groups"
        self.query_one("#system-panel").border_title = "System resources"
        self.show()
        self.call_after_refresh(self._focus_table)

    # --- reading -------------------------------------------------------------------------

    def reload(self) -> None:
        if self.open_kind is None:
            self.load()

    @work(exclusive=True, group="refresh")
    async def load(self) -> None:
        try:
            self.listing = await self.nunet.client.call(ResourceList())
            self.problem = None
        except EngineError as exc:
            self.problem = safe(exc.message)
        self.loaded = True
        self.show()

    @handles(ResourcesChanged)
    def _resources_changed(self, event: ResourcesChanged) -> None:
        """Another door (the CLI, a second TUI) changed what this machine sells: show it; an
        open form keeps what is typed and is checked again against the new listing."""
        self.listing = event.resources
        self.show()
        self.validate_form()

    # --- showing -------------------------------------------------------------------------

    @property
    def wide(self) -> bool:
        return self.size.width >= WIDE_FROM

    def _build_columns(self) -> None:
        for kind, table_id in TABLES.items():
            table: DataTable[Text] = self.query_one(f"#{table_id}", DataTable)
            table.clear(columns=True)
            hidden = () if self.wide else NARROW_HIDDEN[kind]
            for key, label in COLUMNS[kind]:
                if key not in hidden:
                    table.add_column(label, key=key)
        self._columns_wide = self.wide

    def on_resize(self) -> None:
        if getattr(self, "_columns_wide", None) != self.wide:
            self._build_columns()
            self.show()
        self._layout()

    def show(self) -> None:
        listing = self.listing
        self._show_system(listing)
        for kind in TABLES:
            self._show_table(kind, listing)
        self._layout()
        self.refresh_bindings()

    def _show_system(self, listing: Resources | None) -> None:
        facts = self.query_one("#system-facts", KeyTable)
        if listing is None:
            text = self.problem or "Reading this machine's resources…"
            facts.set_rows([("", Content.styled(text, "$text-muted"))])
            return
        system, onboarded = listing.system, listing.onboarded
        rows: list[tuple[str, str | Content]] = [
            ("CPU", f"{system.cpu_cores} cores · {system.cpu_mhz:,} MHz in all"),
            ("RAM", mb(system.memory_mb)),
            ("Disk", f"{mb(system.disk_mb)} free"),
        ]
        for gpu in system.gpus:
            rows.append(
                (
                    f"GPU {gpu.index}",
                    f"{gpu_name(gpu.vendor, gpu.name)} · {mb(gpu.vram_mb)} VRAM",
                )
            )
        if not system.gpus:
            rows.append(("GPUs", safe(system.gpu_reason or "none detected")))
        if onboarded.cpu_cores > 0:
            bound = (
                f"{onboarded.cpu_cores} cores · {mb(onboarded.memory_mb)} RAM · "
                f"{plural(len(onboarded.gpus), 'GPU')}"
            )
            rows.append(("Onboarded", Content.assemble(bound, (" · bounds every spec", "dim"))))
        else:
            rows.append(
                (
                    "Onboarded",
                    Content.assemble(
                        ("not yet: ", "$text-warning"),
                        "onboard (",
                        ("o", "bold $text-accent"),
                        " on the dashboard) before defining specs",
                    ),
                )
            )
        customs = ", ".join(safe(c.name) for c in listing.customs) or "none"
        rows.append(("Custom", customs))
        if listing.file:
            rows.append(("Kept in", tilde(listing.file)))
        facts.set_rows(rows)

    def _show_table(self, kind: vm.Kind, listing: Resources | None) -> None:
        table: DataTable[Text] = self.query_one(f"#{TABLES[kind]}", DataTable)
        note = self.query_one(f"#{kind}-note", Static)
        items = vm.records(kind, listing) if listing is not None else ()
        hidden = () if self.wide else NARROW_HIDDEN[kind]
        keys = [key for key, _ in COLUMNS[kind] if key not in hidden]
        rows = []
        for item in items:
            cells = dict(zip((k for k, _ in COLUMNS[kind]), row_cells(item), strict=True))
            rows.append(Row(item.name, [table_cell(cells[key]) for key in keys], item))
        sorter = self.sorters[TABLES[kind]]
        shown = sorter.fill(table, rows)
        table.display = bool(shown)
        note.display = not items or (kind == "spec" and listing is not None and listing.defaults)
        note.update(table_note(kind, listing, self.problem, self.loaded))
        if items and not shown:
            note.display = True
            note.update(Content.assemble("Nothing matches ", (repr(sorter.query.strip()), "bold")))
        panel = self.query_one(f"#{kind}-list", Vertical)
        panel.border_subtitle = (
            f"{sorter.caption(len(shown), len(items), TITLES_SHORT[kind])} · n new · e edit"
            " · d delete"
            if items
            else "n new"
        )

    def redraw_table(self, table_id: str) -> None:
        kind = next(kind for kind, tid in TABLES.items() if tid == table_id)
        self._show_table(kind, self.listing)

    def _layout(self) -> None:
        """The form beside the table when wide; in its place when narrow."""
        open_kind = self.open_kind
        narrow = not self.wide
        for editor in self.query(Editor).results(Editor):
            editor.display = editor.kind == open_kind
            editor.styles.width = "1fr" if narrow else EDITOR_W
        for kind in ("custom", "spec"):
            self.query_one(f"#{kind}-list").display = not (narrow and open_kind == kind)
        self.query_one("#pool-lists").display = not (narrow and open_kind in ("pool", "group"))

    # --- editing -------------------------------------------------------------------------

    def _tab_kind(self) -> vm.Kind | None:
        active = self.query_one("#tabs", TabbedContent).active
        if active == "custom":
            return "custom"
        if active == "specs":
            return "spec"
        if active == "pools":
            focused = self.focused
            return "group" if focused is not None and focused.id == "group-table" else "pool"
        return None

    def _selected(self, kind: vm.Kind) -> vm.Record | None:
        if self.listing is None:
            return None
        name = selected_key(self.query_one(f"#{TABLES[kind]}", DataTable))
        return next((r for r in vm.records(kind, self.listing) if r.name == name), None)

    def _focus_table(self) -> None:
        kind = self._tab_kind()
        if kind is None:  # the System tab has no table (focusing another's shows its tab)
            self.query_one("#tabs", TabbedContent).query_one(Tabs).focus()
            return
        table = self.query_one(f"#{TABLES[kind]}", DataTable)
        if table.display:
            table.focus()

    def open_editor(self, kind: vm.Kind, record: vm.Record | None) -> None:
        editor = self.query_one(f"#{kind}-editor", Editor)
        editing = record is not None and not (kind == "spec" and self._defaults())
        editor.editing = record.name if record is not None and editing else None
        what = vm.TITLES[kind]
        editor.border_title = (
            f"Edit {what} {safe(record.name)}" if editing and record else f"New {what}"
        )
        values = vm.values_of(record) if record is not None else {}
        if kind == "spec" and record is None:
            values = {"pool": DEFAULT_POOL, "disk_mb": "0", "gpus": "0", "min_charge_units": "0"}
        editor.fill(values)
        self.open_kind = kind
        self._layout()
        self.validate_form()
        editor.first_input().focus()
        self.refresh_bindings()

    def _defaults(self) -> bool:
        return self.listing is not None and self.listing.defaults

    def close_editor(self) -> None:
        self.open_kind = None
        self._layout()
        self._focus_table()
        self.refresh_bindings()

    def validate_form(self) -> tuple[vm.Record, bool] | None:
        """Check the open form by the engine's rules; (record, ok)."""
        kind = self.open_kind
        if kind is None or self.listing is None:
            return None
        editor = self.query_one(f"#{kind}-editor", Editor)
        record, problems, general = vm.validate(
            kind, editor.values(), self.listing, replace=editor.editing is not None
        )
        editor.show_problems(problems, general)
        return record, not any(problems.values()) and not general

    @on(Input.Changed, "Editor Input")
    def _typed(self, event: Input.Changed) -> None:
        event.stop()
        self.validate_form()

    @on(Input.Submitted, "Editor Input")
    def _submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.action_save()

    def action_new(self) -> None:
        kind = self._tab_kind()
        if kind is not None and self.listing is not None:
            self.open_editor(kind, None)

    def action_new_group(self) -> None:
        if self.listing is not None:
            self.open_editor("group", None)

    def action_edit(self) -> None:
        kind = self._tab_kind()
        if kind is None:
            return
        record = self._selected(kind)
        if record is not None:
            self.open_editor(kind, record)

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        self.action_edit()

    def action_save(self) -> None:
        kind = self.open_kind
        if kind is not None:
            self.query_one(f"#{kind}-editor", Editor).revealed = True
        checked = self.validate_form()
        if kind is None or checked is None or self.saving:
            return
        record, ok = checked
        if not ok:
            self.say(
                Content.styled(f"The {vm.TITLES[kind]} has problems: see the form.", "$text-error")
            )
            return
        editor = self.query_one(f"#{kind}-editor", Editor)
        self.save(kind, record, editor.editing is not None)

    @work(exclusive=True, group="resources-op")
    async def save(self, kind: vm.Kind, record: vm.Record, replace: bool) -> None:
        self.saving = True
        try:
            self.listing = await self.nunet.client.call(vm.SAVE[kind](record, replace))
        except EngineError as exc:
            editor = self.query_one(f"#{kind}-editor", Editor)
            keys = {f.key for f in vm.FIELDS[kind]}
            problems: vm.Problems = {}
            general: list[str] = []
            for problem in exc.problems:
                if problem.field in keys:
                    problems.setdefault(problem.field, []).append(problem.message)
                else:
                    general.append(problem.message)
            editor.show_problems(problems, general or ([] if problems else [exc.message]))
            self.say(Content.styled(safe(exc.message), "$text-error"))
            return
        finally:
            self.saving = False
        self.say(
            Content.assemble(
                ("✓ Saved ", "bold $text-success"), f"{vm.TITLES[kind]} {safe(record.name)}"
            )
        )
        self.close_editor()
        self.show()

    @work(exclusive=True, group="resources-op")
    async def action_delete(self) -> None:
        kind = self._tab_kind()
        if kind is None or self.open_kind is not None:
            return
        record = self._selected(kind)
        if record is None:
            return
        if kind == "spec" and self._defaults():
            self.say(
                Content.styled(
                    "NuNet's tiers are the defaults while no spec is defined: define one (n).",
                    "$text-muted",
                )
            )
            return
        what = vm.TITLES[kind]
        confirmed = await self.app.push_screen_wait(
            ConfirmScreen(
                f"Delete {what} {safe(record.name)}?",
                Content(
                    "It is removed from this machine's resources and its advert at the next "
                    "heartbeat. Jobs already running keep their terms."
                ),
                confirm_label="Delete",
                danger=True,
            )
        )
        if not confirmed:
            return
        try:
            self.listing = await self.nunet.client.call(vm.REMOVE[kind](record.name))
        except EngineError as exc:
            self.say(Content.styled(safe(exc.message), "$text-error"))
            return
        self.say(
            Content.assemble(("✓ Deleted ", "bold $text-success"), f"{what} {safe(record.name)}")
        )
        self.show()

    def say(self, text: Content) -> None:
        status = self.query_one("#status", Static)
        status.update(text)
        status.display = True

    def action_back(self) -> None:
        if self.open_kind is not None:
            self.close_editor()
        elif not self.clear_filter():
            self.app.pop_screen()

    def action_reload(self) -> None:
        self.load()

    def action_tab(self, tab: str) -> None:
        if self.open_kind is None:
            self.query_one("#tabs", TabbedContent).active = tab
            self.call_after_refresh(self._focus_table)

    def on_tabbed_content_tab_activated(self, event: TabbedContent.TabActivated) -> None:
        self.refresh_bindings()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        editing = self.open_kind is not None
        if action == "save":
            return editing
        if action == "new_group":
            active = self.query_one("#tabs", TabbedContent).active
            return not editing and active == "pools" and self.listing is not None
        if action in ("new",):
            return not editing and self._tab_kind() is not None and self.listing is not None
        if action in ("edit", "delete"):
            return not editing and self._tab_kind() is not None
        if action in ("tab", "filter", "sort_next", "sort_reverse"):
            return not editing and (action == "tab" or self._tab_kind() is not None)
        return super().check_action(action, parameters)


TITLES_SHORT: dict[vm.Kind, str] = {
    "spec": "spec",
    "custom": "resource",
    "pool": "pool",
    "group": "group",
}


__all__ = ["ResourcesScreen"]
