"""The oracle's SQLite store: registered jobs, the one decision per job, the provider's own
receipt and the last time it said it was running the job (proof that it did not vanish),
reported transactions.

The decisions table is what makes the oracle safe to run: its primary key is the job id, and a
decision is written in the same IMMEDIATE transaction that checked there was none, so even two
oracle processes on one database can never sign twice for a job, let alone a withdraw and a
refund. Writes are synchronous=FULL: a signature handed out must survive a power cut.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import msgspec

from oracle_client.escrow.receipt import Receipt
from oracle_client.models import RewardGrant, ServiceQuote, ServiceRequest, StatusReport

_DECISIONS = """
CREATE TABLE IF NOT EXISTS {name} (
    job_id TEXT PRIMARY KEY REFERENCES jobs (job_id),
    reward_type TEXT NOT NULL CHECK (reward_type IN ('withdraw', 'refund', 'distribute')),
    grant_json TEXT NOT NULL,    -- the signed RewardGrant, JSON
    receipt TEXT NOT NULL,       -- the receipt it was decided on, JSON
    lock_ref TEXT NOT NULL,      -- the escrow UTxO seen on chain
    decided_at INTEGER NOT NULL
);"""
_SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    job_id TEXT PRIMARY KEY,
    provider_peer_id TEXT NOT NULL,
    deadline INTEGER NOT NULL,
    request TEXT NOT NULL,   -- the ServiceRequest, JSON
    quote TEXT NOT NULL,     -- the signed ServiceQuote, JSON
    registered_at INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS jobs_by_provider ON jobs (provider_peer_id, deadline);
{decisions}
CREATE TABLE IF NOT EXISTS reports (
    job_id TEXT PRIMARY KEY REFERENCES jobs (job_id),
    receipt TEXT NOT NULL,       -- the provider's own signed receipt, JSON (its first one)
    reported_at INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS liveness (
    job_id TEXT PRIMARY KEY REFERENCES jobs (job_id),
    last_alive INTEGER NOT NULL  -- ms: the newest signed "running" report from its provider
);
CREATE TABLE IF NOT EXISTS tx_reports (
    id INTEGER PRIMARY KEY,
    job_id TEXT NOT NULL REFERENCES jobs (job_id),
    tx_hash TEXT NOT NULL,
    reward_type TEXT NOT NULL,
    status TEXT NOT NULL,
    reported_at INTEGER NOT NULL
);
"""


_HOLD_COLUMNS = (
    ("consumer_peer_id", "TEXT NOT NULL DEFAULT ''"),
    ("consumer_address", "TEXT NOT NULL DEFAULT ''"),
    ("locked", "INTEGER NOT NULL DEFAULT 0"),  # 1: its lock was seen on chain
    ("client", "TEXT NOT NULL DEFAULT ''"),  # the network address the request came from
)


