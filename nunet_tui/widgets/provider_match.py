"""The "Who can run it" panel of the submit form: every known provider with ✓ and its price
for this job, or ✗ and every reason it cannot (``engine.jobs.matching.match``, the engine's
own pure function). Enter on one posts ``ProviderMatch.Picked``; the screen decides."""

from __future__ import annotations

from collections.abc import Mapping

from textual import on
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.content import Content
from textual.message import Message
from textual.widgets import OptionList, Static
from textual.widgets.option_list import Option

from engine.api import Peer
from engine.jobs.matching import Candidate, MatchResult, match
from engine.jobs.spec import JobSpec
from engine.peer_names import TABLE_NAME_WIDTH, peer_label
from nunet_tui.format import (
    DASH,
    TIMES,
    latency,
    plural,
    safe,
    thousands,
)
from oracle_client.ntx import format_ntx, format_rate, units_of


class ProviderMatch(Vertical):
    """``#who``: the providers ranked for the spec (``show``)."""

    class Picked(Message):
        """Enter on a provider: pick it by hand (again: back to the best match)."""

        def __init__(self, peer_id: str) -> None:
            super().__init__()
            self.peer_id = peer_id

    def __init__(self, *, id: str, classes: str = "") -> None:
        super().__init__(id=id, classes=classes)
        self.border_title = "Who can run it"

    def compose(self) -> ComposeResult:
        yield Static(id="who-note", markup=False)
        yield OptionList(id="who-list", compact=True)

    def show(
        self,
        spec: JobSpec,
        peers: Mapping[str, Peer],
        problem: str | None,
        chosen: str,
        consumer: str | None = None,
    ) -> MatchResult | None:
        """Rank ``peers`` for ``spec`` (``chosen``: the peer picked by hand, if any); or say
        why there is nobody to rank (``problem``, else no adverts yet)."""
        note = self.query_one("#who-note", Static)
        options = self.query_one("#who-list", OptionList)
        if problem is not None or not peers:
            note.update(
                problem or "No providers known yet: they appear as their adverts reach this node."
            )
            note.display = True
            options.display = False
            self.border_subtitle = ""
            return None
        note.display = False
        options.display = True
        result = match(spec, list(peers.values()), consumer=consumer)
        highlighted = options.highlighted
        options.clear_options()
        for rank, candidate in enumerate(result.candidates):
            peer = candidate.peer
            options.add_option(
                Option(
                    Content.assemble(
                        ("✓ ", "bold $text-success"),
                        (_label(peer.peer_id, peers), "bold"),
                        "  ",
                        _offer(peer),
                        f"  {latency(candidate.latency_ms)}  ",
                        *_price(candidate),
                        ("  ← picked" if peer.peer_id == chosen else "", "bold $text-accent"),
                        ("  best" if rank == 0 and not chosen else "", "$text-success"),
                        *_reserved(candidate),
                    ),
                    id=peer.peer_id,
                )
            )
        for peer_id, reasons in result.excluded:
            options.add_option(
                Option(
                    Content.assemble(
                        ("✗ ", "bold $text-error"),
                        (_label(peer_id, peers), "bold"),
                        "  ",
                        (safe(reasons), "$text-muted"),
                        ("  ← picked" if peer_id == chosen else "", "bold $text-accent"),
                    ),
                    id=peer_id,
                )
            )
        if highlighted is not None and highlighted < options.option_count:
            options.highlighted = highlighted
        self.border_subtitle = f"{len(result.candidates)} of {plural(len(peers), 'provider')} match"
        return result

    @on(OptionList.OptionSelected, "#who-list")
    def _pick(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        self.post_message(self.Picked(event.option.id or ""))


def _price(candidate: Candidate) -> tuple[tuple[str, str], ...]:
    """``1.2 NTX estimate (gpu large, 2.4 NTX/h)``: the spec it would run under there."""
    if candidate.resource is None:  # an advert from before specs: the tier's price
        return (
            (format_ntx(units_of(candidate.cost_ntx), "estimate"), "bold"),
            (f" ({format_rate(units_of(candidate.price_ntx_hour))})", "$text-muted"),
        )
    resource = candidate.resource
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
