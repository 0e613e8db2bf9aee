"""How a paid job's escrow looks in the wallet and rewards screens.

Pure functions from ``EscrowInfo`` (and a "now" the caller passes, so pictures can pin it) to
``Content``. Amounts stay in NTX base units until shown, so nothing is rounded twice. Errors
and outcomes may carry an oracle's or a peer's words: they go through ``safe()`` and are
never read as markup. Table cells use ``dim`` rather than ``$text-muted``: a cell becomes a
Rich ``Text``, where the theme's translucent muted colour turns near black.
"""

from __future__ import annotations

from collections.abc import Iterable

from textual.content import Content

from engine.api import EscrowInfo
from nunet_tui.format import DASH, ELLIPSIS, safe
from nunet_tui.viewmodels.money import OPEN_STATES, Totals, escrow_figures, is_open, settlement
from nunet_tui.viewmodels.money import escrow_totals as totals
from oracle_client.ntx import digits, format_ntx

STATE_STYLES: dict[str, str] = {
    "locking": "dim",
    "locked": "$text-accent",
    "verified": "$text-accent",
    "receipt": "bold $text-primary",
    "claiming": "$text-primary",
    "claimed": "bold $text-success",
    "refunding": "$text-warning",
    "refunded": "$text-warning",
    "paid_out": "$text-success",
    "undecided": "bold $text-error",
}
STATE_MARKS: dict[str, str] = {
    "locking": "◌",
    "locked": "◆",
    "verified": "◆",
    "receipt": "●",
    "claiming": "◔",
    "claimed": "✓",
    "refunding": "◔",
    "refunded": "↩",
    "paid_out": "✓",
    "undecided": "!",
}
# What each state means to the person looking, in as few words as the table allows.
STATE_WORDS: dict[str, str] = {
    "receipt": "claimable",
    "verified": "locked",
    "paid_out": "paid",
}
# The consumer's receipt means "waiting for the oracle", not "claimable" (that is the provider).
CONSUMER_WORDS: dict[str, str] = {"receipt": "decided"}

# One sentence per (side, state): what it means and what, if anything, the person can do.
STATE_HELP: dict[tuple[str, str], str] = {
    ("provider", "verified"): "The consumer's lock is on the chain. The job runs, or waits for "
    "both peers to sign its receipt.",
    ("provider", "receipt"): "Both peers signed the receipt: press c to claim (the oracle "
    "decides, then the claim transaction is sent).",
    ("provider", "claiming"): "The claim transaction is on its way (sent again after a restart).",
    ("provider", "claimed"): "Paid to this wallet.",
    ("provider", "refunded"): "The oracle decided for a refund: the consumer took the lock back.",
    ("provider", "undecided"): "The oracle would not decide; after the deadline the consumer "
    "may take the lock back.",
    ("consumer", "locking"): "The lock transaction is on its way to the chain.",
    ("consumer", "locked"): "The escrow script holds your NTX until the job ends (the oracle "
    "decides) or the deadline passes (press f then).",
    ("consumer", "receipt"): "Both peers signed the receipt: the oracle's decision pays the "
    "provider or refunds you.",
    ("consumer", "refunding"): "The refund transaction is on its way.",
    ("consumer", "refunded"): "The NTX came back to this wallet.",
    ("consumer", "paid_out"): "The provider claimed the lock: the job was paid.",
    ("consumer", "undecided"): "The oracle would not decide: press f to take the lock back once "
    "the deadline has passed.",
}

CLAIMABLE = ("verified", "receipt", "claiming", "undecided")
REFUNDABLE = ("locked", "receipt", "refunding", "undecided")


def ada(lovelace: int) -> str:
    """ADA has six decimals too (lovelace), written the same way: ``13.5``."""
    return digits(lovelace)


def state_text(escrow: EscrowInfo) -> Content:
    """``● claimable`` in the state's colour; words depend on the side looking."""
    state = escrow.state
    words = CONSUMER_WORDS if escrow.role == "consumer" else {}
    word = words.get(state) or STATE_WORDS.get(state, state)
    if escrow.role == "consumer" and escrow.refund_alone and state == "receipt":
        word = "refund asked"  # on this node's word alone: nothing is decided yet
    return Content.styled(f"{STATE_MARKS.get(state, '?')} {word}", STATE_STYLES.get(state, ""))


def short_hash(tx: str, head: int = 8, tail: int = 4) -> str:
    """``3fa9c0d2…81be``; a dash when there is no transaction yet."""
    tx = safe(tx)
    if not tx:
        return DASH
    if len(tx) <= head + tail + 1:
        return tx
    return f"{tx[:head]}{ELLIPSIS}{tx[-tail:] if tail else ''}"


def signed_amount(escrow: EscrowInfo) -> Content:
    """What the escrow means to this wallet: ``+48`` paid to us, minus what we paid, plain
    while open (nothing has moved to or from us for good yet) or when it all came back."""
    paid, refunded = settlement(escrow)
    if paid is None:
        return Content(digits(escrow.amount))
    if escrow.role == "provider" and paid:
        return Content.styled(f"+{digits(paid)}", "bold $text-success")
    if escrow.role == "consumer" and paid:
        return Content.styled(f"\u2212{digits(paid)}", "$text-error")
    return Content.styled(digits(refunded or 0), "dim")


def signed_units(escrow: EscrowInfo) -> int:
    """``signed_amount`` as base units, what the NTX column sorts by."""
    paid, refunded = settlement(escrow)
    if paid is None:
        return escrow.amount
    if paid and escrow.role in ("provider", "consumer"):
        return paid if escrow.role == "provider" else -paid
    return refunded or 0