class Store:
    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        # One connection shared by the server's threads, serialised by a lock: the oracle's
        # load is a few requests a second, and one writer keeps the transactions obvious.
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._lock = threading.RLock()
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.execute("PRAGMA foreign_keys=ON")
        self._db.execute("PRAGMA busy_timeout=5000")
        self._db.executescript(_SCHEMA.replace("{decisions}", _DECISIONS.format(name="decisions")))
        self._allow_distribute()
        self._add_hold_columns()

    def _add_hold_columns(self) -> None:
        """Issue 20 §4: who asked (to bound what each consumer holds) and whether the lock was
        seen on chain (only then a job keeps holding its provider's slot). Rows from before
        have neither: they count as unverified, and are checked on chain when they matter."""
        columns = {row[1] for row in self._db.execute("PRAGMA table_info(jobs)")}
        with self.transaction() as db:
            for name, kind in _HOLD_COLUMNS:
                if name not in columns:
                    db.execute(f"ALTER TABLE jobs ADD COLUMN {name} {kind}")

    def _allow_distribute(self) -> None:
        """A database made before issue 12 refuses 'distribute' decisions (its CHECK): the
        table is copied into one that allows them, in one transaction."""
        row = self._db.execute(
            "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'decisions'"
        ).fetchone()
        if row is None or "'distribute'" in row[0]:
            return
        with self.transaction() as db:
            db.execute(_DECISIONS.format(name="decisions_v2"))
            db.execute("INSERT INTO decisions_v2 SELECT * FROM decisions")
            db.execute("DROP TABLE decisions")
            db.execute("ALTER TABLE decisions_v2 RENAME TO decisions")

    def close(self) -> None:
        with self._lock:
            self._db.close()

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """An IMMEDIATE transaction: it takes the write lock before the first read, so a check
        and the write that depends on it cannot interleave with another process."""
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def job(self, job_id: str) -> tuple[ServiceRequest, ServiceQuote] | None:
        with self._lock:
            row = self._db.execute(
                "SELECT request, quote FROM jobs WHERE job_id = ?", (job_id,)
            ).fetchone()
        if row is None:
            return None
        return (
            msgspec.json.decode(row[0], type=ServiceRequest),
            msgspec.json.decode(row[1], type=ServiceQuote),
        )

    def open_jobs(self, provider_peer_id: str, now_ms: int) -> list[tuple[str, bool, int]]:
        """(job id, lock seen on chain, registered at) of this provider's jobs not decided yet
        whose deadline has not passed."""
        with self._lock:
            rows = self._db.execute(
                "SELECT job_id, locked, registered_at FROM jobs LEFT JOIN decisions USING "
                "(job_id) WHERE provider_peer_id = ? AND deadline > ? "
                "AND decisions.job_id IS NULL",
                (provider_peer_id, now_ms),
            ).fetchall()
        return [(str(job), bool(locked), int(at)) for job, locked, at in rows]

    def pending(self, since_ms: int, *, consumer_peer_id: str = "", client: str = "") -> int:
        """Requests registered since ``since_ms`` whose lock was not seen yet: all of them,
        one consumer's (by the peer id that signed them), or one network address's."""
        where = "locked = 0 AND registered_at >= ?"
        args: tuple[object, ...] = (since_ms,)
        if consumer_peer_id:
            where += " AND consumer_peer_id = ?"
            args += (consumer_peer_id,)
        if client:
            where += " AND client = ?"
            args += (client,)
        with self._lock:
            (count,) = self._db.execute(f"SELECT COUNT(*) FROM jobs WHERE {where}", args).fetchone()
        return int(count)

    def unverified_of(self, consumer_peer_id: str, client: str, limit: int) -> list[str]:
        """The requests of this consumer, or from this network address, whose lock was not
        seen yet: what its bounds count, looked up before they refuse it."""
        with self._lock:
            rows = self._db.execute(
                "SELECT job_id FROM jobs WHERE locked = 0 "
                "AND (consumer_peer_id = ? OR (client != '' AND client = ?)) "
                "ORDER BY registered_at DESC LIMIT ?",
                (consumer_peer_id, client, limit),
            ).fetchall()
        return [str(row[0]) for row in rows]

    def unverified_before(self, before_ms: int, limit: int) -> list[str]:
        """The oldest requests registered before ``before_ms`` whose lock was never seen and
        that nobody reported on (no decision, receipt or liveness): the ones to look up."""
        with self._lock:
            rows = self._db.execute(
                "SELECT job_id FROM jobs WHERE locked = 0 AND registered_at < ? "
                "AND job_id NOT IN (SELECT job_id FROM decisions) "
                "AND job_id NOT IN (SELECT job_id FROM reports) "
                "AND job_id NOT IN (SELECT job_id FROM liveness) "
                "ORDER BY registered_at LIMIT ?",
                (before_ms, limit),
            ).fetchall()
        return [str(row[0]) for row in rows]

    def registered_at(self, job_id: str) -> int:
        with self._lock:
            row = self._db.execute(
                "SELECT registered_at FROM jobs WHERE job_id = ?", (job_id,)
            ).fetchone()
        return int(row[0]) if row else 0

    def mark_locked(self, job_id: str) -> None:
        with self._lock:
            self._db.execute("UPDATE jobs SET locked = 1 WHERE job_id = ?", (job_id,))

    def drop_unlocked(self, job_id: str) -> None:
        """Forget a request whose lock never reached the chain (no money to decide on)."""
        with self.transaction() as db:
            for table in ("tx_reports", "liveness", "reports"):
                db.execute(f"DELETE FROM {table} WHERE job_id = ?", (job_id,))
            db.execute(
                "DELETE FROM jobs WHERE job_id = ? AND locked = 0 "
                "AND job_id NOT IN (SELECT job_id FROM decisions)",
                (job_id,),
            )

    def add_job(
        self, request: ServiceRequest, quote: ServiceQuote, now_ms: int, client: str = ""
    ) -> None:
        with self._lock:
            self._db.execute(
                "INSERT INTO jobs (job_id, provider_peer_id, deadline, request, quote, "
                "registered_at, consumer_peer_id, consumer_address, locked, client) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, 0, ?)",
                (
                    request.job_id,
                    quote.provider_peer_id,
                    quote.deadline,
                    msgspec.json.encode(request).decode(),
                    msgspec.json.encode(quote).decode(),
                    now_ms,
                    request.consumer_peer_id,
                    request.consumer_address,
                    client,
                ),
            )

    def decision(self, job_id: str) -> RewardGrant | None:
        with self._lock:
            row = self._db.execute(
                "SELECT grant_json FROM decisions WHERE job_id = ?", (job_id,)
            ).fetchone()
        return None if row is None else msgspec.json.decode(row[0], type=RewardGrant)

    def add_decision(self, grant: RewardGrant, receipt_json: bytes, lock_ref: str) -> None:
        with self._lock:
            self._db.execute(
                "INSERT INTO decisions VALUES (?, ?, ?, ?, ?, ?)",
                (
                    grant.job_id,
                    grant.reward_type,
                    msgspec.json.encode(grant).decode(),
                    receipt_json.decode(),
                    lock_ref,
                    grant.decided_at,
                ),
            )

    def provider_report(self, job_id: str) -> Receipt | None:
        """The receipt the job's provider signed and sent on its own, if it ever did."""
        with self._lock:
            row = self._db.execute(
                "SELECT receipt FROM reports WHERE job_id = ?", (job_id,)
            ).fetchone()
        return None if row is None else msgspec.json.decode(row[0], type=Receipt)

    def add_provider_report(self, receipt: Receipt) -> None:
        """Keep the provider's first report; later ones change nothing."""
        with self._lock:
            self._db.execute(
                "INSERT OR IGNORE INTO reports VALUES (?, ?, ?)",
                (receipt.job_id, msgspec.json.encode(receipt).decode(), _now_ms()),
            )

    def last_alive(self, job_id: str) -> int | None:
        """When the job's provider last said it was running it (ms), if it ever did."""
        with self._lock:
            row = self._db.execute(
                "SELECT last_alive FROM liveness WHERE job_id = ?", (job_id,)
            ).fetchone()
        return None if row is None else int(row[0])

    def add_liveness(self, job_id: str, at_ms: int) -> None:
        """Keep the newest: a report that arrives late never moves the time back."""
        with self._lock:
            self._db.execute(
                "INSERT INTO liveness VALUES (?, ?) ON CONFLICT (job_id) "
                "DO UPDATE SET last_alive = max(last_alive, excluded.last_alive)",
                (job_id, at_ms),
            )

    def add_tx_report(self, report: StatusReport) -> None:
        with self._lock:
            self._db.execute(
                "INSERT INTO tx_reports (job_id, tx_hash, reward_type, status, reported_at) "
                "VALUES (?, ?, ?, ?, ?)",
                (report.job_id, report.tx_hash, report.reward_type, report.status, _now_ms()),
            )

    def tx_reports(self, job_id: str) -> list[StatusReport]:
        with self._lock:
            rows = self._db.execute(
                "SELECT tx_hash, reward_type, status FROM tx_reports WHERE job_id = ? ORDER BY id",
                (job_id,),
            ).fetchall()
        return [
            StatusReport(job_id=job_id, tx_hash=tx, reward_type=kind, status=status)
            for tx, kind, status in rows
        ]


def _now_ms() -> int:
    return int(time.time() * 1000)
