"""The oracle's logic, without HTTP: register quotes, decide rewards, record transactions.

Every refusal is an ``OracleRefusal`` with the HTTP status and error kind the API documents
(oracle_client/models.py), so the server only translates, and tests can drive this directly.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import msgspec
from nacl.signing import SigningKey

from oracle_client.cardano.address import parse_payment_address
from oracle_client.escrow.contract.datum import distribute_message, format_ntx, oracle_message
from oracle_client.escrow.receipt import (
    InvalidSignature,
    MissingSignature,
    Receipt,
    verify,
    verify_signature,
)
from oracle_client.fields import Network, RewardType
from oracle_client.models import (
    ErrorKind,
    LivenessReport,
    OracleInfo,
    ProviderOffer,
    RewardGrant,
    RewardPending,
    RewardRequest,
    ServiceQuote,
    ServiceRequest,
    StatusAck,
    StatusReport,
    quote_message,
)
from oracle_client.oracle_server.locks import (
    ChainUnavailable,
    ExpectedLock,
    LockChecker,
    LockNotFound,
)
from oracle_client.oracle_server.rules import (
    LIVENESS_GRACE_S,
    LIVENESS_SKEW_S,
    UndecidableReceipt,
    UnsignedByProvider,
    decide,
    decide_vanished,
    split,
)
from oracle_client.oracle_server.store import Store

# A quote holds a provider slot until it is decided or its deadline passes; a deadline far in
# the future would let one consumer block a provider for that long.
MAX_DEADLINE_MS = 30 * 24 * 3600 * 1000
# Issue 20 §4: a job holds a provider's slot only once its lock is on chain (one request in
# anyone's name used to hold it for up to 30 days). A request whose lock is not seen within
# HOLD_S lapses and is forgotten; until then it counts against its consumer (the peer id that
# signed it) and the network address it came from, a few at once each, and against a bound on
# all of them (identities are free, addresses are not).
HOLD_S = 15 * 60
MAX_PENDING_PER_CONSUMER = 8
MAX_PENDING_PER_CLIENT = 32
MAX_PENDING_TOTAL = 10_000
LAPSED_PER_REQUEST = 256  # requests past their hold looked up (and forgotten) per new request


class OracleRefusal(Exception):
    def __init__(self, status: int, error: ErrorKind, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.error = error
        self.reason = reason


class Oracle:
    def __init__(
        self,
        signing_key: SigningKey,
        store: Store,
        locks: LockChecker,
        network: Network,
        *,
        escrow_address: str | None = None,
        clock: Callable[[], float] = time.time,
        liveness_grace_s: float = LIVENESS_GRACE_S,
    ) -> None:
        self._key = signing_key
        self.store = store
        self.locks = locks
        self.network = network
        self.escrow_address = escrow_address
        self.clock = clock  # public: tests move it instead of waiting
        # Silence longer than this after a provider's last liveness report: it vanished.
        self.liveness_grace_s = liveness_grace_s

    @property
    def oracle_key(self) -> str:
        return bytes(self._key.verify_key).hex()

    def info(self) -> OracleInfo:
        return OracleInfo(
            oracle_key=self.oracle_key, network=self.network, escrow_address=self.escrow_address
        )

    def request_service(self, request: ServiceRequest, client: str = "") -> ServiceQuote:
        """Register a signed request (``client``: the network address it came from)."""
        now = self._now_ms()
        try:
            request.verify()
        except ValueError as exc:
            raise OracleRefusal(401, "bad_signature", str(exc)) from None
        if request.network != self.network:
            raise OracleRefusal(400, "bad_request", f"this oracle settles on {self.network}")
        if not now < request.deadline <= now + MAX_DEADLINE_MS:
            raise OracleRefusal(
                400, "bad_request", "the deadline must be in the future and within 30 days"
            )
        if not request.offers:
            raise OracleRefusal(
                404, "no_matching_peer", f"no peer with matching specs for job {request.job_id}"
            )
        self._look_up_locks(request, now, client)
        with self.store.transaction():
            known = self.store.job(request.job_id)
            if known is not None:
                if known[0] == request:
                    return known[1]  # a retried request: the same quote, not a second job
                raise OracleRefusal(
                    409, "job_id_taken", f"job id {request.job_id} is registered with other terms"
                )
            self._check_pending(request, now, client)
            offer = self._choose(request, now)
            quote = self._quote(request, offer)
            self.store.add_job(request, quote, now, client)
        return quote

    def _check_pending(self, request: ServiceRequest, now: int, client: str) -> None:
        since = now - HOLD_S * 1000
        lapse = f"lock them, or wait until they lapse ({HOLD_S // 60} minutes after each)"
        # By the peer id that signed them, never by the payment address, which anyone may
        # name: a flood naming a consumer's address must not use up that consumer's requests.
        mine = self.store.pending(since, consumer_peer_id=request.consumer_peer_id)
        if mine >= MAX_PENDING_PER_CONSUMER:
            raise OracleRefusal(
                429,
                "too_many_pending",
                f"this consumer has {mine} requests whose lock is not on chain yet; {lapse}",
            )
        if client and self.store.pending(since, client=client) >= MAX_PENDING_PER_CLIENT:
            raise OracleRefusal(
                429,
                "too_many_pending",
                f"{client} sent {MAX_PENDING_PER_CLIENT} requests whose lock is not on chain "
                f"yet; {lapse}",
            )
        if self.store.pending(since) >= MAX_PENDING_TOTAL:
            raise OracleRefusal(
                503, "too_many_pending", "the oracle holds too many unlocked requests: try later"
            )

    def _look_up_locks(self, request: ServiceRequest, now: int, client: str) -> None:
        """Outside the write lock (one read of the chain): which of the offered providers' jobs
        are locked now (they hold a slot from then on), which of this consumer's and this
        address's requests are (they no longer count against its bounds: a busy honest
        consumer locks what it asks for), and which requests lapsed, their lock not on chain
        past their hold (forgotten: the store stays bounded)."""
        lapse_before = now - HOLD_S * 1000
        jobs = self.store.unverified_before(lapse_before, LAPSED_PER_REQUEST)
        jobs += self.store.unverified_of(
            request.consumer_peer_id, client, MAX_PENDING_PER_CLIENT + MAX_PENDING_PER_CONSUMER
        )
        for offer in request.offers:
            jobs += [
                job for job, locked, _at in self.store.open_jobs(offer.peer_id, now) if not locked
            ]
        quotes = {job: known[1] for job in dict.fromkeys(jobs) if (known := self.store.job(job))}
        if not quotes:
            return
        try:
            seen = self.locks.locked_jobs([_expected(quote, None) for quote in quotes.values()])
        except ChainUnavailable:
            return  # nothing changes: a job not seen locked holds no slot meanwhile
        for job_id in quotes:
            if job_id in seen:
                self.store.mark_locked(job_id)
            elif self.store.registered_at(job_id) < lapse_before:
                self.store.drop_unlocked(job_id)

    def request_reward(self, request: RewardRequest) -> RewardGrant | RewardPending:
        known = self.store.job(request.job_id)
        if known is None:
            raise OracleRefusal(404, "job_not_found", f"no job {request.job_id} to claim")
        quote = known[1]
        decided = self.store.decision(request.job_id)
        if request.liveness is not None:
            return self._liveness(request.liveness, quote, decided)
        if request.receipt is None:
            if decided is not None:
                return decided
            return RewardPending(
                job_id=request.job_id,
                reason=f"job {request.job_id} is still running: no final receipt signed by "
                "both peers yet",
            )
        if not request.receipt.consumer_signature:
            return self._provider_report(request.receipt, quote)
        kind, vanished = self._judge(request.receipt, quote)
        if kind is None:
            return decided if decided is not None else self._alive(request.job_id)
        if decided is not None:
            return _same_decision(decided, kind)
        try:
            # Two locks may carry these terms: sign only for the consumer's (lock_tx).
            lock_ref = self.locks.check_lock(_expected(quote, request.lock_tx))
            self.store.mark_locked(request.job_id)
        except LockNotFound as exc:
            raise OracleRefusal(409, "lock_not_found", str(exc)) from None
        except ChainUnavailable as exc:
            raise OracleRefusal(503, "chain_unavailable", str(exc)) from None
        with self.store.transaction():
            # Checked again under the write lock: a concurrent request may have decided first,
            # or the provider reported in the meantime.
            decided = self.store.decision(request.job_id)
            if decided is not None:
                return _same_decision(decided, kind)
            if vanished and self._vanished(request.receipt) is None:
                return self._alive(request.job_id)  # it reported while we checked the lock
            grant = self._grant(known[0], quote, kind, lock_ref, request.receipt)
            self.store.add_decision(grant, msgspec.json.encode(request.receipt), lock_ref)
        return grant

    def _provider_report(
        self, receipt: Receipt, quote: ServiceQuote
    ) -> RewardGrant | RewardPending:
        """The provider's own receipt: recorded as proof that it did not vanish; the answer
        is the decision if there is one, else "waiting"."""
        self._check_parties(receipt, quote)
        try:
            verify_signature(receipt, "provider")
        except MissingSignature as exc:
            raise OracleRefusal(403, "receipt_unsigned", str(exc)) from None
        except InvalidSignature as exc:
            raise OracleRefusal(403, "receipt_invalid", str(exc)) from None
        with self.store.transaction():
            self.store.add_provider_report(receipt)
        decided = self.store.decision(receipt.job_id)
        if decided is not None:
            return decided
        return RewardPending(
            job_id=receipt.job_id,
            reason=f"job {receipt.job_id}: the provider's receipt is recorded; the decision "
            "waits for the consumer's countersignature",
        )

    def _liveness(
        self, report: LivenessReport, quote: ServiceQuote, decided: RewardGrant | None
    ) -> RewardGrant | RewardPending:
        """The provider says it is running the job: its signature checked, and its time near
        ours (an old report replayed says nothing about now), the time is kept."""
        if report.provider_peer_id != quote.provider_peer_id:
            raise OracleRefusal(
                400, "receipt_mismatch", "the liveness report names another provider than the job's"
            )
        try:
            report.verify()
        except ValueError as exc:
            raise OracleRefusal(403, "receipt_invalid", str(exc)) from None
        now = self._now_ms()
        if not now - self.liveness_grace_s * 1000 <= report.at <= now + LIVENESS_SKEW_S * 1000:
            raise OracleRefusal(
                400,
                "bad_request",
                f"the liveness report is dated {(report.at - now) / 1000:+.0f} s from the "
                "oracle's clock: sign a fresh one (is this machine's clock right?)",
            )
        if decided is None:
            with self.store.transaction():
                self.store.add_liveness(report.job_id, min(report.at, now))
            return RewardPending(
                job_id=report.job_id,
                reason=f"job {report.job_id}: the provider's liveness is recorded",
            )
        return decided

    def _alive(self, job_id: str) -> RewardPending:
        last = self.store.last_alive(job_id) or 0
        age = max(0.0, (self._now_ms() - last) / 1000)
        return RewardPending(
            job_id=job_id,
            reason=f"job {job_id}: its provider said it was running the job {age:.0f} s ago; "
            f"it counts as vanished only after {self.liveness_grace_s:g} s of silence",
            retry_after_s=round(min(86_400.0, max(0.0, self.liveness_grace_s - age)), 1),
        )

    def send_status(self, report: StatusReport) -> StatusAck:
        if self.store.job(report.job_id) is None:
            raise OracleRefusal(404, "job_not_found", f"no job {report.job_id}")
        self.store.add_tx_report(report)
        return StatusAck(message=f"transaction status {report.status} acknowledged")

    def _choose(self, request: ServiceRequest, now: int) -> ProviderOffer:
        """The cheapest offer within budget whose provider has a free slot (ties: the
        consumer's order)."""
        affordable = sorted(
            (o for o in request.offers if o.price <= request.budget), key=lambda o: o.price
        )
        if not affordable:
            cheapest = min(o.price for o in request.offers)
            raise OracleRefusal(
                400,
                "price_above_budget",
                f"estimated price {format_ntx(cheapest)} is above the budget "
                f"{format_ntx(request.budget)}",
            )
        for offer in affordable:
            # Held only by jobs whose lock was seen on chain (looked up just before).
            held = [job for job, locked, _at in self.store.open_jobs(offer.peer_id, now) if locked]
            if len(held) < offer.slots:
                return offer
        raise OracleRefusal(
            409, "provider_busy", "every provider within budget is busy with open jobs"
        )

    def _quote(self, request: ServiceRequest, offer: ProviderOffer) -> ServiceQuote:
        consumer = parse_payment_address(request.consumer_address, self.network)
        provider = parse_payment_address(offer.address, self.network)
        unsigned = ServiceQuote(
            job_id=request.job_id,
            network=self.network,
            consumer_peer_id=request.consumer_peer_id,
            consumer_pkh=consumer.payment_key_hash.hex(),
            provider_peer_id=offer.peer_id,
            compute_provider_addr=offer.address,
            provider_pkh=provider.payment_key_hash.hex(),
            estimated_price=offer.price,
            deadline=request.deadline,
            oracle_key=self.oracle_key,
            oracle_message="00",
            signature="00" * 64,
        )
        message = quote_message(unsigned)
        return msgspec.structs.replace(
            unsigned,
            oracle_message=message.hex(),
            signature=self._key.sign(message).signature.hex(),
        )

    def _check_parties(self, receipt: Receipt, quote: ServiceQuote) -> None:
        mismatched = [
            name
            for name, ours, theirs in (
                ("consumer_peer_id", quote.consumer_peer_id, receipt.consumer_peer_id),
                ("provider_peer_id", quote.provider_peer_id, receipt.provider_peer_id),
                ("consumer_pkh", quote.consumer_pkh, receipt.consumer_pkh),
                ("provider_pkh", quote.provider_pkh, receipt.provider_pkh),
                ("amount", quote.estimated_price, receipt.amount),
            )
            if ours != theirs
        ]
        if mismatched:
            raise OracleRefusal(
                400,
                "receipt_mismatch",
                f"the receipt's {', '.join(mismatched)} differ from the registered job",
            )

    def _judge(self, receipt: Receipt, quote: ServiceQuote) -> tuple[RewardType | None, bool]:
        """The decision this receipt asks for, once it is shown to be this job's and signed;
        True with it when the consumer alone signed (the provider vanished); None for the
        decision while that provider's liveness is still fresh."""
        self._check_parties(receipt, quote)
        alone = not receipt.provider_signature
        try:
            if alone:
                verify_signature(receipt, "consumer")
            else:
                verify(receipt)
        except MissingSignature as exc:
            raise OracleRefusal(403, "receipt_unsigned", str(exc)) from None
        except InvalidSignature as exc:
            raise OracleRefusal(403, "receipt_invalid", str(exc)) from None
        if alone:
            return self._vanished(receipt), True
        try:
            return decide(receipt), False
        except UndecidableReceipt as exc:
            raise OracleRefusal(422, "undecidable", str(exc)) from None

    def _vanished(self, receipt: Receipt) -> RewardType | None:
        try:
            return decide_vanished(
                receipt,
                self.store.provider_report(receipt.job_id),
                self.store.last_alive(receipt.job_id),
                self._now_ms(),
                self.liveness_grace_s,
            )
        except UnsignedByProvider as exc:
            raise OracleRefusal(403, "receipt_unsigned", str(exc)) from None

    def _grant(
        self,
        registered: ServiceRequest,
        quote: ServiceQuote,
        kind: RewardType,
        lock_ref: str,
        receipt: Receipt,
    ) -> RewardGrant:
        # The signature names the lock it releases: it can never spend a second lock that
        # carries the same terms.
        if kind == "distribute":
            provider_amount, consumer_amount = split(receipt, kind)
            # Only the share and the output: check_lock read that output's datum (this job,
            # these parties, this amount, this oracle key) and the script reads it too.
            message = distribute_message(provider_amount, lock_ref)
            return RewardGrant(
                job_id=quote.job_id,
                reward_type=kind,
                beneficiary_pkh=quote.provider_pkh,
                amount=quote.estimated_price,
                oracle_key=self.oracle_key,
                oracle_message=message.hex(),
                signature=self._key.sign(message).signature.hex(),
                decided_at=self._now_ms(),
                escrow_utxo=lock_ref,
                provider_amount=provider_amount,
                consumer_amount=consumer_amount,
                consumer_pkh=quote.consumer_pkh,
                provider_address=quote.compute_provider_addr,
                consumer_address=registered.consumer_address,
            )
        beneficiary = quote.provider_pkh if kind == "withdraw" else quote.consumer_pkh
        message = oracle_message(
            kind, quote.job_id, bytes.fromhex(beneficiary), quote.estimated_price, lock_ref
        )
        return RewardGrant(
            job_id=quote.job_id,
            reward_type=kind,
            beneficiary_pkh=beneficiary,
            amount=quote.estimated_price,
            oracle_key=self.oracle_key,
            oracle_message=message.hex(),
            signature=self._key.sign(message).signature.hex(),
            decided_at=self._now_ms(),
            escrow_utxo=lock_ref,
        )

    def _now_ms(self) -> int:
        return int(self.clock() * 1000)


def _same_decision(decided: RewardGrant, asked: RewardType) -> RewardGrant:
    if decided.reward_type != asked:
        raise OracleRefusal(
            409,
            "decision_conflict",
            f"job {decided.job_id} was already decided: {decided.reward_type}; "
            f"the oracle never signs a {asked} as well",
        )
    return decided


def _expected(quote: ServiceQuote, lock_tx: str | None) -> ExpectedLock:
    return ExpectedLock(
        job_id=quote.job_id,
        consumer_pkh=bytes.fromhex(quote.consumer_pkh),
        provider_pkh=bytes.fromhex(quote.provider_pkh),
        oracle_key=bytes.fromhex(quote.oracle_key),
        amount=quote.estimated_price,
        lock_tx=lock_tx,
    )
