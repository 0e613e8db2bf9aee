"""The wallet's recharges: NTX that arrived from outside this node's escrows, read from the
chain backend's Blockfrost API (``GET /addresses/{address}/transactions`` newest first, then
``GET /txs/{hash}/utxos`` of each).

A transaction is a recharge when the wallet gained NTX in it (its outputs to the wallet carry
more than its inputs from the wallet) and it spends no escrow: a refund or a split coming
back spends the escrow script (or one of this node's own locks) and is already counted as
"refunded" or "paid". The backend is a peer like any other: every read is bounded (page
size, pages, bytes, time) and every field is checked before it is used.

Blocking HTTP: run it in a thread.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Collection, MutableMapping
from dataclasses import dataclass
from typing import Any

import httpx
import msgspec

from engine import api
from engine.errors import EngineError

PAGE_SIZE = 100  # Blockfrost's largest page
REQUEST_TIMEOUT_S = 10.0
TOTAL_TIMEOUT_S = 60.0
MAX_REPLY_BYTES = 2 << 20  # one page of 100 hashes is ~15 KiB; a tx's UTxOs far less
MAX_UTXOS = 1000  # inputs or outputs of one transaction (a Cardano tx holds far fewer)
MAX_ASSETS = 256  # units in one output's amount
MAX_FROM = 4  # sender addresses kept per recharge
MAX_CACHED = 10_000  # verdicts kept between calls
_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_ADDRESS = re.compile(r"^[a-z0-9_]{1,200}$")
_UNIT = re.compile(r"^(lovelace|[0-9a-f]{56}(?:[0-9a-f]{2}){0,32})$")
_QUANTITY = re.compile(r"^[0-9]{1,40}$")


class BadAnswer(Exception):
    """The backend's answer is not what Blockfrost documents."""


@dataclass(frozen=True)
class Backend:
    """Where the Blockfrost API is (``.../api``, as for BlockFrostChainContext) and its key."""

    base_url: str
    project_id: str


@dataclass(frozen=True)
class Utxo:
    address: str
    tx_hash: str  # the transaction that made it (inputs only)
    ntx: int


Getter = Callable[[str, dict[str, str | int]], Any]


def http_getter(backend: Backend, deadline: float) -> tuple[Getter, Callable[[], None]]:
    """GET a Blockfrost path as JSON, bounded in bytes and time; None for a 404."""
    client = httpx.Client(
        base_url=backend.base_url.rstrip("/") + "/v0",
        headers={"project_id": backend.project_id},
        timeout=REQUEST_TIMEOUT_S,
    )

    def get(path: str, params: dict[str, str | int]) -> Any:
        if time.monotonic() > deadline:
            raise EngineError(
                "chain",
                f"reading the wallet's transactions from {backend.base_url} took over "
                f"{TOTAL_TIMEOUT_S:.0f} s; ask again with a smaller --limit",
            )
        try:
            with client.stream("GET", path, params=params) as response:
                if response.status_code == 404:
                    return None
                body = bytearray()
                for chunk in response.iter_bytes():
                    body += chunk
                    if len(body) > MAX_REPLY_BYTES:
                        raise BadAnswer(f"{path}: more than {MAX_REPLY_BYTES} bytes")
                if response.status_code != 200:
                    raise EngineError(
                        "chain",
                        f"{backend.base_url} answered {response.status_code} to GET {path}",
                    )
        except httpx.HTTPError as exc:
            raise EngineError(
                "chain", f"cannot reach the chain backend at {backend.base_url}: {exc}"
            ) from None
        try:
            return msgspec.json.decode(bytes(body))
        except msgspec.DecodeError as exc:
            raise BadAnswer(f"{path}: not JSON ({exc})") from None

    return get, client.close


def recharges(
    get: Getter,
    address: str,
    ntx_unit: str,
    *,
    is_escrow: Callable[[str], bool],
    own_locks: Collection[str] = (),
    limit: int = 200,
    backend_name: str = "",
    cache: MutableMapping[str, api.Recharge | None] | None = None,
) -> api.RechargeList:
    """The recharges among the ``limit`` newest transactions of ``address``; ``cache`` keeps
    each transaction's verdict between calls (the account view reads again on each escrow
    change)."""
    hashes: list[tuple[str, int]] = []
    exhausted = False  # the backend has no older transaction than those read
    page = 1
    while len(hashes) < limit:
        rows = get(
            f"/addresses/{address}/transactions",
            {"count": PAGE_SIZE, "page": page, "order": "desc"},
        )
        if rows is None:  # Blockfrost: an address never seen on chain
            exhausted = True
            break
        found = _tx_rows(rows)
        hashes += found
        if len(found) < PAGE_SIZE:
            exhausted = True
            break
        page += 1
    complete = exhausted and len(hashes) <= limit
    hashes = hashes[:limit]
    out: list[api.Recharge] = []
    seen: set[str] = set()
    for tx_hash, at in hashes:
        if tx_hash in seen:  # a hostile backend may list one twice
            continue
        seen.add(tx_hash)
        key = f"{address}:{tx_hash}"
        if cache is not None and key in cache:
            verdict = cache[key]  # a transaction on chain never changes: read once
        else:
            verdict = _classify(get, address, ntx_unit, tx_hash, at, is_escrow, own_locks)
            if cache is not None:
                if len(cache) >= MAX_CACHED:
                    cache.clear()
                cache[key] = verdict
        if verdict is not None:
            out.append(verdict)
    return api.RechargeList(
        address=address,
        backend=backend_name,
        recharges=tuple(out),
        recharged_units=sum(r.amount_units for r in out),
        scanned=len(seen),
        complete=complete,
    )


