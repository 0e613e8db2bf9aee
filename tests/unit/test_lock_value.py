"""The only lock the split can spend holds ADA and exactly the datum's NTX, nothing else
(issue 20 §5; distribute_uplc.py check 5). The provider (engine/payments/escrow.py) and the
oracle (oracle_client/oracle_server/locks.py) both ask ``NtxUnit.held_alone``."""

from __future__ import annotations

from pycardano import Asset, AssetName, MultiAsset, ScriptHash, Value

from oracle_client.escrow.transactions import NtxUnit

UNIT = NtxUnit(bytes(range(28)), b"NTX")


def _value(ntx: int, **others: int) -> Value:
    assets = MultiAsset({ScriptHash(UNIT.policy_id): Asset({AssetName(UNIT.asset_name): ntx})})
    for name, count in others.items():
        assets[ScriptHash(bytes([9]) * 28)] = Asset({AssetName(name.encode()): count})
    return Value(2_000_000, assets)


def test_exactly_the_amount_and_nothing_else() -> None:
    assert UNIT.held_alone(_value(5_000_000), 5_000_000)


def test_another_token_beside_the_ntx_is_refused() -> None:
    assert not UNIT.held_alone(_value(5_000_000, DUST=1), 5_000_000)


def test_another_asset_name_under_the_ntx_policy_is_refused() -> None:
    value = _value(5_000_000)
    value.multi_asset[ScriptHash(UNIT.policy_id)][AssetName(b"NTX2")] = 1
    assert not UNIT.held_alone(value, 5_000_000)


def test_more_or_less_than_the_datum_names_is_refused() -> None:
    assert not UNIT.held_alone(_value(5_000_001), 5_000_000)
    assert not UNIT.held_alone(_value(4_999_999), 5_000_000)
    assert not UNIT.held_alone(Value(7_000_000), 5_000_000)  # ADA alone