def refunded_cell(escrow: EscrowInfo) -> Content:
    """What came back to the consumer (a dash while open)."""
    _, refunded = settlement(escrow)
    if refunded is None:
        return Content.styled(DASH, "dim")
    return Content.styled(digits(refunded), "$text-warning" if refunded else "dim")


def span(seconds: float) -> str:
    """``45 s``, ``12 min``, ``3 h 20 min``, ``2 d 4 h``."""
    seconds = int(abs(seconds))
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min"
    if seconds < 86_400:
        minutes = seconds % 3600 // 60
        return f"{seconds // 3600} h" + (f" {minutes} min" if minutes else "")
    hours = seconds % 86_400 // 3600
    return f"{seconds // 86_400} d" + (f" {hours} h" if hours else "")


def deadline_text(escrow: EscrowInfo, now: float) -> Content:
    """``in 3 h 20 min``, or ``passed 2 h ago`` (then the consumer may take the lock back).

    Relative on purpose: a wall-clock time would need a time zone, and "how long is left"
    is the question a person has."""
    if not escrow.deadline_ms:
        return Content.styled(DASH, "dim")
    left = escrow.deadline_ms / 1000 - now
    if left > 0:
        return Content(f"in {span(left)}")
    if is_open(escrow):
        return Content.styled(f"passed {span(left)} ago", "$text-warning")
    return Content.styled(f"passed {span(left)} ago", "dim")


def note_text(escrow: EscrowInfo) -> Content:
    """The last problem (in the error colour), else the job's outcome; one line."""
    if escrow.error:
        return Content.styled(one_line(escrow.error), "$text-error")
    if escrow.outcome:
        return Content.styled(f"job {one_line(escrow.outcome)}", "dim")
    return Content("")


def one_line(text: str) -> str:
    """Untrusted text on one line: newlines folded, control characters made visible."""
    return safe(" ".join(str(text).split()))


def detail_rows(escrow: EscrowInfo, now: float) -> list[tuple[str, Content]]:
    """Everything about one escrow, for a side panel: full hashes, the deadline, the error."""
    muted = "$text-muted"
    paid = "you are paid" if escrow.role == "provider" else "you pay"
    settle = "Claim tx" if escrow.role == "provider" else "Claim/refund tx"
    rows: list[tuple[str, Content]] = [
        ("Job", Content.styled(safe(escrow.job_id), "bold")),
        ("Side", Content.assemble(escrow.role, (f" · {paid}", muted))),
        ("State", state_text(escrow)),
        ("", Content(_state_help(escrow, now))),
        *(
            [("Problem", Content.styled(one_line(escrow.error), "$text-error"))]
            if escrow.error
            else []
        ),
        (
            "Locked",
            Content.assemble(
                (format_ntx(escrow.amount, "locked"), "bold"),
                (f"  {escrow.amount:,} base units", muted),
            ),
        ),
        *_settled_rows(escrow),
        ("Deadline", deadline_text(escrow, now)),
        ("Job ended", Content(one_line(escrow.outcome)) if escrow.outcome else Content("not yet")),
        ("Oracle", Content(escrow.reward_type or "no decision yet")),
        ("Lock tx", Content(safe(escrow.lock_tx) or DASH)),
        (settle, Content(safe(escrow.claim_tx) or DASH)),
        ("Consumer key", Content(short_hash(escrow.consumer_pkh, 12, 6))),
        ("Provider key", Content(short_hash(escrow.provider_pkh, 12, 6))),
    ]
    return rows


def _settled_rows(escrow: EscrowInfo) -> list[tuple[str, Content]]:
    figures = escrow_figures(escrow)
    rows: list[tuple[str, Content]] = []
    if figures.metered is not None:
        rows.append(("Metered", Content(format_ntx(figures.metered, "metered"))))
    if figures.paid is not None:
        rows.append(("Paid", Content.styled(format_ntx(figures.paid, "paid"), "bold")))
        rows.append(("Refunded", Content(format_ntx(figures.refunded or 0, "refunded"))))
    return rows


def newest_first(escrows: Iterable[EscrowInfo]) -> list[EscrowInfo]:
    return sorted(escrows, key=lambda e: (-(e.updated_at or e.created_at), e.job_id))


__all__ = [
    "CLAIMABLE",
    "OPEN_STATES",
    "REFUNDABLE",
    "Totals",
    "ada",
    "deadline_text",
    "detail_rows",
    "is_open",
    "newest_first",
    "note_text",
    "one_line",
    "refunded_cell",
    "short_hash",
    "signed_amount",
    "signed_units",
    "span",
    "state_text",
    "totals",
]


def _state_help(escrow: EscrowInfo, now: float) -> str:
    """What the state means; a refund asked on this node's word says when it can come back."""
    from nunet_tui.viewmodels.refund import refund_now

    if (refund := refund_now(escrow, now)) is not None:
        return one_line(refund.short)  # the oracle's words: the Problem row
    return STATE_HELP.get((escrow.role, escrow.state), "")


def refund_row(escrow: EscrowInfo | None, now: float, key: str) -> tuple[str, Content] | None:
    """The job view's "Refund" fact of a refund asked on this node's word: ``key`` refunds
    it now when the oracle can decide, else when and why not yet (viewmodels/refund.py)."""
    from nunet_tui.viewmodels.refund import refund_now

    status = refund_now(escrow, now)
    if status is None:
        return None
    # The oracle's own words are the Escrow fact's (its error): not said twice.
    if status.ready:
        return "Refund", Content.assemble(
            (key, "bold $text-accent"), " refunds it now · ", (status.short, "$text-success")
        )
    return "Refund", Content.styled(one_line(status.short), "$text-warning")
