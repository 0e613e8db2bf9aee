"""The one NTX formatter and parser (oracle_client/ntx.py): exact both ways, clear refusals."""

from __future__ import annotations

import pytest

from oracle_client.ntx import (
    KINDS,
    UNITS_PER_NTX,
    digits,
    format_ntx,
    format_rate,
    json_key,
    parse_ntx,
)


@pytest.mark.parametrize(
    ("units", "text"),
    [
        (0, "0 NTX"),
        (1, "0.000001 NTX"),
        (1_500_000, "1.5 NTX"),
        (25 * UNITS_PER_NTX, "25 NTX"),
        (1_500_001, "1.500001 NTX"),
        (1_240_500_000, "1,240.5 NTX"),
        (20_000, "0.02 NTX"),
        (-2_000_000, "-2 NTX"),
    ],
)
def test_format_is_exact(units: int, text: str) -> None:
    assert format_ntx(units) == text
    if units >= 0:
        assert parse_ntx(text) == units  # what is shown reads back to the same base units


def test_every_amount_says_what_it_is() -> None:
    assert format_ntx(1_500_000, "locked") == "1.5 NTX locked"
    assert [json_key(kind) for kind in KINDS] == [
        "estimate_units",
        "locked_units",
        "metered_units",
        "paid_units",
        "refunded_units",
    ]
    assert format_rate(2_400_000) == "2.4 NTX/h"
    assert digits(1_000_000_000) == "1,000"


@pytest.mark.parametrize(
    ("text", "units"),
    [
        ("1.5", 1_500_000),
        (" 2 ", 2_000_000),
        (".5", 500_000),
        ("5.", 5_000_000),
        ("1,240.5 NTX", 1_240_500_000),
        ("0.000001", 1),
        ("3.1000000", 3_100_000),  # trailing zeros are not precision
        ("7ntx", 7_000_000),
    ],
)
def test_parse_reads_exactly(text: str, units: int) -> None:
    assert parse_ntx(text) == units


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("0.0000001", "more than 6 decimals"),
        ("1,5", "not an NTX amount"),  # a decimal comma is refused, never read as 15
        ("-1", "not an NTX amount"),
        ("1e3", "not an NTX amount"),
        ("nan", "not an NTX amount"),
        ("", "not an NTX amount"),
        (".", "not an NTX amount"),
        ("1 000", "not an NTX amount"),
        ("9" * 60, "not an NTX amount"),
        ("99999999999999", "more than a ledger amount"),
    ],
)
def test_parse_refuses_in_one_line(text: str, why: str) -> None:
    with pytest.raises(ValueError, match=why) as caught:
        parse_ntx(text)
    assert "\n" not in str(caught.value)
