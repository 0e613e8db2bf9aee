"""The node's SQLite file: the source of truth, and the only module that writes SQL.

WAL mode so readers (a status command, the TUI) never wait on the writer. The schema is a list
of migrations applied in order and recorded in ``PRAGMA user_version``; a database written by
a newer release is refused rather than silently misread.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import time
import urllib.parse
from pathlib import Path
from typing import NamedTuple

import msgspec

from engine.api import EscrowInfo, JobInfo, Onboarding
from engine.domain.reputation import Reputation, reputations
from engine.errors import EngineError

# Each entry moves the schema from version i to i+1. Never edit a released entry: append.
MIGRATIONS: tuple[str, ...] = (
    """
    CREATE TABLE node_kv (
        key   TEXT PRIMARY KEY,
        value TEXT NOT NULL
    );
    CREATE TABLE onboarding (
        id              INTEGER PRIMARY KEY CHECK (id = 1),
        memory_mb       INTEGER NOT NULL CHECK (memory_mb > 0),
        cpu_mhz         INTEGER NOT NULL CHECK (cpu_mhz > 0),
        channel         TEXT    NOT NULL,
        address         TEXT    NOT NULL,
        local_discovery INTEGER NOT NULL,
        cardano_node    INTEGER NOT NULL,
        gpus            TEXT    NOT NULL,
        state           TEXT    NOT NULL CHECK (state IN ('active', 'paused')),
        onboarded_at    REAL    NOT NULL,
        updated_at      REAL    NOT NULL
    );
    CREATE TABLE onboarding_history (
        id     INTEGER PRIMARY KEY AUTOINCREMENT,
        at     REAL NOT NULL,
        action TEXT NOT NULL,
        detail TEXT NOT NULL
    );
    """,
    """
    CREATE TABLE peers (
        peer_id   TEXT PRIMARY KEY,
        channel   TEXT NOT NULL,
        info      TEXT NOT NULL,
        last_seen REAL NOT NULL
    );
    CREATE TABLE chat_requests (
        id           INTEGER PRIMARY KEY AUTOINCREMENT,
        peer_id      TEXT NOT NULL,
        conversation TEXT NOT NULL,
        at           REAL NOT NULL,
        state        TEXT NOT NULL CHECK (state IN ('open', 'joined', 'cleared')),
        UNIQUE (peer_id, conversation)
    );
    CREATE TABLE chat_messages (
        id           INTEGER PRIMARY KEY AUTOINCREMENT,
        peer_id      TEXT NOT NULL,
        conversation TEXT NOT NULL,
        direction    TEXT NOT NULL CHECK (direction IN ('in', 'out')),
        seq          INTEGER,
        text         TEXT NOT NULL,
        at           REAL NOT NULL,
        status       TEXT NOT NULL CHECK (status IN ('delivered', 'queued', 'received')),
        UNIQUE (peer_id, conversation, direction, seq)
    );
    CREATE INDEX chat_messages_peer ON chat_messages (peer_id, id);
    """,
    """
    CREATE TABLE jobs (
        job_id     TEXT PRIMARY KEY,
        role       TEXT NOT NULL CHECK (role IN ('consumer', 'provider')),
        state      TEXT NOT NULL,
        created_at REAL NOT NULL,
        updated_at REAL NOT NULL,
        info       TEXT NOT NULL
    );
    CREATE INDEX jobs_state ON jobs (state);
    CREATE TABLE job_messages (
        id        INTEGER PRIMARY KEY AUTOINCREMENT,
        job_id    TEXT NOT NULL,
        direction TEXT NOT NULL CHECK (direction IN ('in', 'out')),
        kind      TEXT NOT NULL,
        body      BLOB NOT NULL,
        at        REAL NOT NULL
    );
    CREATE INDEX job_messages_job ON job_messages (job_id, id);
    """,
    # v4, payments: the wallet's public half. The mnemonic lives in the keystore; the key
    # hashes here let `wallet show` answer without unlocking it or loading pycardano.
    """
    CREATE TABLE wallet (
        id               INTEGER PRIMARY KEY CHECK (id = 1),
        chain            TEXT NOT NULL CHECK (chain = 'cardano'),
        payment_key_hash TEXT NOT NULL,
        stake_key_hash   TEXT NOT NULL,
        origin           TEXT NOT NULL CHECK (origin IN ('new', 'import')),
        created_at       REAL NOT NULL
    );
    """,
    # v5, payments: one escrow row per paid job and side; the receipt and the kept claim or
    # refund tx travel in it so that a restart mid-claim resubmits the very same tx.
    """
    CREATE TABLE escrows (
        job_id     TEXT PRIMARY KEY,
        state      TEXT NOT NULL,
        updated_at REAL NOT NULL,
        info       TEXT NOT NULL
    );
    CREATE INDEX escrows_state ON escrows (state);
    """,
    # v6, amounts as integers of NTX base units (issue 23 §2): the float twins of the base-unit
    # fields go, each kept where it was the only figure (a job quoted before billing: its
    # quote becomes its estimate; its metering's cost, cost_units), rounded to the base unit
    # as every float figure was when it was made.
    """
    UPDATE jobs SET info = json_set(info, '$.estimate_units',
        CAST(ROUND(json_extract(info, '$.quoted_ntx') * 1000000) AS INTEGER))
    WHERE json_type(info, '$.quoted_ntx') IN ('real', 'integer')
      AND COALESCE(json_type(info, '$.estimate_units'), 'null') = 'null';
    UPDATE jobs SET info = json_set(json_remove(info, '$.metering.cost_ntx'),
        '$.metering.cost_units',
        CAST(ROUND(json_extract(info, '$.metering.cost_ntx') * 1000000) AS INTEGER))
    WHERE json_type(info, '$.metering.cost_ntx') IN ('real', 'integer');
    UPDATE jobs SET info = json_remove(info, '$.price_ntx_hour', '$.quoted_ntx');
    UPDATE escrows SET info = json_remove(info, '$.info.ntx');
    UPDATE peers SET info = json_set(
        json_remove(info, '$.resources.prices', '$.resources.ntx_claimed'),
        '$.resources.price_units',
        json((SELECT json_group_object(key, CAST(ROUND(value * 1000000) AS INTEGER))
              FROM json_each(peers.info, '$.resources.prices'))),
        '$.resources.claimed_units',
        CAST(ROUND(json_extract(info, '$.resources.ntx_claimed') * 1000000) AS INTEGER))
    WHERE json_type(info, '$.resources') = 'object';
    """,
)

SCHEMA_VERSION = len(MIGRATIONS)


class WalletRow(NamedTuple):
    """The wallet's public half, as the ``wallet`` table keeps it (hashes in hex)."""

    chain: str
    payment_key_hash: str
    stake_key_hash: str
    origin: str  # "new" or "import"
    created_at: float