def _classify(
    get: Getter,
    address: str,
    ntx_unit: str,
    tx_hash: str,
    at: int,
    is_escrow: Callable[[str], bool],
    own_locks: Collection[str],
) -> api.Recharge | None:
    """The recharge ``tx_hash`` is for ``address``, or None (not one)."""
    answer = get(f"/txs/{tx_hash}/utxos", {})
    if answer is None:
        raise BadAnswer(f"transaction {tx_hash} is listed but not found")
    inputs, outputs = _tx_utxos(answer, tx_hash, ntx_unit)
    if any(is_escrow(u.address) or u.tx_hash in own_locks for u in inputs):
        return None  # an escrow spent: a refund or a split, counted as such
    gained = sum(u.ntx for u in outputs if u.address == address) - sum(
        u.ntx for u in inputs if u.address == address
    )
    if gained <= 0:
        return None
    senders = sorted({u.address for u in inputs if u.address != address})
    return api.Recharge(
        tx_hash=tx_hash,
        at=float(at),
        amount_units=gained,
        from_addresses=tuple(senders[:MAX_FROM]),
    )


def script_address_matcher(script_hash: bytes) -> Callable[[str], bool]:
    """Whether an address's payment part is the script ``script_hash`` (any stake part)."""
    from pycardano import Address, ScriptHash

    def matches(text: str) -> bool:
        try:
            payment = Address.from_primitive(text).payment_part
        except Exception:  # pycardano raises several types for a bad string
            return False
        return isinstance(payment, ScriptHash) and payment.payload == script_hash

    return matches


def _tx_rows(rows: Any) -> list[tuple[str, int]]:
    if not isinstance(rows, list) or len(rows) > PAGE_SIZE:
        raise BadAnswer("an address's transactions: not a list of at most one page")
    found: list[tuple[str, int]] = []
    for row in rows:
        if not isinstance(row, dict):
            raise BadAnswer("an address's transactions: an entry is not an object")
        tx_hash, at = row.get("tx_hash"), row.get("block_time")
        if not isinstance(tx_hash, str) or not _HEX64.match(tx_hash):
            raise BadAnswer("an address's transactions: tx_hash is not 64 hex digits")
        if not isinstance(at, int) or not _whole(at):
            raise BadAnswer(f"transaction {tx_hash}: block_time is not a whole number")
        found.append((tx_hash, at))
    return found


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**40


def _tx_utxos(answer: Any, tx_hash: str, ntx_unit: str) -> tuple[list[Utxo], list[Utxo]]:
    if not isinstance(answer, dict) or answer.get("hash") != tx_hash:
        raise BadAnswer(f"transaction {tx_hash}: its UTxOs answer names another transaction")
    sides = []
    for side in ("inputs", "outputs"):
        rows = answer.get(side)
        if not isinstance(rows, list) or len(rows) > MAX_UTXOS:
            raise BadAnswer(f"transaction {tx_hash}: {side} is not a list of at most {MAX_UTXOS}")
        kept = []
        for row in rows:
            if not isinstance(row, dict):
                raise BadAnswer(f"transaction {tx_hash}: an entry of {side} is not an object")
            # Collateral is spent only by a failed script, reference inputs never: neither
            # moved NTX in a transaction the chain accepted.
            if row.get("collateral") is True or row.get("reference") is True:
                continue
            address = row.get("address")
            if not isinstance(address, str) or not _ADDRESS.match(address):
                raise BadAnswer(f"transaction {tx_hash}: an address in {side} is malformed")
            source = row.get("tx_hash", "") if side == "inputs" else ""
            if not isinstance(source, str) or (side == "inputs" and not _HEX64.match(source)):
                raise BadAnswer(f"transaction {tx_hash}: an input's tx_hash is malformed")
            kept.append(Utxo(address, source, _ntx_of(row.get("amount"), tx_hash, ntx_unit)))
        sides.append(kept)
    return sides[0], sides[1]


def _ntx_of(amount: Any, tx_hash: str, ntx_unit: str) -> int:
    if not isinstance(amount, list) or len(amount) > MAX_ASSETS:
        raise BadAnswer(f"transaction {tx_hash}: an amount is not a list of at most {MAX_ASSETS}")
    total = 0
    for entry in amount:
        if not isinstance(entry, dict):
            raise BadAnswer(f"transaction {tx_hash}: an amount entry is not an object")
        unit, quantity = entry.get("unit"), entry.get("quantity")
        if not isinstance(unit, str) or not _UNIT.match(unit):
            raise BadAnswer(f"transaction {tx_hash}: a unit is malformed")
        if not isinstance(quantity, str) or not _QUANTITY.match(quantity):
            raise BadAnswer(f"transaction {tx_hash}: a quantity is not a whole number")
        if unit == ntx_unit:
            total += int(quantity)
    return total


def read_recharges(
    backend: Backend,
    address: str,
    ntx_unit: str,
    *,
    is_escrow: Callable[[str], bool],
    own_locks: Collection[str] = (),
    limit: int = 200,
    backend_name: str = "",
    cache: MutableMapping[str, api.Recharge | None] | None = None,
) -> api.RechargeList:
    """``recharges`` over HTTP; a malformed answer is one line naming the backend."""
    get, close = http_getter(backend, time.monotonic() + TOTAL_TIMEOUT_S)
    try:
        return recharges(
            get,
            address,
            ntx_unit,
            is_escrow=is_escrow,
            own_locks=own_locks,
            limit=limit,
            backend_name=backend_name,
            cache=cache,
        )
    except BadAnswer as exc:
        raise EngineError(
            "chain", f"the chain backend at {backend.base_url} sent an unusable answer: {exc}"
        ) from None
    finally:
        close()
