"""Escrows, first layer: the book of escrow records (one per paid job and role, in the
store), the oracle client, and what every later layer reads and writes through.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import msgspec
import trio

from engine import api
from engine.context import NodeContext
from engine.errors import EngineError
from engine.payments.records import EscrowRecord
from engine.ports import WalletPort

if TYPE_CHECKING:
    from oracle_client.client import OracleClient


log = logging.getLogger("nunet.payments.escrow")


T = TypeVar("T")

Role = Literal["consumer", "provider"]


async def _oracle_call(call: Callable[[], Any]) -> Any:
    """The oracle's errors as engine errors a user can act on."""
    from oracle_client.client import OracleError, OracleUnavailable

    try:
        return await call()
    except OracleUnavailable as exc:
        raise EngineError("oracle_unavailable", str(exc)) from None
    except OracleError as exc:
        raise EngineError("oracle", str(exc)) from None


class EscrowBook:
    """Implements ``EscrowPort`` for the jobs; ``wallet``: this node's wallet and chain."""

    def __init__(self, ctx: NodeContext, *, wallet: WalletPort) -> None:
        self.ctx = ctx
        self.wallet = wallet
        self._locks: dict[str, trio.Lock] = {}
        # One lock tx built and sent at a time: concurrent submits would pick the same wallet
        # outputs, and all but one would be refused by the chain.
        self._spending = trio.Lock()
        self._oracle_key: str | None = None
        self._wake = trio.Event()

    @property
    def enabled(self) -> bool:
        return self.ctx.payments_enabled

    def payment_address(self) -> str:
        return self.wallet.wallet().address

    def oracle(self) -> OracleClient:
        from oracle_client.client import OracleClient

        return OracleClient(self.ctx.settings.payments.oracle_url, timeout=10.0, retries=2)

    async def oracle_key(self) -> str:
        """The key of the oracle this node trusts: the one at its configured URL."""
        if self._oracle_key is None:
            async with self.oracle() as oracle:
                info = await _oracle_call(oracle.info)
            self._oracle_key = info.oracle_key
        return self._oracle_key

    async def blocking(self, fn: Callable[[], T]) -> T:
        """pycardano and Blockfrost block on HTTP: off the trio thread."""
        return await trio.to_thread.run_sync(fn)

    def _lock_for(self, job_id: str) -> trio.Lock:
        return self._locks.setdefault(job_id, trio.Lock())

    def get(self, job_id: str) -> EscrowRecord | None:
        raw = self.ctx.store.get_escrow(job_id)
        return None if raw is None else msgspec.json.decode(raw, type=EscrowRecord)

    def save(self, record: EscrowRecord, **changes: Any) -> EscrowRecord:
        info = msgspec.structs.replace(record.info, updated_at=time.time(), **changes)
        record = msgspec.structs.replace(record, info=info)
        self.ctx.store.save_escrow(info.job_id, info.state, msgspec.json.encode(record))
        self.ctx.emit(api.EscrowChanged(at=info.updated_at, escrow=info))
        return record

    def awaiting_receipt(self, job_id: str) -> bool:
        record = self.get(job_id)
        return record is not None and record.info.state == "locked"

    def keep(self, record: EscrowRecord, **evidence: str) -> EscrowRecord:
        record = msgspec.structs.replace(record, **evidence)
        return self.save(record)

    def listing(self) -> api.EscrowList:
        escrows = tuple(
            msgspec.json.decode(raw, type=EscrowRecord).info
            for raw in self.ctx.store.list_escrows()
        )

        def total(role: str, states: tuple[str, ...], part: str) -> int:
            # A settled split: its paid or refunded part (the whole amount for rows settled
            # before issue 12, which have neither).
            return sum(
                e.settled()[0 if part == "paid" else 1]
                for e in escrows
                if e.role == role and e.state in states
            )

        settled = ("claimed", "paid_out", "refunded")
        return api.EscrowList(
            escrows=escrows,
            earned_units=total("provider", settled, "paid"),
            spent_units=total("consumer", settled, "paid"),
            locked_units=sum(e.amount for e in escrows if e.state in api.ESCROW_OPEN_STATES),
            refunded_units=total("consumer", settled, "refunded"),
        )

    def lock_of(self, job_id: str) -> tuple[str, str]:
        """Consumer: (signed terms, lock tx) of a job's lock, as its Confirm carries them
        (("", "") when it has none)."""
        record = self.get(job_id)
        if record is None or record.info.role != "consumer":
            return "", ""
        return record.quote, record.info.lock_tx

    def kept_receipt(self, job_id: str) -> str:
        """The job's receipt as kept now (the one both signed, once they have)."""
        record = self.get(job_id)
        return record.receipt if record is not None else ""
