"""The "Who can run it" panel of the submit form: every known provider with ✓ and its price
for this job, or ✗ and every reason it cannot. The screen ranks them (``engine.domain.matching
.match``, the engine's own pure function) and sets the result here (``show``): the panel
draws it and never decides. Enter on one posts ``ProviderMatch.Picked``; the screen decides.

Like every list it sorts and filters (``sortable_table.TableSort``), as Vast.ai's offer
search: ``o`` by price (cheapest first), free RAM, free GPUs, latency (fastest first), ``O``
reverses, ``/`` filters by any text of a row; the providers that cannot run the job stay
after those that can. Picking follows the provider, not its place in the list."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.content import Content
from textual.message import Message
from textual.widgets import Input, OptionList, Static
from textual.widgets.option_list import Option

from engine.api import Peer
from engine.domain.matching import Candidate, MatchResult
from engine.domain.peer_names import TABLE_NAME_WIDTH, peer_label
from nunet_tui.format import (
    DASH,
    TIMES,
    latency,
    plural,
    safe,
    thousands,
)
from nunet_tui.widgets.sortable_table import (
    FILTER_BINDING,
    FILTER_PLACEHOLDER,
    SORT_BINDINGS,
    Row,
    TableSort,
)
from oracle_client.ntx import format_ntx, format_rate

# Vast.ai's offer search: what a consumer picks a provider by, best first.
SORTS = (("price", "price"), ("ram", "free RAM"), ("gpu", "free GPUs"), ("latency", "latency"))


class ProviderMatch(Vertical):
    """``#who``: the providers ranked for the spec (``show``)."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding(
            "escape",
            "clear_filter",
            "Clear filter",
            tooltip="Clear the providers' filter",
            id="providers.clear_filter",
        ),
        FILTER_BINDING,
        *SORT_BINDINGS,
    ]

    class Picked(Message):
        """Enter on a provider: pick it by hand (again: back to the best match)."""

        def __init__(self, peer_id: str) -> None:
            super().__init__()
            self.peer_id = peer_id

    def __init__(self, *, id: str, classes: str = "") -> None:
        super().__init__(id=id, classes=classes)
        self.border_title = "Who can run it"
        self.sorter = TableSort(SORTS, _sort_value)
        self.result: MatchResult | None = None
        self.peers: Mapping[str, Peer] = {}
        self.chosen = ""

    def compose(self) -> ComposeResult:
        box = Input(placeholder=FILTER_PLACEHOLDER, id="who-filter", compact=True)
        box.display = box.can_focus = False  # tab skips it while hidden
        yield box
        yield Static(id="who-note", markup=False)
        yield OptionList(id="who-list", compact=True)

    def show(
        self,
        result: MatchResult | None,
        peers: Mapping[str, Peer],
        problem: str | None,
        chosen: str,
    ) -> None:
        """Show ``result``, the ranking of ``peers`` (``chosen``: the peer picked by hand, if
        any); or, without one, why there is nobody to rank (``problem``, else no adverts)."""
        note = self.query_one("#who-note", Static)
        options = self.query_one("#who-list", OptionList)
        self.result = None
        if result is None:
            note.update(
                problem or "No providers known yet: they appear as their adverts reach this node."
            )
            note.display = True
            options.display = False
            self.border_subtitle = ""
            return
        self.result, self.peers, self.chosen = result, peers, chosen
        self.redraw()

    def rows(self) -> list[Row]:
        """Every provider as a row (``TableSort``'s): those that can run the job, then not."""
        result = self.result
        if result is None:
            return []
        chosen = self.chosen
        rows = []
        for rank, candidate in enumerate(result.candidates):
            peer = candidate.peer
            prompt = Content.assemble(
                ("✓ ", "bold $text-success"),
                (_label(peer.peer_id, self.peers), "bold"),
                "  ",
                _offer(peer),
                f"  {latency(candidate.latency_ms)}  ",
                *_price(candidate),
                *_record(peer),
                ("  ← picked" if peer.peer_id == chosen else "", "bold $text-accent"),
                ("  best" if rank == 0 and not chosen else "", "$text-success"),
                *_reserved(candidate),
            )
            rows.append(Row(peer.peer_id, [prompt], candidate, peer.peer_id))
        for peer_id, reasons in result.excluded:
            prompt = Content.assemble(
                ("✗ ", "bold $text-error"),
                (_label(peer_id, self.peers), "bold"),
                "  ",
                (safe(reasons), "$text-muted"),
                ("  ← picked" if peer_id == chosen else "", "bold $text-accent"),
            )
            rows.append(Row(peer_id, [prompt], None, peer_id))
        return rows

    def redraw(self) -> None:
        """Show the last ranking, filtered and sorted; the highlight stays on its provider."""
        if self.result is None:
            return
        note = self.query_one("#who-note", Static)
        options = self.query_one("#who-list", OptionList)
        rows = self.rows()
        shown = self.sorter.arrange(rows)
        highlighted = options.highlighted
        was = (
            options.get_option_at_index(highlighted).id
            if highlighted is not None and highlighted < options.option_count
            else None
        )
        options.clear_options()
        options.add_options(Option(row.cells[0], id=row.key) for row in shown)
        keys = [row.key for row in shown]
        if was in keys:
            options.highlighted = keys.index(was)
        elif highlighted is not None and shown:
            options.highlighted = min(highlighted, len(shown) - 1)
        note.display = not shown
        options.display = bool(shown)
        if not shown:
            note.update(Content.assemble("No provider matches ", (repr(self.sorter.query), "bold")))
        matching = len(self.result.candidates)
        count = f"{matching} of {plural(len(self.peers), 'provider')} match"
        if self.sorter.query.strip():
            count += f" · {len(shown)} shown"
        self.border_subtitle = count + self.sorter.sort_label()

    # --- keys ----------------------------------------------------------------------------

    def action_sort_next(self) -> None:
        self.sorter.next()
        self.redraw()

    def action_sort_reverse(self) -> None:
        if self.sorter.reverse():
            self.redraw()

    def action_filter(self) -> None:
        box = self.query_one("#who-filter", Input)
        box.display = box.can_focus = True
        box.focus()

    def action_clear_filter(self) -> None:
        box = self.query_one("#who-filter", Input)
        box.value = ""
        box.display = box.can_focus = False
        self.sorter.query = ""
        self.query_one("#who-list", OptionList).focus()
        self.redraw()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "clear_filter":  # else Esc is the screen's (leave the form)
            return self.query_one("#who-filter", Input).display
        if action in ("filter", "sort_next", "sort_reverse"):
            return self.result is not None
        return True

    @on(Input.Changed, "#who-filter")
    def _filter_typed(self, event: Input.Changed) -> None:
        event.stop()
        self.sorter.query = event.value
        self.redraw()

    @on(Input.Submitted, "#who-filter")
    def _filter_kept(self, event: Input.Submitted) -> None:
        event.stop()
        self.query_one("#who-list", OptionList).focus()

    @on(OptionList.OptionSelected, "#who-list")
    def _pick(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        self.post_message(self.Picked(event.option.id or ""))


def _sort_value(candidate: Candidate | None, key: str) -> Any:
    """What a provider sorts by (larger first on the first press); a provider that cannot
    run the job has nothing to sort by and stays last."""
    if candidate is None:
        return None
    if key == "price":  # base units: the estimate under the spec it would run under there
        return -candidate.estimate_units
    if key == "ram":
        return candidate.free_memory_mb
    if key == "gpu":
        res = candidate.peer.resources
        if res is None:
            return None
        return len(res.gpus) if res.free_gpus is None else res.free_gpus
    if key == "latency":
        return None if candidate.latency_ms is None else -candidate.latency_ms
    return None


def _price(candidate: Candidate) -> tuple[tuple[str, str], ...]:
    """``1.2 NTX estimate (gpu large, 2.4 NTX/h)``: the spec it would run under there."""
    resource = candidate.resource
    if resource is None:  # a candidate always has its spec (matching.py); nothing to show
        return ((format_ntx(candidate.estimate_units, "estimate"), "bold"),)
    return (
        (format_ntx(candidate.estimate_units, "estimate"), "bold"),
        (f" ({safe(resource.name)}, {format_rate(resource.price_units_hour)})", "$text-muted"),
    )


def _reserved(candidate: Candidate) -> tuple[tuple[str, str], ...]:
    """The provider's specs this consumer may not use, each with why (a pool's group)."""
    notes = [
        f"{safe(offer.spec.name)}: {safe(offer.note)}"
        for offer in candidate.offers
        if offer.note and "reserved" in offer.note
    ]
    if not notes:
        return ()
    return (("\n    " + " · ".join(notes[:3]), "$text-muted"),)


def _offer(peer: Peer) -> Content:
    res = peer.resources
    if res is None:
        return Content.styled(DASH, "$text-muted")
    parts = [f"{thousands(res.memory_mb)} MB"]
    if res.gpus:
        models: dict[str, int] = {}
        for gpu in res.gpus:
            models[safe(gpu.model)] = models.get(safe(gpu.model), 0) + 1
        parts.append(", ".join(f"{n}{TIMES}{m}" if n > 1 else m for m, n in models.items()))
    return Content.styled(" · ".join(parts), "$text-muted")


def _label(peer_id: str, peers: Mapping[str, Peer]) -> str:
    """The provider column's text: its name (cut short) and always its short id."""
    peer = peers.get(peer_id)
    return peer_label(peer_id, peer.display_name if peer else "", name_width=TABLE_NAME_WIDTH)


__all__ = ["ProviderMatch"]


def _record(peer: Any) -> tuple[tuple[str, str], ...]:
    """Its record with us (issue 27 §2): the score and its basis; nothing without history."""
    record = getattr(peer, "reputation", None)
    if record is None or record.score is None:
        return ()
    return ((f"  record {record.score:.2f} ({record.basis})", "$text-muted"),)
