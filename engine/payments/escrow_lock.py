"""Escrows, second layer: the consumer's lock (built, signed, submitted, kept before it
is sent) and the provider's check that a lock is on the chain as quoted.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import msgspec
import trio

from engine import api
from engine.errors import EngineError
from engine.payments.escrow_book import EscrowBook, _oracle_call
from engine.payments.records import EscrowRecord
from oracle_client.ntx import format_ntx

log = logging.getLogger("nunet.payments.escrow")

LOCK_WAIT_S = 60.0  # how long a provider waits for the consumer's lock to show on chain
LOCK_POLL_S = 1.0


class EscrowLocks(EscrowBook):
    """Locking (consumer) and checking a lock (provider)."""

    async def lock(
        self,
        job_id: str,
        provider_peer: str,
        provider_address: str,
        lock_units: int,
        expected_minutes: float,
        slots: int = 1,
    ) -> tuple[str, str]:
        """Register the terms with the oracle and lock the amount: (signed terms, lock tx id)."""
        from oracle_client.models import ProviderOffer, ServiceRequest, sign_service_request

        wallet = self.wallet.wallet()
        amount = lock_units
        margin = self.ctx.settings.payments.deadline_margin_s
        deadline_ms = int((time.time() + expected_minutes * 120 + margin) * 1000)
        if not provider_address:
            raise EngineError("payment", "the provider quoted no payment address: it has no wallet")
        try:
            request = ServiceRequest(
                job_id=job_id,
                network=wallet.network,
                consumer_peer_id=self.ctx.identity.peer_id,
                consumer_address=wallet.address,
                budget=amount,
                deadline=deadline_ms,
                offers=[
                    ProviderOffer(
                        peer_id=provider_peer,
                        address=provider_address,
                        price=amount,
                        slots=max(1, min(slots, 1024)),
                    )
                ],
                signature="00" * 64,
            )
            request = sign_service_request(request, bytes(self.ctx.identity.signing_key))
        except (ValueError, msgspec.ValidationError) as exc:
            # A provider's address of the other network (addr1 on a test channel...).
            raise EngineError("payment", f"cannot pay this provider: {exc}") from None
        async with self.oracle() as oracle:
            quote = await _oracle_call(lambda: oracle.request_service(request))
        if quote.oracle_key != await self.oracle_key():
            raise EngineError("payment", "the oracle answered with a key it does not advertise")
        if quote.provider_peer_id != provider_peer or quote.estimated_price != amount:
            raise EngineError("payment", "the oracle registered other terms than the quote's")
        record = EscrowRecord(
            info=api.EscrowInfo(
                job_id=job_id,
                role="consumer",
                state="locking",
                amount=amount,
                deadline_ms=quote.deadline,
                consumer_pkh=quote.consumer_pkh,
                provider_pkh=quote.provider_pkh,
                oracle_key=quote.oracle_key,
                created_at=time.time(),
            ),
            consumer_peer=self.ctx.identity.peer_id,
            provider_peer=provider_peer,
            quote=msgspec.json.encode(quote).decode(),
        )
        record = self.save(record)
        tx_id = await self._submit_lock(record)
        return record.quote, tx_id

    async def _submit_lock(self, record: EscrowRecord) -> str:
        from pycardano import Address

        from oracle_client.escrow import transactions as txs
        from oracle_client.escrow.contract.datum import EscrowDatum, staking_of

        payments = self.wallet
        context = await payments.chain_context()
        key = await payments.payment_signing_key()
        info = record.info
        address = Address.from_primitive(payments.wallet().address)
        datum = EscrowDatum(
            consumer=bytes.fromhex(info.consumer_pkh),
            # The wallet's own base address: a split pays the consumer's share there.
            consumer_stake=staking_of(address),
            provider=bytes.fromhex(info.provider_pkh),
            oracle_key=bytes.fromhex(info.oracle_key),
            job_id=info.job_id.encode(),
            amount=info.amount,
            deadline=info.deadline_ms,
        )
        unit = await self.ntx_unit()

        def build_and_submit() -> str:
            tx = txs.lock(context, signing_key=key, address=address, datum=datum, ntx=unit)
            return txs.submit(context, tx)

        try:
            async with self._spending:
                tx_id = await self.blocking(build_and_submit)
        except txs.TxError as exc:
            self.save(record, state="void", error=f"lock failed: {exc}")
            raise EngineError(
                "payment", f"could not lock {format_ntx(info.amount)}: {exc}"
            ) from None
        self.save(record, state="locked", lock_tx=tx_id, error="")
        log.info("job %s: locked %s in escrow (tx %s)", info.job_id, format_ntx(info.amount), tx_id)
        return tx_id

    async def ntx_unit(self) -> str:
        from engine.payments import chain

        unit = await self.blocking(lambda: chain.ntx_unit(self.ctx.settings.payments))
        if unit is None:
            raise EngineError("config", "the NTX token is not known: set [payments] ntx_policy_id")
        return unit.unit

    async def verify_lock(
        self, job_id: str, consumer_peer: str, lock_units: int, terms: str, lock_tx: str
    ) -> str:
        """Why the chain does not hold the lock these terms promise ("": it does)."""
        try:
            return await self._verify_lock(job_id, consumer_peer, lock_units, terms, lock_tx)
        except EngineError as exc:  # no wallet, oracle or chain here: say so to the consumer
            return f"the provider cannot check the escrow now: {exc.message}"

    async def _verify_lock(
        self, job_id: str, consumer_peer: str, lock_units: int, terms: str, lock_tx: str
    ) -> str:
        from oracle_client.models import ServiceQuote

        if not terms or not lock_tx:
            return "this provider runs paid jobs only: lock the quoted NTX in escrow first"
        try:
            quote = msgspec.json.decode(terms.encode(), type=ServiceQuote)
            quote.verify()
        except (msgspec.DecodeError, msgspec.ValidationError, ValueError) as exc:
            return f"the escrow terms are not valid: {exc}"
        wallet = self.wallet.wallet()
        problems = [
            (quote.oracle_key != await self.oracle_key(), "the terms are signed by another oracle"),
            (quote.job_id != job_id, "the terms are for another job"),
            (quote.provider_peer_id != self.ctx.identity.peer_id, "the terms name another peer"),
            (quote.provider_pkh != wallet.payment_key_hash, "the terms pay another wallet"),
            (quote.consumer_peer_id != consumer_peer, "the terms name another consumer"),
            (quote.estimated_price != lock_units, "the terms differ from the quote"),
            (quote.deadline < (time.time() + 60) * 1000, "the escrow's deadline is too close"),
        ]
        for bad, reason in problems:
            if bad:
                return reason
        found = await self._wait_for_lock(quote, lock_tx)
        if not found:
            return f"no matching escrow lock on the chain (tx {lock_tx[:16]}...)"
        record = EscrowRecord(
            info=api.EscrowInfo(
                job_id=job_id,
                role="provider",
                state="verified",
                amount=quote.estimated_price,
                deadline_ms=quote.deadline,
                consumer_pkh=quote.consumer_pkh,
                provider_pkh=quote.provider_pkh,
                oracle_key=quote.oracle_key,
                lock_tx=lock_tx,
                created_at=time.time(),
            ),
            consumer_peer=consumer_peer,
            provider_peer=self.ctx.identity.peer_id,
            quote=terms,
        )
        self.save(record)
        return ""

    async def _wait_for_lock(self, quote: Any, lock_tx: str) -> bool:
        from oracle_client.escrow import transactions as txs

        context = await self.wallet.chain_context()
        unit = txs.NtxUnit.parse(await self.ntx_unit())

        def matching() -> bool:
            for escrow in txs.find_escrows(context, quote.job_id):
                datum = escrow.datum
                if (
                    escrow.utxo.input.transaction_id.payload.hex() == lock_tx
                    and datum.consumer.hex() == quote.consumer_pkh
                    and datum.provider.hex() == quote.provider_pkh
                    and datum.oracle_key.hex() == quote.oracle_key
                    and datum.amount == quote.estimated_price
                    and datum.deadline == quote.deadline
                    and unit.held_alone(escrow.utxo.output.amount, datum.amount)
                ):
                    return True
            return False

        with trio.move_on_after(LOCK_WAIT_S):
            while True:
                try:
                    if await self.blocking(matching):
                        return True
                except Exception as exc:  # the backend away for a moment: look again
                    log.info("looking for the lock of job %s: %s", quote.job_id, exc)
                await trio.sleep(LOCK_POLL_S)
        return False
