"""The ledger's state in SQLite (a real file, WAL): UTxOs, transactions, blocks, faucet audit.

Every write runs in a `BEGIN IMMEDIATE` transaction, and spending marks each input with a
conditional UPDATE (`spent_by IS NULL`), so a double spend is impossible even when a faucet CLI
process writes to the same file as the server. Reads use short-lived connections: WAL lets them
run beside a writer.
"""

from __future__ import annotations

import json
import os
import queue
import secrets
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nacl.encoding import RawEncoder
from nacl.hash import blake2b
from pycardano.address import Address
from pycardano.cbor import cbor2
from pycardano.hash import SCRIPT_HASH_SIZE, ScriptHash
from pycardano.key import PaymentSigningKey
from pycardano.nativescript import ScriptPubkey
from pycardano.network import Network
from pycardano.plutus import PlutusScript, script_hash
from pycardano.serialization import default_encoder
from pycardano.transaction import (
    Asset,
    AssetName,
    MultiAsset,
    TransactionInput,
    TransactionOutput,
    UTxO,
    Value,
)
from pycardano.utils import min_lovelace_post_alonzo

from oracle_client.ledger.params import SYSTEM_START, ParamsContext

NTX_ASSET_NAME = b"NTX"
# Faucet bounds: a local ledger, but a typo must not create a number SQLite cannot hold.
MAX_FAUCET_LOVELACE = 1_000_000_000 * 1_000_000  # 1e9 ADA
MAX_FAUCET_NTX = 1_000_000_000_000 * 1_000_000  # 1e12 NTX in base units

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS blocks(
    height INTEGER PRIMARY KEY, hash TEXT UNIQUE NOT NULL, slot INTEGER NOT NULL,
    time INTEGER NOT NULL, tx_hash TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS txs(
    hash TEXT PRIMARY KEY, block_height INTEGER NOT NULL, kind TEXT NOT NULL,
    cbor BLOB, fee INTEGER NOT NULL, size INTEGER NOT NULL,
    invalid_before INTEGER, invalid_hereafter INTEGER, redeemer_count INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS utxos(
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    tx_hash TEXT NOT NULL, output_index INTEGER NOT NULL, address TEXT NOT NULL,
    lovelace INTEGER NOT NULL, assets TEXT NOT NULL, datum_hash TEXT, inline_datum TEXT,
    script_ref_hash TEXT, output_cbor BLOB NOT NULL, block_height INTEGER NOT NULL,
    spent_by TEXT, UNIQUE(tx_hash, output_index));
CREATE INDEX IF NOT EXISTS utxos_by_address ON utxos(address, spent_by, id);
CREATE TABLE IF NOT EXISTS tx_addresses(
    address TEXT NOT NULL, tx_hash TEXT NOT NULL, block_height INTEGER NOT NULL,
    PRIMARY KEY(address, tx_hash));
CREATE TABLE IF NOT EXISTS scripts(hash TEXT PRIMARY KEY, type TEXT NOT NULL, cbor BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS faucet_audit(
    id INTEGER PRIMARY KEY AUTOINCREMENT, at_ms INTEGER NOT NULL, address TEXT NOT NULL,
    lovelace INTEGER NOT NULL, ntx INTEGER NOT NULL, tx_hash TEXT NOT NULL, note TEXT NOT NULL);
"""


class DoubleSpend(Exception):
    """An input was spent by another transaction between validation and commit."""


def blake2b_256(data: bytes) -> bytes:
    return bytes(blake2b(data, digest_size=32, encoder=RawEncoder))


def blake2b_224(data: bytes) -> bytes:
    """Key hashes and script hashes."""
    return bytes(blake2b(data, digest_size=28, encoder=RawEncoder))


@dataclass(frozen=True)
class StoredUtxo:
    id: int
    tx_hash: str
    output_index: int
    address: str
    lovelace: int
    assets: dict[str, int]  # unit (policy hex + asset name hex) -> quantity
    datum_hash: str | None
    inline_datum: str | None  # CBOR hex
    script_ref_hash: str | None
    output_cbor: bytes
    block_hash: str
    spent_by: str | None

    def to_utxo(self) -> UTxO:
        return UTxO(
            TransactionInput.from_primitive([self.tx_hash, self.output_index]),
            TransactionOutput.from_cbor(self.output_cbor),
        )


@dataclass(frozen=True)
class TxRecord:
    hash: str
    block_height: int
    block_hash: str
    slot: int
    time: int
    kind: str  # "tx" or "faucet"
    cbor: bytes | None
    fee: int
    size: int
    invalid_before: int | None
    invalid_hereafter: int | None
    redeemer_count: int


@dataclass(frozen=True)
class NewTx:
    """What the validator hands to `apply`: everything already checked."""

    hash: str
    cbor: bytes
    inputs: Sequence[tuple[str, int]]
    input_addresses: Sequence[str]
    outputs: Sequence[TransactionOutput]
    fee: int
    invalid_before: int | None
    invalid_hereafter: int | None
    redeemer_count: int


def asset_unit(policy_id: bytes, asset_name: bytes) -> str:
    return policy_id.hex() + asset_name.hex()


def output_assets(output: TransactionOutput) -> dict[str, int]:
    out: dict[str, int] = {}
    for policy, assets in output.amount.multi_asset.items():
        for name, qty in assets.items():
            out[asset_unit(policy.payload, name.payload)] = int(qty)
    return out


def _inline_datum_cbor(output: TransactionOutput) -> bytes | None:
    if output.datum is None:
        return None
    return bytes(cbor2.dumps(output.datum, default=default_encoder))


class LedgerState:
    """One SQLite file. Safe to share between the server's threads."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._write_lock = threading.Lock()
        self._pool: queue.SimpleQueue[sqlite3.Connection] = queue.SimpleQueue()
        with self._read() as db:
            db.execute("PRAGMA journal_mode=WAL")
            db.executescript(_SCHEMA)
        self._init_meta()
        self.policy_id = bytes.fromhex(self.meta("ntx_policy_id"))
        self.system_start = int(self.meta("system_start"))
        self.ntx_unit = asset_unit(self.policy_id, NTX_ASSET_NAME)
        self._params_ctx = ParamsContext(self.system_start)

    # -- connections -------------------------------------------------------------------------

    def _connect(self) -> sqlite3.Connection:
        # isolation_level=None: we issue BEGIN ourselves, so writes are explicit and atomic.
        # check_same_thread=False: pooled, but only ever used by one thread at a time.
        db = sqlite3.connect(self.path, timeout=10.0, isolation_level=None, check_same_thread=False)
        db.execute("PRAGMA busy_timeout=10000")
        db.execute("PRAGMA synchronous=NORMAL")  # WAL + NORMAL: durable across app crashes
        db.row_factory = sqlite3.Row
        return db

    @contextmanager
    def _pooled(self) -> Iterator[sqlite3.Connection]:
        # Connections are kept open: closing the last one checkpoints the WAL (~10 ms a call).
        try:
            db = self._pool.get_nowait()
        except queue.Empty:
            db = self._connect()
        try:
            yield db
        finally:
            if db.in_transaction:  # never hand on a connection mid-transaction
                db.execute("ROLLBACK")
            self._pool.put(db)

    @contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        with self._pooled() as db:
            yield db

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        with self._write_lock, self._pooled() as db:
            db.execute("BEGIN IMMEDIATE")
            try:
                yield db
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")

    def close(self) -> None:
        """Close the pooled connections (the server calls this when it stops)."""
        while True:
            try:
                self._pool.get_nowait().close()
            except queue.Empty:
                return

    def _init_meta(self) -> None:
        with self._write() as db:
            have = {r["key"] for r in db.execute("SELECT key FROM meta")}
            if "ntx_policy_id" not in have:
                # The NTX policy is this ledger's own: the hash of a native script over a fresh
                # key. Only the faucet creates NTX (transactions may not mint), so the key
                # itself is not kept: nobody can mint NTX on this ledger any other way.
                skey = PaymentSigningKey.generate()
                policy = script_hash(ScriptPubkey(skey.to_verification_key().hash()))
                db.execute("INSERT INTO meta VALUES('ntx_policy_id', ?)", (policy.payload.hex(),))
            if "system_start" not in have:
                db.execute("INSERT INTO meta VALUES('system_start', ?)", (str(SYSTEM_START),))
            if "genesis_hash" not in have:
                db.execute("INSERT INTO meta VALUES('genesis_hash', ?)", (secrets.token_hex(32),))

    def meta(self, key: str) -> str:
        with self._read() as db:
            row = db.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
        if row is None:
            raise KeyError(key)
        return str(row["value"])

    # -- reads -------------------------------------------------------------------------------

    @staticmethod
    def _utxo_from_row(row: sqlite3.Row) -> StoredUtxo:
        return StoredUtxo(
            id=int(row["id"]),
            tx_hash=row["tx_hash"],
            output_index=int(row["output_index"]),
            address=row["address"],
            lovelace=int(row["lovelace"]),
            assets={k: int(v) for k, v in json.loads(row["assets"]).items()},
            datum_hash=row["datum_hash"],
            inline_datum=row["inline_datum"],
            script_ref_hash=row["script_ref_hash"],
            output_cbor=bytes(row["output_cbor"]),
            block_hash=row["block_hash"],
            spent_by=row["spent_by"],
        )

    _UTXO_SELECT = (
        "SELECT u.*, b.hash AS block_hash FROM utxos u JOIN blocks b ON b.height = u.block_height "
    )

    def get_utxo(self, tx_hash: str, index: int) -> StoredUtxo | None:
        """The output, spent or not (the caller checks `spent_by`)."""
        with self._read() as db:
            row = db.execute(
                self._UTXO_SELECT + "WHERE u.tx_hash=? AND u.output_index=?", (tx_hash, index)
            ).fetchone()
        return None if row is None else self._utxo_from_row(row)

    def address_known(self, address: str) -> bool:
        with self._read() as db:
            row = db.execute("SELECT 1 FROM tx_addresses WHERE address=? LIMIT 1", (address,))
            return row.fetchone() is not None

    def unspent_at(
        self, address: str, *, count: int, page: int, desc: bool, unit: str | None = None
    ) -> list[StoredUtxo]:
        """One page of an address's unspent outputs, oldest first unless `desc`."""
        order = "DESC" if desc else "ASC"
        where = "WHERE u.address=? AND u.spent_by IS NULL "
        args: list[Any] = [address]
        if unit:
            # `unit` is validated hex by the server; quoted, it can only match a key of the JSON.
            where += "AND instr(u.assets, ?) > 0 "
            args.append(f'"{unit}"')
        with self._read() as db:
            rows = db.execute(
                self._UTXO_SELECT + where + f"ORDER BY u.id {order} LIMIT ? OFFSET ?",
                (*args, count, (page - 1) * count),
            ).fetchall()
        return [self._utxo_from_row(r) for r in rows]

    def address_totals(self, address: str) -> tuple[dict[str, int], dict[str, int], int]:
        """(received, sent, tx_count); amounts keyed by unit, "lovelace" included."""
        received: dict[str, int] = {"lovelace": 0}
        sent: dict[str, int] = {"lovelace": 0}
        with self._read() as db:
            for row in db.execute(
                "SELECT lovelace, assets, spent_by FROM utxos WHERE address=?", (address,)
            ):
                for bucket in (received, sent) if row["spent_by"] else (received,):
                    bucket["lovelace"] += int(row["lovelace"])
                    for unit, qty in json.loads(row["assets"]).items():
                        bucket[unit] = bucket.get(unit, 0) + int(qty)
            tx_count = db.execute(
                "SELECT COUNT(*) FROM tx_addresses WHERE address=?", (address,)
            ).fetchone()[0]
        return received, sent, int(tx_count)

    def balance(self, address: str) -> dict[str, int]:
        """Unspent amounts at an address, keyed by unit ("lovelace" first)."""
        total: dict[str, int] = {"lovelace": 0}
        with self._read() as db:
            for row in db.execute(
                "SELECT lovelace, assets FROM utxos WHERE address=? AND spent_by IS NULL",
                (address,),
            ):
                total["lovelace"] += int(row["lovelace"])
                for unit, qty in json.loads(row["assets"]).items():
                    total[unit] = total.get(unit, 0) + int(qty)
        return total

    def address_txs(
        self, address: str, *, count: int, page: int, desc: bool
    ) -> list[tuple[str, int, int]]:
        """(tx_hash, block_height, block_time) of transactions touching the address."""
        order = "DESC" if desc else "ASC"
        with self._read() as db:
            rows = db.execute(
                "SELECT a.tx_hash, a.block_height, b.time FROM tx_addresses a "
                "JOIN blocks b ON b.height = a.block_height WHERE a.address=? "
                f"ORDER BY a.block_height {order} LIMIT ? OFFSET ?",
                (address, count, (page - 1) * count),
            ).fetchall()
        return [(r[0], int(r[1]), int(r[2])) for r in rows]

    def get_tx(self, tx_hash: str) -> TxRecord | None:
        with self._read() as db:
            row = db.execute(
                "SELECT t.*, b.hash AS block_hash, b.slot, b.time FROM txs t "
                "JOIN blocks b ON b.height = t.block_height WHERE t.hash=?",
                (tx_hash,),
            ).fetchone()
        if row is None:
            return None
        return TxRecord(
            hash=row["hash"],
            block_height=int(row["block_height"]),
            block_hash=row["block_hash"],
            slot=int(row["slot"]),
            time=int(row["time"]),
            kind=row["kind"],
            cbor=None if row["cbor"] is None else bytes(row["cbor"]),
            fee=int(row["fee"]),
            size=int(row["size"]),
            invalid_before=row["invalid_before"],
            invalid_hereafter=row["invalid_hereafter"],
            redeemer_count=int(row["redeemer_count"]),
        )

    def tx_outputs(self, tx_hash: str) -> list[StoredUtxo]:
        with self._read() as db:
            rows = db.execute(
                self._UTXO_SELECT + "WHERE u.tx_hash=? ORDER BY u.output_index", (tx_hash,)
            ).fetchall()
        return [self._utxo_from_row(r) for r in rows]

    def tx_inputs(self, tx_hash: str) -> list[StoredUtxo]:
        with self._read() as db:
            rows = db.execute(
                self._UTXO_SELECT + "WHERE u.spent_by=? ORDER BY u.id", (tx_hash,)
            ).fetchall()
        return [self._utxo_from_row(r) for r in rows]

    def latest_block(self) -> tuple[int, str, int, int, str] | None:
        """(height, hash, slot, time, tx_hash) of the newest block, None before the first."""
        with self._read() as db:
            row = db.execute("SELECT * FROM blocks ORDER BY height DESC LIMIT 1").fetchone()
        if row is None:
            return None
        return int(row["height"]), row["hash"], int(row["slot"]), int(row["time"]), row["tx_hash"]

    def block_count(self) -> int:
        with self._read() as db:
            return int(db.execute("SELECT COUNT(*) FROM blocks").fetchone()[0])

    def script(self, script_hash_hex: str) -> tuple[str, bytes] | None:
        """(type, cbor) of a script seen as a reference script."""
        with self._read() as db:
            row = db.execute(
                "SELECT type, cbor FROM scripts WHERE hash=?", (script_hash_hex,)
            ).fetchone()
        return None if row is None else (row["type"], bytes(row["cbor"]))

    def faucet_audit(self) -> list[dict[str, Any]]:
        with self._read() as db:
            rows = db.execute("SELECT * FROM faucet_audit ORDER BY id").fetchall()
        return [dict(r) for r in rows]

    # -- writes ------------------------------------------------------------------------------

    def _new_block(self, db: sqlite3.Connection, tx_hash: str, slot: int, time_s: int) -> int:
        """Every accepted transaction (and faucet drop) is a block of its own."""
        row = db.execute("SELECT height, hash FROM blocks ORDER BY height DESC LIMIT 1").fetchone()
        height = 1 if row is None else int(row["height"]) + 1
        prev = b"" if row is None else bytes.fromhex(row["hash"])
        block_hash = blake2b_256(prev + bytes.fromhex(tx_hash)).hex()
        db.execute(
            "INSERT INTO blocks(height, hash, slot, time, tx_hash) VALUES(?,?,?,?,?)",
            (height, block_hash, slot, time_s, tx_hash),
        )
        return height

    def _insert_output(
        self, db: sqlite3.Connection, tx_hash: str, index: int, out: TransactionOutput, height: int
    ) -> str:
        address = str(out.address)
        inline = _inline_datum_cbor(out)
        d_hash: str | None = None
        if inline is not None:
            d_hash = blake2b_256(inline).hex()
        elif out.datum_hash is not None:
            d_hash = out.datum_hash.payload.hex()
        ref_hash: str | None = None
        if out.script is not None:
            ref_hash = script_hash(out.script).payload.hex()
            if isinstance(out.script, PlutusScript):
                kind, body = f"plutusV{out.script.version}", bytes(out.script)
            else:
                kind, body = "timelock", out.script.to_cbor()
            db.execute("INSERT OR IGNORE INTO scripts VALUES(?,?,?)", (ref_hash, kind, body))
        db.execute(
            "INSERT INTO utxos(tx_hash, output_index, address, lovelace, assets, datum_hash,"
            " inline_datum, script_ref_hash, output_cbor, block_height)"
            " VALUES(?,?,?,?,?,?,?,?,?,?)",
            (
                tx_hash,
                index,
                address,
                int(out.amount.coin),
                json.dumps({k: str(v) for k, v in output_assets(out).items()}),
                d_hash,
                None if inline is None else inline.hex(),
                ref_hash,
                out.to_cbor(),
                height,
            ),
        )
        return address

    @staticmethod
    def _touch(db: sqlite3.Connection, addresses: set[str], tx_hash: str, height: int) -> None:
        db.executemany(
            "INSERT OR IGNORE INTO tx_addresses VALUES(?,?,?)",
            [(a, tx_hash, height) for a in sorted(addresses)],
        )

    def apply(self, tx: NewTx, slot: int, time_s: int) -> int:
        """Commit a validated transaction; returns its block height. Raises DoubleSpend."""
        with self._write() as db:
            if db.execute("SELECT 1 FROM txs WHERE hash=?", (tx.hash,)).fetchone():
                raise DoubleSpend(f"transaction {tx.hash} is already on the ledger")
            height = self._new_block(db, tx.hash, slot, time_s)
            for tx_hash, index in tx.inputs:
                cur = db.execute(
                    "UPDATE utxos SET spent_by=? WHERE tx_hash=? AND output_index=?"
                    " AND spent_by IS NULL",
                    (tx.hash, tx_hash, index),
                )
                if cur.rowcount != 1:
                    raise DoubleSpend(f"input {tx_hash}#{index} is already spent")
            touched = set(tx.input_addresses)
            for i, out in enumerate(tx.outputs):
                touched.add(self._insert_output(db, tx.hash, i, out, height))
            db.execute(
                "INSERT INTO txs VALUES(?,?,?,?,?,?,?,?,?)",
                (
                    tx.hash,
                    height,
                    "tx",
                    tx.cbor,
                    tx.fee,
                    len(tx.cbor),
                    tx.invalid_before,
                    tx.invalid_hereafter,
                    tx.redeemer_count,
                ),
            )
            self._touch(db, touched, tx.hash, height)
        return height

    def faucet(
        self,
        address: str,
        lovelace: int,
        ntx: int,
        *,
        slot: int,
        time_s: int,
        note: str = "",
    ) -> tuple[str, int]:
        """Create one UTxO out of thin air (ADA and NTX), with an audit row.

        An output carrying NTX needs min ADA: `lovelace` is raised to it when lower. Returns
        (tx_hash, lovelace actually created).
        """
        try:
            addr = Address.from_primitive(address)
        except Exception as exc:  # pycardano raises several types for a bad string
            raise ValueError(f"not a Cardano address: {address!r}") from exc
        if addr.network != Network.TESTNET:
            raise ValueError("the local ledger only holds testnet addresses")
        if not (0 <= lovelace <= MAX_FAUCET_LOVELACE):
            raise ValueError(f"lovelace must be within 0..{MAX_FAUCET_LOVELACE}")
        if not (0 <= ntx <= MAX_FAUCET_NTX):
            raise ValueError(f"NTX base units must be within 0..{MAX_FAUCET_NTX}")
        if lovelace == 0 and ntx == 0:
            raise ValueError("nothing to create: give ADA, NTX or both")
        multi = MultiAsset()
        if ntx:
            multi[ScriptHash(self.policy_id[:SCRIPT_HASH_SIZE])] = Asset(
                {AssetName(NTX_ASSET_NAME): ntx}
            )
        out = TransactionOutput(addr, Value(lovelace, multi))
        need = min_lovelace_post_alonzo(out, self._params_ctx)
        if out.amount.coin < need:
            out = TransactionOutput(addr, Value(need, multi))
        tx_hash = blake2b_256(
            b"nunet-ledger faucet" + secrets.token_bytes(16) + str(addr).encode()
        ).hex()
        with self._write() as db:
            height = self._new_block(db, tx_hash, slot, time_s)
            self._insert_output(db, tx_hash, 0, out, height)
            db.execute(
                "INSERT INTO txs VALUES(?,?,?,?,?,?,?,?,?)",
                (tx_hash, height, "faucet", None, 0, 0, None, None, 0),
            )
            self._touch(db, {str(addr)}, tx_hash, height)
            db.execute(
                "INSERT INTO faucet_audit(at_ms, address, lovelace, ntx, tx_hash, note)"
                " VALUES(?,?,?,?,?,?)",
                (time_s * 1000, str(addr), int(out.amount.coin), ntx, tx_hash, note[:200]),
            )
        return tx_hash, int(out.amount.coin)


__all__ = [
    "NTX_ASSET_NAME",
    "DoubleSpend",
    "LedgerState",
    "NewTx",
    "StoredUtxo",
    "TxRecord",
    "asset_unit",
    "blake2b_224",
    "blake2b_256",
]
