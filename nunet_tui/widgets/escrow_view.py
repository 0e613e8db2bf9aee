"""How a paid job's escrow looks in the wallet and rewards screens.

Pure functions from ``EscrowInfo`` (and a "now" the caller passes, so pictures can pin it) to
``Content``. Amounts stay in NTX base units until shown, so nothing is rounded twice. Errors
and outcomes may carry an oracle's or a peer's words: they go through ``safe()`` and are
never read as markup. Table cells use ``dim`` rather than ``$text-muted``: a cell becomes a
Rich ``Text``, where the theme's translucent muted colour turns near black.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from textual.content import Content

from engine.api import ESCROW_OPEN_STATES, EscrowInfo
from nunet_tui.format import DASH, ELLIPSIS, safe

NTX_SCALE = 1_000_000  # base units per NTX (6 decimals)

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

OPEN_STATES: tuple[str, ...] = (*ESCROW_OPEN_STATES, "undecided")
CLAIMABLE = ("verified", "receipt", "claiming", "undecided")
REFUNDABLE = ("locked", "receipt", "refunding", "undecided")


def is_open(escrow: EscrowInfo) -> bool:
    """Money still held by the script (or on its way out): something may still happen."""
    return escrow.state in OPEN_STATES


def ntx(base: int, *, sign: str = "") -> str:
    """``48.00``, ``0.0807``, ``1,240.50``: two decimals at least, six at most."""
    whole, frac = divmod(abs(base), NTX_SCALE)
    digits = f"{frac:06d}".rstrip("0").ljust(2, "0")
    return f"{sign}{whole:,}.{digits}"


def ada(lovelace: int) -> str:
    """ADA has six decimals too: ``13.50``."""
    return ntx(lovelace)


def ntx_of(value: float | None) -> str:
    """A balance the engine gave as a float of NTX (display only)."""
    return DASH if value is None else ntx(round(value * NTX_SCALE))


def state_text(escrow: EscrowInfo) -> Content:
    """``● claimable`` in the state's colour; words depend on the side looking."""
    state = escrow.state
    words = CONSUMER_WORDS if escrow.role == "consumer" else {}
    word = words.get(state) or STATE_WORDS.get(state, state)
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
    """What the escrow means to this wallet: ``+48.00`` earned, minus 48.00 paid, plain while
    open (nothing has moved to or from us for good yet) or when it came back."""
    amount = ntx(escrow.amount)
    if escrow.role == "provider" and escrow.state == "claimed":
        return Content.styled(f"+{amount}", "bold $text-success")
    if escrow.role == "consumer" and escrow.state == "paid_out":
        return Content.styled(f"\u2212{amount}", "$text-error")
    if escrow.state == "refunded":
        return Content.styled(amount, "dim")
    return Content(amount)


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
        ("", Content(STATE_HELP.get((escrow.role, escrow.state), ""))),
        *(
            [("Problem", Content.styled(one_line(escrow.error), "$text-error"))]
            if escrow.error
            else []
        ),
        (
            "Amount",
            Content.assemble(
                (f"{ntx(escrow.amount)} NTX", "bold"), (f"  {escrow.amount:,} base units", muted)
            ),
        ),
        ("Deadline", deadline_text(escrow, now)),
        ("Job ended", Content(one_line(escrow.outcome)) if escrow.outcome else Content("not yet")),
        ("Oracle", Content(escrow.reward_type or "no decision yet")),
        ("Lock tx", Content(safe(escrow.lock_tx) or DASH)),
        (settle, Content(safe(escrow.claim_tx) or DASH)),
        ("Consumer key", Content(short_hash(escrow.consumer_pkh, 12, 6))),
        ("Provider key", Content(short_hash(escrow.provider_pkh, 12, 6))),
    ]
    return rows


@dataclass(frozen=True)
class Totals:
    """The sums the screens show; the engine's ``EscrowList`` has the same rules, but events
    bring one escrow at a time, so the screens add up what they hold."""

    earned: int = 0  # provider: claimed
    awaiting: int = 0  # provider: still open
    spent: int = 0  # consumer: paid out to providers
    locked: int = 0  # consumer: still open
    refunded: int = 0  # consumer: came back
    awaiting_jobs: int = 0
    locked_jobs: int = 0


def totals(escrows: Iterable[EscrowInfo]) -> Totals:
    earned = awaiting = spent = locked = refunded = awaiting_jobs = locked_jobs = 0
    for e in escrows:
        if e.role == "provider":
            if e.state == "claimed":
                earned += e.amount
            elif is_open(e):
                awaiting += e.amount
                awaiting_jobs += 1
        else:
            if e.state == "paid_out":
                spent += e.amount
            elif e.state == "refunded":
                refunded += e.amount
            elif is_open(e):
                locked += e.amount
                locked_jobs += 1
    return Totals(earned, awaiting, spent, locked, refunded, awaiting_jobs, locked_jobs)


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
    "ntx",
    "ntx_of",
    "one_line",
    "short_hash",
    "signed_amount",
    "span",
    "state_text",
    "totals",
]