class Store:
    """One connection, used only from the engine's trio thread."""

    def __init__(self, path: Path, *, readonly: bool = False) -> None:
        """``readonly``: for a look from outside the engine (``nunet-tui log``): nothing is
        migrated or written, and a database that is not there is an error, not created."""
        self.path = path
        try:
            if readonly:
                # Read-only still makes the -wal and -shm files of a WAL database; when there
                # is no -wal (no engine has it open, nothing to replay) read it as immutable.
                wal = path.with_name(path.name + "-wal").exists()
                flags = "mode=ro" if wal else "immutable=1"
                uri = f"file:{urllib.parse.quote(str(path.resolve()))}?{flags}"
                self._db = sqlite3.connect(uri, uri=True, isolation_level=None, timeout=5.0)
            else:
                self._db = sqlite3.connect(path, isolation_level=None, timeout=5.0)
        except sqlite3.Error as exc:
            raise EngineError("store", f"cannot open the database {path}: {exc}") from exc
        self._db.row_factory = sqlite3.Row
        if readonly:
            return
        try:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.execute("PRAGMA foreign_keys=ON")
            self._migrate()
        except sqlite3.DatabaseError as exc:
            self._db.close()
            raise EngineError(
                "store",
                f"{path} is not a usable nunet-tui database ({exc}); move it away to start afresh",
            ) from exc
        except EngineError:
            self._db.close()
            raise

    def close(self) -> None:
        self._db.close()

    @property
    def schema_version(self) -> int:
        return int(self._db.execute("PRAGMA user_version").fetchone()[0])

    def _migrate(self) -> None:
        current = self.schema_version
        if current > SCHEMA_VERSION:
            raise EngineError(
                "store",
                f"{self.path} has schema version {current}, newer than this release "
                f"understands ({SCHEMA_VERSION}); upgrade nunet-tui",
            )
        for version in range(current, SCHEMA_VERSION):
            # One transaction per step: a crash mid-migration leaves the old version intact.
            self._db.execute("BEGIN IMMEDIATE")
            try:
                for statement in _statements(MIGRATIONS[version]):
                    self._db.execute(statement)
                self._db.execute(f"PRAGMA user_version = {version + 1}")
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise

    # --- key/value ------------------------------------------------------------------------

    def get_value(self, key: str) -> str | None:
        row = self._db.execute("SELECT value FROM node_kv WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row["value"])

    def set_value(self, key: str, value: str) -> None:
        self._db.execute(
            "INSERT INTO node_kv (key, value) VALUES (?, ?) "
            "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
            (key, value),
        )

    # --- onboarding -----------------------------------------------------------------------

    def get_onboarding(self) -> Onboarding | None:
        row = self._db.execute("SELECT * FROM onboarding WHERE id = 1").fetchone()
        if row is None:
            return None
        return Onboarding(
            memory_mb=row["memory_mb"],
            cpu_mhz=row["cpu_mhz"],
            channel=row["channel"],
            address=row["address"],
            local_discovery=bool(row["local_discovery"]),
            cardano_node=bool(row["cardano_node"]),
            gpus=tuple(json.loads(row["gpus"])),
            state=row["state"],
            onboarded_at=row["onboarded_at"],
            updated_at=row["updated_at"],
        )

    def save_onboarding(self, onboarding: Onboarding, action: str) -> None:
        """Write the onboarding and its history line in one transaction."""
        with self._transaction():
            self._db.execute(
                """
                INSERT INTO onboarding (id, memory_mb, cpu_mhz, channel, address,
                    local_discovery, cardano_node, gpus, state, onboarded_at, updated_at)
                VALUES (1, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                ON CONFLICT(id) DO UPDATE SET
                    memory_mb = excluded.memory_mb, cpu_mhz = excluded.cpu_mhz,
                    channel = excluded.channel, address = excluded.address,
                    local_discovery = excluded.local_discovery,
                    cardano_node = excluded.cardano_node, gpus = excluded.gpus,
                    state = excluded.state, onboarded_at = excluded.onboarded_at,
                    updated_at = excluded.updated_at
                """,
                (
                    onboarding.memory_mb,
                    onboarding.cpu_mhz,
                    onboarding.channel,
                    onboarding.address,
                    int(onboarding.local_discovery),
                    int(onboarding.cardano_node),
                    json.dumps(list(onboarding.gpus)),
                    onboarding.state,
                    onboarding.onboarded_at,
                    onboarding.updated_at,
                ),
            )
            self._history(action, onboarding)

    def delete_onboarding(self) -> None:
        with self._transaction():
            self._db.execute("DELETE FROM onboarding WHERE id = 1")
            self._history("offboard", None)

    def onboarding_history(self, limit: int = 50) -> list[tuple[float, str, str]]:
        rows = self._db.execute(
            "SELECT at, action, detail FROM onboarding_history ORDER BY id DESC LIMIT ?",
            (limit,),
        ).fetchall()
        return [(r["at"], r["action"], r["detail"]) for r in rows]

    # --- peers ----------------------------------------------------------------------------

    def save_peer(self, peer_id: str, channel: str, info_json: str, last_seen: float) -> None:
        self._db.execute(
            "INSERT INTO peers (peer_id, channel, info, last_seen) VALUES (?, ?, ?, ?) "
            "ON CONFLICT(peer_id) DO UPDATE SET channel = excluded.channel, "
            "info = excluded.info, last_seen = excluded.last_seen",
            (peer_id, channel, info_json, last_seen),
        )

    def prune_peers(self, before: float, keep: int) -> int:
        """Delete peers not heard from since ``before``, then all but the ``keep`` most
        recently heard; returns how many went. Issue 21: rows were never deleted, and 1,000
        fresh identities' adverts left 858 of them for good."""
        gone = self._db.execute("DELETE FROM peers WHERE last_seen < ?", (before,)).rowcount
        gone += self._db.execute(
            "DELETE FROM peers WHERE peer_id NOT IN "
            "(SELECT peer_id FROM peers ORDER BY last_seen DESC LIMIT ?)",
            (keep,),
        ).rowcount
        return int(gone)

    def forget_unverified_peer(self, peer_id: str) -> None:
        """A peer left the table that we never talked to: its row goes at once (fresh
        identities relayed by the thousand would otherwise wait for prune_peers)."""
        self._db.execute(
            "DELETE FROM peers WHERE peer_id = ? "
            "AND coalesce(json_extract(info, '$.verified'), 0) = 0",
            (peer_id,),
        )

    def providers_completed(self) -> set[str]:
        """Providers that completed a job for us: matching tries them first (issue 21)."""
        rows = self._db.execute(
            "SELECT DISTINCT json_extract(info, '$.provider') FROM jobs "
            "WHERE role = 'consumer' AND state = 'completed'"
        ).fetchall()
        return {str(r[0]) for r in rows if r[0]}

    # --- chat -----------------------------------------------------------------------------

    def add_chat_request(self, peer_id: str, conversation: str, at: float) -> bool:
        """Record an incoming request; False when it was already known (a repeat)."""
        cursor = self._db.execute(
            "INSERT INTO chat_requests (peer_id, conversation, at, state) "
            "VALUES (?, ?, ?, 'open') ON CONFLICT(peer_id, conversation) DO UPDATE SET "
            "at = excluded.at, state = 'open' WHERE chat_requests.state != 'open'",
            (peer_id, conversation, at),
        )
        return cursor.rowcount > 0

    def accept_chat(self, peer_id: str, conversation: str, at: float) -> None:
        """The user accepted a chat with ``peer_id`` (joined its request, started one, or
        wrote to it): its messages are stored from now on (issue 21)."""
        self._db.execute(
            "INSERT INTO chat_requests (peer_id, conversation, at, state) "
            "VALUES (?, ?, ?, 'joined') ON CONFLICT(peer_id, conversation) DO UPDATE SET "
            "state = 'joined'",
            (peer_id, conversation, at),
        )

    def chat_accepted(self, peer_id: str) -> bool:
        """Whether a chat with ``peer_id`` was accepted: a joined request, or any message
        kept (ours to it, or its, which are kept only once accepted)."""
        row = self._db.execute(
            "SELECT EXISTS (SELECT 1 FROM chat_requests WHERE peer_id = ? AND state = 'joined')"
            " OR EXISTS (SELECT 1 FROM chat_messages WHERE peer_id = ?)",
            (peer_id, peer_id),
        ).fetchone()
        return bool(row[0])

    def job_peers(self) -> set[str]:
        """Every peer we have a job with, either side (an escrow always has its job)."""
        rows = self._db.execute(
            "SELECT json_extract(info, '$.provider') AS p, json_extract(info, '$.consumer') AS c"
            " FROM jobs"
        ).fetchall()
        return {peer for r in rows for peer in (r["p"], r["c"]) if peer}

    def chat_requests(self, state: str = "open") -> list[tuple[int, str, str, float]]:
        rows = self._db.execute(
            "SELECT id, peer_id, conversation, at FROM chat_requests WHERE state = ? ORDER BY id",
            (state,),
        ).fetchall()
        return [(r["id"], r["peer_id"], r["conversation"], r["at"]) for r in rows]

    def chat_request(self, request_id: int) -> tuple[str, str, str] | None:
        row = self._db.execute(
            "SELECT peer_id, conversation, state FROM chat_requests WHERE id = ?", (request_id,)
        ).fetchone()
        return None if row is None else (row["peer_id"], row["conversation"], row["state"])

    def set_chat_request_state(self, request_id: int, state: str) -> None:
        self._db.execute("UPDATE chat_requests SET state = ? WHERE id = ?", (state, request_id))

    def clear_chat_requests(self) -> int:
        cursor = self._db.execute("UPDATE chat_requests SET state = 'cleared' WHERE state = 'open'")
        return cursor.rowcount

    def add_chat_message(
        self,
        peer_id: str,
        conversation: str,
        direction: str,
        seq: int | None,
        text: str,
        at: float,
        status: str,
    ) -> int | None:
        """Store one message; None when this (peer, conversation, direction, seq) is known."""
        cursor = self._db.execute(
            "INSERT OR IGNORE INTO chat_messages "
            "(peer_id, conversation, direction, seq, text, at, status) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)",
            (peer_id, conversation, direction, seq, text, at, status),
        )
        return cursor.lastrowid if cursor.rowcount else None

    def delete_chat_message(self, message_id: int) -> None:
        self._db.execute("DELETE FROM chat_messages WHERE id = ?", (message_id,))

    def mark_chat_delivered(self, message_id: int, seq: int, at: float) -> None:
        self._db.execute(
            "UPDATE chat_messages SET status = 'delivered', seq = ?, at = ? WHERE id = ?",
            (seq, at, message_id),
        )

    def chat_messages(
        self, peer_id: str, limit: int = 500
    ) -> list[tuple[int, str, str, int | None, str, float, str]]:
        """(id, conversation, direction, seq, text, at, status), oldest first."""
        rows = self._db.execute(
            "SELECT * FROM (SELECT id, conversation, direction, seq, text, at, status "
            "FROM chat_messages WHERE peer_id = ? ORDER BY id DESC LIMIT ?) ORDER BY id",
            (peer_id, limit),
        ).fetchall()
        return [
            (r["id"], r["conversation"], r["direction"], r["seq"], r["text"], r["at"], r["status"])
            for r in rows
        ]

    def queued_chat(self, peer_id: str) -> list[tuple[int, str, str]]:
        """(id, conversation, text) of messages waiting for the peer, in send order."""
        rows = self._db.execute(
            "SELECT id, conversation, text FROM chat_messages "
            "WHERE peer_id = ? AND status = 'queued' ORDER BY id",
            (peer_id,),
        ).fetchall()
        return [(r["id"], r["conversation"], r["text"]) for r in rows]

    def peers_with_queued_chat(self) -> list[str]:
        rows = self._db.execute(
            "SELECT DISTINCT peer_id FROM chat_messages WHERE status = 'queued'"
        ).fetchall()
        return [r["peer_id"] for r in rows]

    def chat_seq_floor(self, peer_id: str, conversation: str) -> int:
        row = self._db.execute(
            "SELECT MAX(seq) FROM chat_messages WHERE peer_id = ? AND conversation = ? "
            "AND direction = 'out'",
            (peer_id, conversation),
        ).fetchone()
        return int(row[0] or 0)

    def conversations(self) -> list[tuple[str, int, float]]:
        """(peer_id, message count, last message time), most recent first."""
        rows = self._db.execute(
            "SELECT peer_id, COUNT(*) AS n, MAX(at) AS last FROM chat_messages "
            "GROUP BY peer_id ORDER BY last DESC"
        ).fetchall()
        return [(r["peer_id"], r["n"], r["last"]) for r in rows]

    # --- jobs -----------------------------------------------------------------------------

    def save_job(self, job: JobInfo) -> None:
        self._db.execute(
            "INSERT INTO jobs (job_id, role, state, created_at, updated_at, info) "
            "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT(job_id) DO UPDATE SET "
            "state = excluded.state, updated_at = excluded.updated_at, info = excluded.info",
            (
                job.job_id,
                job.role,
                job.state,
                job.created_at,
                job.updated_at,
                msgspec.json.encode(job).decode(),
            ),
        )

    def get_job(self, job_id: str) -> JobInfo | None:
        row = self._db.execute("SELECT info FROM jobs WHERE job_id = ?", (job_id,)).fetchone()
        return None if row is None else msgspec.json.decode(row["info"], type=JobInfo)

    def list_jobs(self, states: tuple[str, ...] | None = None, limit: int = 500) -> list[JobInfo]:
        query = "SELECT info FROM jobs"
        args: tuple[object, ...] = ()
        if states:
            query += f" WHERE state IN ({','.join('?' * len(states))})"
            args = states
        rows = self._db.execute(query + " ORDER BY created_at DESC LIMIT ?", (*args, limit))
        return [msgspec.json.decode(r["info"], type=JobInfo) for r in rows.fetchall()]

    def job_summary(self) -> list[tuple[str, str, int, float, float]]:
        """Per role and state: (role, state, jobs, metered wall seconds, metered GPU seconds),
        one aggregate read for the metrics endpoint instead of decoding every job."""
        rows = self._db.execute(
            "SELECT role, state, COUNT(*), "
            "COALESCE(SUM(json_extract(info, '$.metering.wall_s')), 0), "
            "COALESCE(SUM(json_extract(info, '$.metering.gpu_s')), 0) "
            "FROM jobs GROUP BY role, state"
        )
        return [(str(r[0]), str(r[1]), int(r[2]), float(r[3]), float(r[4])) for r in rows]

    def record_job_message(self, job_id: str, direction: str, kind: str, body: bytes) -> None:
        """Every protocol message, kept before it is acted on (signed bytes, as received)."""
        self._db.execute(
            "INSERT INTO job_messages (job_id, direction, kind, body, at) VALUES (?, ?, ?, ?, ?)",
            (job_id, direction, kind, body, time.time()),
        )

    def job_messages(self, job_id: str) -> list[tuple[str, str, bytes]]:
        rows = self._db.execute(
            "SELECT direction, kind, body FROM job_messages WHERE job_id = ? ORDER BY id",
            (job_id,),
        ).fetchall()
        return [(r["direction"], r["kind"], bytes(r["body"])) for r in rows]

    # --- wallet (payments) ------------------------------------------------------------------

    def get_wallet(self) -> WalletRow | None:
        row = self._db.execute("SELECT * FROM wallet WHERE id = 1").fetchone()
        if row is None:
            return None
        return WalletRow(
            chain=row["chain"],
            payment_key_hash=row["payment_key_hash"],
            stake_key_hash=row["stake_key_hash"],
            origin=row["origin"],
            created_at=row["created_at"],
        )

    def save_wallet(self, wallet: WalletRow) -> None:
        """Insert or replace the one wallet (``wallet new --force`` replaces it)."""
        self._db.execute(
            "INSERT INTO wallet (id, chain, payment_key_hash, stake_key_hash, origin, created_at)"
            " VALUES (1, ?, ?, ?, ?, ?) ON CONFLICT(id) DO UPDATE SET chain = excluded.chain,"
            " payment_key_hash = excluded.payment_key_hash,"
            " stake_key_hash = excluded.stake_key_hash, origin = excluded.origin,"
            " created_at = excluded.created_at",
            (
                wallet.chain,
                wallet.payment_key_hash,
                wallet.stake_key_hash,
                wallet.origin,
                wallet.created_at,
            ),
        )

    # --- escrows (payments) -----------------------------------------------------------------
    # The row is a JSON document whose type belongs to engine/payments/escrow.py.

    def save_escrow(self, job_id: str, state: str, document: bytes) -> None:
        self._db.execute(
            "INSERT INTO escrows (job_id, state, updated_at, info) VALUES (?, ?, ?, ?) "
            "ON CONFLICT(job_id) DO UPDATE SET state = excluded.state, "
            "updated_at = excluded.updated_at, info = excluded.info",
            (job_id, state, time.time(), document.decode()),
        )

    def get_escrow(self, job_id: str) -> bytes | None:
        row = self._db.execute("SELECT info FROM escrows WHERE job_id = ?", (job_id,)).fetchone()
        return None if row is None else str(row["info"]).encode()

    def list_escrows(self, states: tuple[str, ...] | None = None) -> list[bytes]:
        query = "SELECT info FROM escrows"
        args: tuple[object, ...] = ()
        if states:
            query += f" WHERE state IN ({','.join('?' * len(states))})"
            args = states
        rows = self._db.execute(query + " ORDER BY updated_at DESC", args).fetchall()
        return [str(r["info"]).encode() for r in rows]

    def _history(self, action: str, onboarding: Onboarding | None) -> None:
        detail = (
            ""
            if onboarding is None
            else f"{onboarding.memory_mb} MB, {onboarding.cpu_mhz} MHz, {onboarding.channel}"
        )
        self._db.execute(
            "INSERT INTO onboarding_history (at, action, detail) VALUES (?, ?, ?)",
            (time.time(), action, detail),
        )

    def _transaction(self) -> _Transaction:
        return _Transaction(self._db)


class _Transaction:
    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db

    def __enter__(self) -> None:
        self._db.execute("BEGIN IMMEDIATE")

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        self._db.execute("COMMIT" if exc_type is None else "ROLLBACK")


def _statements(script: str) -> list[str]:
    return [part.strip() for part in script.split(";") if part.strip()]


def consumer_reputations(store: Store) -> dict[str, Reputation]:
    """Each provider's record with this node (engine/domain/reputation.py): our consumer
    jobs and our escrows, nothing a provider says."""
    jobs = [j for j in store.list_jobs(limit=100_000) if j.role == "consumer"]
    escrows = {}
    for raw in store.list_escrows():
        with contextlib.suppress(msgspec.DecodeError):
            escrow = msgspec.json.decode(raw, type=EscrowInfo)
            if escrow.role == "consumer":
                escrows[escrow.job_id] = escrow
    return reputations(jobs, escrows)
