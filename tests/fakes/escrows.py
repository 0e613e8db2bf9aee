"""``FakeEscrows``: the ``EscrowPort`` of paid jobs, recording each call, answering as told."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from engine import api
from engine.errors import EngineError


@dataclass
class FakeEscrows:
    address: str = "addr_test1qfake"  # "" : no wallet (payment_address raises no_wallet)
    lock_answer: tuple[str, str] = ("signed-terms", "ab" * 32)
    lock_error: str = ""  # non-empty: lock raises EngineError("payment", lock_error)
    verify_reason: str = ""  # what verify_lock answers ("" : the lock is there)
    countersign_reason: str = ""
    calls: list[tuple[str, Any]] = field(default_factory=list)

    def payment_address(self) -> str:
        self.calls.append(("payment_address", None))
        if not self.address:
            raise EngineError("no_wallet", "this node has no wallet yet")
        return self.address

    async def lock(
        self,
        job_id: str,
        provider_peer: str,
        provider_address: str,
        lock_units: int,
        expected_minutes: float,
        slots: int = 1,
    ) -> tuple[str, str]:
        self.calls.append(("lock", (job_id, provider_peer, provider_address, lock_units)))
        if self.lock_error:
            raise EngineError("payment", self.lock_error)
        return self.lock_answer

    async def verify_lock(
        self, job_id: str, consumer_peer: str, lock_units: int, terms: str, lock_tx: str
    ) -> str:
        self.calls.append(("verify_lock", (job_id, consumer_peer, lock_units, terms, lock_tx)))
        return self.verify_reason

    async def report_liveness(self, job_id: str) -> None:
        self.calls.append(("report_liveness", job_id))

    def provider_receipt(self, job: api.JobInfo) -> str:
        self.calls.append(("provider_receipt", job.job_id))
        return "receipt-of-" + job.job_id

    def accept_countersigned(self, job_id: str, consumer_peer: str, text: str) -> str:
        self.calls.append(("accept_countersigned", (job_id, consumer_peer, text)))
        return self.countersign_reason

    def kept_receipt(self, job_id: str) -> str:
        countersigned = self.called("accept_countersigned")
        return countersigned[-1][2] if countersigned else ""

    def offer_signed(self, job: api.JobInfo, text: str) -> str:
        self.calls.append(("offer_signed", (job.job_id, text)))
        return ""

    def receipt_refused(self, job_id: str, reason: str) -> None:
        self.calls.append(("receipt_refused", (job_id, reason)))

    def awaiting_receipt(self, job_id: str) -> bool:
        return False

    def provider_vanished(self, job: api.JobInfo) -> bool:
        self.calls.append(("provider_vanished", job.job_id))
        return True

    def never_ran(self, job: api.JobInfo) -> bool:
        self.calls.append(("never_ran", job.job_id))
        return True

    def lock_of(self, job_id: str) -> tuple[str, str]:
        locked = [args for called, args in self.calls if called == "lock" and args[0] == job_id]
        return self.lock_answer if locked else ("", "")

    async def countersign(self, job: api.JobInfo, text: str) -> str:
        self.calls.append(("countersign", (job.job_id, text)))
        return text + "+consumer"

    def called(self, name: str) -> list[Any]:
        return [args for called, args in self.calls if called == name]
