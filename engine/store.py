"""The node's SQLite file: the source of truth, and the only module that writes SQL.

WAL mode so readers (a status command, the TUI) never wait on the writer. The schema is a list
of migrations applied in order and recorded in ``PRAGMA user_version``; a database written by
a newer release is refused rather than silently misread.
"""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path

from engine.api import Onboarding
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
)

SCHEMA_VERSION = len(MIGRATIONS)


class Store:
    """One connection, used only from the engine's trio thread."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            self._db = sqlite3.connect(path, isolation_level=None, timeout=5.0)
        except sqlite3.Error as exc:
            raise EngineError("store", f"cannot open the database {path}: {exc}") from exc
        self._db.row_factory = sqlite3.Row
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
