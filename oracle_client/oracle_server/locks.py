"""Is the job's escrow lock on chain, with the terms the oracle registered?

The oracle signs a release only for money that is really locked for this job, to these
parties, under its own key, for the quoted amount: otherwise a signature could pay out of some
other lock, or a provider could be told "paid" for a lock that never existed. The check is an
interface (``LockChecker``) so the service logic does not care where the chain comes from;
``ChainLockChecker`` is the real one over any pycardano ``ChainContext`` (Blockfrost, or the
local ledger in tests and demos).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from pycardano import Address, ChainContext, UTxO

from oracle_client.escrow.contract.datum import EscrowDatum
from oracle_client.escrow.transactions import NtxUnit

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ExpectedLock:
    job_id: str
    consumer_pkh: bytes
    provider_pkh: bytes
    oracle_key: bytes
    amount: int  # the quoted price, NTX base units
    # The lock tx the consumer made (hex), when the request names it: only its output counts.
    lock_tx: str | None = None


class LockNotFound(Exception):
    """No UTxO at the escrow address carries a datum with the expected terms."""


class ChainUnavailable(Exception):
    """The chain backend could not be asked; try again later."""


class LockChecker(Protocol):
    def check_lock(self, expected: ExpectedLock) -> str:
        """The one matching lock's output reference ("txhash#index"): the oracle signs for
        exactly that output. Raise LockNotFound (none; or several and no ``lock_tx`` to tell
        which) / ChainUnavailable."""
        ...

    def locked_jobs(self, expected: Sequence[ExpectedLock]) -> set[str]:
        """The job ids among ``expected`` whose lock is on chain now, in one look at the
        escrow address (``lock_tx`` is not asked for). Raise ChainUnavailable."""
        ...


class ChainLockChecker:
    """Looks through the UTxOs at the escrow address for a matching inline datum.

    ``context`` may be a factory: pycardano's BlockFrostChainContext calls the backend in its
    constructor, and the oracle must start (and answer request-service) while the chain is
    down; the factory is called again on each check until it succeeds.
    ``ntx_asset`` (policy id, asset name): when given, the lock must hold exactly ``amount`` of
    it and no other token, so a datum that names an amount the output does not carry is not a
    lock, nor is one the split could not spend (``NtxUnit.held_alone``).
    """

    def __init__(
        self,
        context: ChainContext | Callable[[], ChainContext],
        escrow_address: Address | str,
        ntx_asset: tuple[bytes, bytes] | None = None,
    ) -> None:
        # Duck-typed: anything with utxos() is a context (pycardano's, the local ledger's).
        is_context = hasattr(context, "utxos")
        self._context: ChainContext | None = context if is_context else None
        self._factory: Callable[[], ChainContext] | None = None if is_context else context
        self.escrow_address = str(escrow_address)
        self.ntx_asset = ntx_asset

    def check_lock(self, expected: ExpectedLock) -> str:
        utxos = self._utxos()
        found = sorted(
            (u.input.transaction_id.payload.hex(), u.input.index)
            for u in utxos
            if self._matches(u, expected)
        )
        return pick_lock([f"{tx}#{index}" for tx, index in found], expected, self.escrow_address)

    def locked_jobs(self, expected: Sequence[ExpectedLock]) -> set[str]:
        by_job = {lock.job_id.encode("utf-8"): lock for lock in expected}
        found: set[str] = set()
        for utxo in self._utxos():
            datum = _escrow_datum(utxo)
            lock = by_job.get(datum.job_id) if datum is not None else None
            if lock is not None and self._matches(utxo, lock):
                found.add(lock.job_id)
        return found

    def _utxos(self) -> list[UTxO]:
        try:
            return list(self._chain().utxos(self.escrow_address))
        except ChainUnavailable:
            raise
        except Exception as exc:  # any backend failure means "cannot tell now", never "no"
            raise ChainUnavailable(f"cannot read {self.escrow_address}: {exc}") from exc

    def _chain(self) -> ChainContext:
        if self._context is None:
            assert self._factory is not None
            try:
                self._context = self._factory()
            except Exception as exc:
                raise ChainUnavailable(f"cannot connect to the chain backend: {exc}") from exc
        return self._context

    def _matches(self, utxo: UTxO, expected: ExpectedLock) -> bool:
        datum = _escrow_datum(utxo)
        if datum is None:
            return False
        terms_match = (
            datum.job_id == expected.job_id.encode("utf-8")
            and datum.consumer == expected.consumer_pkh
            and datum.provider == expected.provider_pkh
            and datum.oracle_key == expected.oracle_key
            and datum.amount == expected.amount
        )
        if not terms_match:
            return False
        if self.ntx_asset is None:
            return True
        policy, name = self.ntx_asset
        # Exactly the NTX the datum names and nothing else: the only lock the split spends.
        return NtxUnit(policy, name).held_alone(utxo.output.amount, expected.amount)


def pick_lock(refs: list[str], expected: ExpectedLock, where: str) -> str:
    """The one output to sign for among ``refs`` (sorted "txhash#index" of the outputs that
    carry the job's terms). Two locks can carry the same datum; a signature names one output,
    so the oracle picks the consumer's: the one its ``lock_tx`` made (its first, should that tx
    hold two), and guesses never."""
    terms = (
        f"for job {expected.job_id} at {where} with amount {expected.amount}, "
        "these parties and this oracle key"
    )
    if expected.lock_tx is not None:
        made = [ref for ref in refs if ref.split("#", 1)[0] == expected.lock_tx]
        if made:
            return made[0]
        others = f" ({len(refs)} other output(s) carry these terms)" if refs else ""
        raise LockNotFound(f"lock tx {expected.lock_tx} left no escrow lock {terms}{others}")
    if not refs:
        raise LockNotFound(f"no escrow lock {terms}")
    if len(refs) > 1:
        raise LockNotFound(
            f"{len(refs)} escrow outputs carry the terms of job {expected.job_id} "
            f"({', '.join(refs[:4])}): name the consumer's lock tx (lock_tx) to release one"
        )
    return refs[0]


def _escrow_datum(utxo: UTxO) -> EscrowDatum | None:
    """The output's inline datum as an EscrowDatum; None for anything else (anyone can send
    any output to a script address, so foreign datums are normal, not errors)."""
    datum = utxo.output.datum
    if datum is None:
        return None
    try:
        if isinstance(datum, EscrowDatum):
            return datum
        raw = getattr(datum, "cbor", None)  # RawCBOR, what BlockFrostChainContext returns
        cbor = raw if isinstance(raw, bytes) else datum.to_cbor()
        found = EscrowDatum.from_cbor(cbor)
        # Decoding checks no field: a consumer staking part no address can have would make
        # every split impossible, and the oracle never signs for a lock it cannot release.
        found.validate()
        return found
    except Exception:
        log.debug("ignoring a non-escrow datum at the escrow address", exc_info=True)
        return None
