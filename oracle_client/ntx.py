"""The one way NTX amounts are written and read: every screen, CLI line and message uses it.

An amount is an ``int`` of NTX base units (6 decimals, ``UNITS_PER_NTX``), so nothing is ever
rounded on the way to the screen: ``format_ntx`` prints every base unit there is and no more
(``1,240.5 NTX``, ``0.000001 NTX``), and ``parse_ntx`` reads exactly what was typed or refuses
it in one line (a 7th decimal would be a base unit that does not exist).

An amount on a screen says what it is: ``format_ntx(units, "locked")`` is ``1.5 NTX locked``.
The kinds are spelled the same everywhere (``KINDS``), and a ``--json`` key is the kind with
``_units`` after it (``json_key``).
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation
from typing import Final, Literal

UNITS_PER_NTX: Final = 1_000_000
DECIMALS: Final = 6

Kind = Literal["estimate", "locked", "metered", "paid", "refunded"]
ESTIMATE: Final[Kind] = "estimate"
LOCKED: Final[Kind] = "locked"
METERED: Final[Kind] = "metered"
PAID: Final[Kind] = "paid"
REFUNDED: Final[Kind] = "refunded"
KINDS: Final[tuple[Kind, ...]] = (ESTIMATE, LOCKED, METERED, PAID, REFUNDED)

# A ledger amount is at most a u64; the longest text that can stand for one (with grouping
# commas, decimals and the unit) is well under this.
MAX_TEXT: Final = 48
MAX_UNITS: Final = 2**63 - 1

# Plain digits, or digits grouped by commas in threes (never a decimal comma: "1,5" is
# refused rather than read as fifteen), with an optional fraction; optional " NTX" after.
_AMOUNT = re.compile(
    r"(?P<whole>\d+|\d{1,3}(?:,\d{3})+)?(?:\.(?P<frac>\d*))?(?:\s*ntx)?", re.IGNORECASE
)


def digits(units: int) -> str:
    """The number alone, exact, trailing zeros dropped: ``1,240.5``, ``0.000001``, ``-2``."""
    sign = "-" if units < 0 else ""
    whole, frac = divmod(abs(units), UNITS_PER_NTX)
    text = f"{sign}{whole:,}"
    if frac:
        text += "." + f"{frac:0{DECIMALS}d}".rstrip("0")
    return text


def format_ntx(units: int, what: str | None = None) -> str:
    """``1.5 NTX``; with ``what``: ``1.5 NTX locked`` (one of ``KINDS`` on every screen)."""
    text = f"{digits(units)} NTX"
    return f"{text} {what}" if what else text


def format_rate(units_per_hour: int) -> str:
    """A price per machine-hour: ``2.4 NTX/h``."""
    return f"{digits(units_per_hour)} NTX/h"


def units_of(ntx: float) -> int:
    """A decimal NTX figure in base units, to the nearest one: what a person typed
    (``[jobs] prices``, a budget) or a decimal an older peer sends (checked exact there)."""
    return round(ntx * UNITS_PER_NTX)


def ntx_of(units: int) -> float:
    """Base units as the decimal fields older peers read carry them (``total_ntx``, an
    advert's tier ``prices``): exact to the base unit, never used for arithmetic here."""
    return units / UNITS_PER_NTX


def json_key(kind: Kind) -> str:
    """``locked`` -> ``locked_units``: the key every ``--json`` output gives the figure."""
    return f"{kind}_units"


def parse_ntx(text: str) -> int:
    """``"1.5"`` (or ``"1,240.5 NTX"``) to base units, exactly; a clear ``ValueError`` else.

    Refused: more than 6 decimals, a sign, an exponent, a decimal comma, anything but digits.
    """
    shown = text.strip()
    if len(shown) > MAX_TEXT:
        raise ValueError(f"not an NTX amount: {shown[:MAX_TEXT]!r}…")
    match = _AMOUNT.fullmatch(shown)
    if not shown or match is None or not (match["whole"] or match["frac"]):
        raise ValueError(f"not an NTX amount: {shown!r} (write it like 1.5 or 1,240.5)")
    whole = (match["whole"] or "0").replace(",", "")
    frac = match["frac"] or ""
    if len(frac.rstrip("0")) > DECIMALS:
        raise ValueError(f"{shown} has more than {DECIMALS} decimals (1 base unit is 0.000001 NTX)")
    try:
        value = Decimal(f"{whole}.{frac or '0'}") * UNITS_PER_NTX
    except InvalidOperation as exc:  # the pattern admits only digits; kept for safety
        raise ValueError(f"not an NTX amount: {shown!r}") from exc
    units = int(value)
    if units > MAX_UNITS:
        raise ValueError(f"{shown} NTX is more than a ledger amount can hold")
    return units
