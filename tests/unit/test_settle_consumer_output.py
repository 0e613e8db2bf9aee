"""The consumer's book checks its own output on chain before it says refunded or paid (issue
20 §5): the split's share and the lock's ADA at its wallet's full address, payment key and
staking part, not merely at its payment key. A Blockfrost-shaped fake answers the two reads
settle.py makes (which tx spent the lock, and that tx's inputs and outputs)."""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest
import trio
from pycardano import Address, Network, VerificationKeyHash

from engine import api
from engine.payments import settle
from engine.payments.records import EscrowRecord
from oracle_client.escrow.contract import escrow_address

NET = Network.TESTNET
UNIT = "c0ffee" * 9 + "00" + b"NTX".hex()
CONSUMER = VerificationKeyHash(bytes([1]) * 28)
PROVIDER = VerificationKeyHash(bytes([2]) * 28)
STAKE = VerificationKeyHash(bytes([3]) * 28)
OTHER_STAKE = VerificationKeyHash(bytes([4]) * 28)
BASE = str(Address(CONSUMER, STAKE, NET))
LOCK_TX, SPEND_TX = "aa" * 32, "bb" * 32
AMOUNT, SHARE, LOCK_ADA = 5_000_000, 2_000_000, 1_600_000


def _utxo(address: str, lovelace: int, ntx: int = 0, **more: Any) -> SimpleNamespace:
    amount = [SimpleNamespace(unit="lovelace", quantity=str(lovelace))]
    if ntx:
        amount.append(SimpleNamespace(unit=UNIT, quantity=str(ntx)))
    return SimpleNamespace(address=address, amount=amount, **more)


class Api:
    def __init__(self, outputs: list[SimpleNamespace]) -> None:
        self.outputs = outputs

    def transaction_utxos(self, tx: str) -> SimpleNamespace:
        script = str(escrow_address(NET))
        if tx == LOCK_TX:
            lock = _utxo(script, LOCK_ADA, AMOUNT, consumed_by_tx=SPEND_TX)
            return SimpleNamespace(inputs=[], outputs=[lock])
        provider = str(Address(PROVIDER, network=NET))
        inputs = [
            _utxo(script, LOCK_ADA, AMOUNT, tx_hash=LOCK_TX),
            _utxo(provider, 20_000_000, tx_hash="cc" * 32),
        ]
        return SimpleNamespace(inputs=inputs, outputs=self.outputs)


class Book:
    """The escrow book as settle.py uses it, on a fake chain."""

    def __init__(self, outputs: list[SimpleNamespace]) -> None:
        chain = SimpleNamespace(api=Api(outputs), network=NET)
        self.wallet = SimpleNamespace(
            chain_context=self._async(chain), wallet=lambda: SimpleNamespace(address=BASE)
        )
        self.saved: list[dict[str, Any]] = []

    @staticmethod
    def _async(value: Any) -> Callable[[], Any]:
        async def get() -> Any:
            return value

        return get

    async def blocking(self, fn: Callable[[], Any]) -> Any:
        return fn()

    async def ntx_unit(self) -> str:
        return UNIT

    def save(self, record: EscrowRecord, **changes: Any) -> EscrowRecord:
        self.saved.append(changes)
        return record


def _record() -> EscrowRecord:
    info = api.EscrowInfo(
        job_id="job-1",
        role="consumer",
        state="receipt",
        amount=AMOUNT,
        deadline_ms=1,
        consumer_pkh=CONSUMER.payload.hex(),
        provider_pkh=PROVIDER.payload.hex(),
        oracle_key="00" * 32,
        lock_tx=LOCK_TX,
        reward_type="distribute",
    )
    return EscrowRecord(info=info, consumer_peer="c", provider_peer="p")


def _spent(outputs: list[SimpleNamespace]) -> Any:
    book = Book(outputs)

    async def main() -> Any:
        return await settle._spent_how(book, _record(), owed=AMOUNT - SHARE, split=True)  # type: ignore[arg-type]

    return trio.run(main)


def _provider(share: int = SHARE) -> SimpleNamespace:
    return _utxo(str(Address(PROVIDER, network=NET)), 1_200_000, share)


def test_the_honest_split_is_booked_with_what_reached_the_wallets_address() -> None:
    spent = _spent([_utxo(BASE, LOCK_ADA, AMOUNT - SHARE), _provider()])
    assert (spent.tx, spent.provider, spent.consumer, spent.short) == (
        SPEND_TX,
        SHARE,
        AMOUNT - SHARE,
        "",
    )


@pytest.mark.parametrize(
    ("back", "missing"),
    [
        # The consumer's payment key with another stake key: not the wallet's address.
        (_utxo(str(Address(CONSUMER, OTHER_STAKE, NET)), LOCK_ADA, AMOUNT - SHARE), "received 0"),
        # Its enterprise address: neither.
        (_utxo(str(Address(CONSUMER, network=NET)), LOCK_ADA, AMOUNT - SHARE), "received 0"),
        # Its address and its share, but not the lock's ADA.
        (_utxo(BASE, 1_000_000, AMOUNT - SHARE), f"the lock's {LOCK_ADA} lovelace"),
    ],
)
def test_a_consumer_output_not_as_owed_is_not_booked_as_paid(
    back: SimpleNamespace, missing: str
) -> None:
    spent = _spent([back, _provider()])
    assert missing in spent.short
    # The book keeps its state and says what is missing.
    book = Book([back, _provider()])
    settle._not_paid_back(book, _record(), spent)  # type: ignore[arg-type]
    (saved,) = book.saved
    assert "state" not in saved and missing in saved["error"] and SPEND_TX in saved["error"]
