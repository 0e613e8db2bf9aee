"""nunet-ledger's HTTP server: the subset of the Blockfrost API pycardano uses, on 127.0.0.1.

    with start_server("ledger.db") as ledger:          # a daemon thread, a free port
        ctx = BlockFrostChainContext("local", base_url=ledger.url)
        ledger.faucet(address, ada=100, ntx=50)
        ledger.clock.advance(3600)                     # tests move time instead of sleeping

Paths are served with or without Blockfrost's "/api/v0" prefix. Every request body is bounded
before it is read, every path and query value is validated, and any unexpected error becomes
a Blockfrost-style JSON 500 instead of a dropped connection.
"""

from __future__ import annotations

import json
import logging
import re
import threading
from dataclasses import dataclass
from decimal import Decimal
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from pycardano.address import Address
from pycardano.exception import DeserializeException
from pycardano.network import Network

from oracle_client.ledger.clock import LedgerClock
from oracle_client.ledger.params import (
    EPOCH_LENGTH,
    NETWORK_MAGIC,
    SLOT_LENGTH_S,
    genesis_json,
    protocol_parameters_json,
)
from oracle_client.ledger.scripts import ScriptRunError, run_scripts
from oracle_client.ledger.shapes import (
    JsonDict,
    address_json,
    amount_list,
    block_json,
    epoch_json,
    evaluation_failure,
    evaluation_result,
    tx_json,
    tx_utxos_json,
    utxo_json,
)
from oracle_client.ledger.state import NTX_ASSET_NAME, DoubleSpend, LedgerState
from oracle_client.ledger.validate import TxRejected, Validator, decode

log = logging.getLogger(__name__)

API_PREFIX = "/api/v0"
# A transaction is at most max_tx_size (16 KiB) bytes, hex doubles it; anything far beyond is
# not a transaction and is refused before reading it.
MAX_BODY = 64 * 1024
MAX_PAGE = 21_474_836  # Blockfrost's own bound
_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_HEX56 = re.compile(r"^[0-9a-f]{56}$")
_UNIT = re.compile(r"^(lovelace|[0-9a-f]{56}(?:[0-9a-f]{2}){0,32})$")
NTX_DECIMALS = 6


class HttpError(Exception):
    def __init__(self, status: HTTPStatus, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def _not_found() -> HttpError:
    return HttpError(HTTPStatus.NOT_FOUND, "The requested component has not been found.")


def to_base_units(amount: str | int | Decimal, what: str) -> int:
    """ "1.5" ADA or NTX -> 1_500_000 base units (both have 6 decimals); refuses more precision."""
    try:
        value = Decimal(str(amount))
    except ArithmeticError as exc:
        raise ValueError(f"{what}: not a number: {amount!r}") from exc
    if not value.is_finite() or value < 0:
        raise ValueError(f"{what}: must be a non-negative number, got {amount!r}")
    base = value * 10**NTX_DECIMALS
    if base != base.to_integral_value():
        raise ValueError(f"{what}: at most {NTX_DECIMALS} decimals, got {amount!r}")
    return int(base)


class Ledger:
    """The ledger behind the HTTP surface: state, clock, validator. Usable without HTTP."""

    def __init__(self, state: LedgerState, clock: LedgerClock) -> None:
        self.state = state
        self.clock = clock
        self.validator = Validator(state, clock)
        # One submission at a time: validation reads the UTxO set the commit then changes.
        # `LedgerState.apply` re-checks spends atomically anyway (other processes).
        self._submit_lock = threading.Lock()

    @property
    def ntx_unit(self) -> str:
        return self.state.ntx_unit

    def submit(self, raw: bytes) -> str:
        """Validate and apply; returns the tx hash. Raises TxRejected with the reason."""
        with self._submit_lock:
            new = self.validator.check(raw)
            try:
                self.state.apply(new, self.clock.slot(), int(self.clock.now()))
            except DoubleSpend as exc:
                raise TxRejected(str(exc)) from exc
        return new.hash

    def evaluate(self, raw: bytes) -> JsonDict:
        """Ogmios-style ex-units of each redeemer, with the per-tx maximum as budget."""
        try:
            d = decode(raw, self.validator.params.max_tx_size)
        except TxRejected as exc:
            return evaluation_failure({"CannotCreateEvaluationContext": {"reason": str(exc)}})
        body = d.tx.transaction_body
        try:
            wanted = [*body.inputs, *(body.reference_inputs or [])]
            resolved = [u.to_utxo() for u in self.validator.resolve(wanted, "input")]
            runs = run_scripts(d.tx, resolved, self.clock, self.validator.max_ex)
        except (TxRejected, ScriptRunError) as exc:
            return evaluation_failure({"CannotCreateEvaluationContext": {"reason": str(exc)}})
        failed = {
            r.key: [{"validatorFailed": {"error": r.error, "traces": list(r.logs)}}]
            for r in runs
            if not r.ok
        }
        if failed:
            return evaluation_failure({"ScriptFailures": failed})
        return evaluation_result({r.key: (r.mem, r.steps) for r in runs})

    def faucet(
        self,
        address: str,
        *,
        ada: str | int | Decimal = 0,
        ntx: str | int | Decimal = 0,
        note: str = "",
    ) -> tuple[str, int, int]:
        """Create ADA and NTX at `address`; (tx hash, lovelace, NTX base units) created."""
        lovelace = to_base_units(ada, "ada")
        ntx_base = to_base_units(ntx, "ntx")
        tx_hash, created = self.state.faucet(
            address,
            lovelace,
            ntx_base,
            slot=self.clock.slot(),
            time_s=int(self.clock.now()),
            note=note,
        )
        return tx_hash, created, ntx_base

    def info(self) -> JsonDict:
        """GET /ledger/info: what a node needs beyond Blockfrost (the NTX unit, time origin)."""
        return {
            "network": "local",
            "network_magic": NETWORK_MAGIC,
            "system_start": self.state.system_start,
            "slot_length": SLOT_LENGTH_S,
            "zero_time_ms": self.state.system_start * 1000,
            "zero_slot": 0,
            "slot": self.clock.slot(),
            "clock_offset_s": self.clock.offset_s,
            "ntx": {
                "policy_id": self.state.policy_id.hex(),
                "asset_name": NTX_ASSET_NAME.decode(),
                "asset_name_hex": NTX_ASSET_NAME.hex(),
                "unit": self.state.ntx_unit,
                "decimals": NTX_DECIMALS,
            },
        }


@dataclass
class _Request:
    method: str
    path: list[str]
    query: dict[str, list[str]]
    body: bytes
    headers: Any


def _page_args(query: dict[str, list[str]]) -> tuple[int, int, bool]:
    def one(name: str, default: str) -> str:
        values = query.get(name, [default])
        if len(values) != 1:
            raise HttpError(HTTPStatus.BAD_REQUEST, f"query parameter {name} given twice")
        return values[0]

    try:
        count = int(one("count", "100"))
        page = int(one("page", "1"))
    except ValueError as exc:
        raise HttpError(HTTPStatus.BAD_REQUEST, "count and page must be integers") from exc
    order = one("order", "asc")
    if not 1 <= count <= 100:
        raise HttpError(HTTPStatus.BAD_REQUEST, "count must be within 1..100")
    if not 1 <= page <= MAX_PAGE:
        raise HttpError(HTTPStatus.BAD_REQUEST, f"page must be within 1..{MAX_PAGE}")
    if order not in ("asc", "desc"):
        raise HttpError(HTTPStatus.BAD_REQUEST, "order must be asc or desc")
    return count, page, order == "desc"


def _address(text: str) -> Address:
    try:
        address = Address.from_primitive(text)
    except Exception as exc:  # pycardano raises several types for a bad string
        raise HttpError(
            HTTPStatus.BAD_REQUEST,
            "Invalid address for this network or malformed address format.",
        ) from exc
    if address.network != Network.TESTNET:
        raise HttpError(
            HTTPStatus.BAD_REQUEST, "Invalid address for this network or malformed address format."
        )
    return address


class Router:
    """Maps a request to a JSON-able reply. Pure: no sockets, so tests can call it directly."""

    def __init__(self, ledger: Ledger, *, project_id: str | None, dev: bool) -> None:
        self.ledger = ledger
        self.state = ledger.state
        self.clock = ledger.clock
        self.project_id = project_id
        self.dev = dev

    def handle(self, req: _Request) -> Any:
        if self.project_id is not None and req.headers.get("project_id") != self.project_id:
            raise HttpError(
                HTTPStatus.FORBIDDEN, "Invalid project token. Please include project_id."
            )
        p = req.path
        if req.method == "POST":
            return self._post(req, p)
        if req.method != "GET":
            raise HttpError(HTTPStatus.METHOD_NOT_ALLOWED, f"{req.method} is not supported")
        match p:
            case []:
                return {"url": "nunet-ledger", "version": "0.1.0"}
            case ["health"]:
                return {"is_healthy": True}
            case ["health", "clock"]:
                return {"server_time": self.clock.now_ms()}
            case ["genesis"]:
                return genesis_json(self.state.system_start)
            case ["epochs", "latest"]:
                return epoch_json(self._epoch(), self.state.system_start, self.state.block_count())
            case ["epochs", "latest", "parameters"]:
                return protocol_parameters_json(self._epoch())
            case ["blocks", "latest"]:
                return self._latest_block()
            case ["addresses", addr]:
                a = _address(addr)
                self._known(str(a))
                return address_json(a, self.state.balance(str(a)))
            case ["addresses", addr, "total"]:
                a = _address(addr)
                self._known(str(a))
                received, sent, n = self.state.address_totals(str(a))
                return {
                    "address": str(a),
                    "received_sum": amount_list(received),
                    "sent_sum": amount_list(sent),
                    "tx_count": n,
                }
            case ["addresses", addr, "utxos"]:
                return self._utxos(addr, req.query, None)
            case ["addresses", addr, "utxos", unit]:
                if not _UNIT.match(unit) or unit == "lovelace":
                    raise HttpError(HTTPStatus.BAD_REQUEST, "Invalid or malformed asset format.")
                return self._utxos(addr, req.query, unit)
            case ["addresses", addr, "transactions"]:
                a = _address(addr)
                self._known(str(a))
                count, page, desc = _page_args(req.query)
                rows = self.state.address_txs(str(a), count=count, page=page, desc=desc)
                return [
                    {"tx_hash": h, "tx_index": 0, "block_height": height, "block_time": t}
                    for h, height, t in rows
                ]
            case ["txs", tx_hash]:
                record = self.state.get_tx(self._hash(tx_hash))
                if record is None:
                    raise _not_found()
                return tx_json(record, self.state.tx_outputs(record.hash))
            case ["txs", tx_hash, "utxos"]:
                record = self.state.get_tx(self._hash(tx_hash))
                if record is None:
                    raise _not_found()
                ins, outs = self.state.tx_inputs(record.hash), self.state.tx_outputs(record.hash)
                return tx_utxos_json(record.hash, ins, outs)
            case ["txs", tx_hash, "cbor"]:
                record = self.state.get_tx(self._hash(tx_hash))
                if record is None or record.cbor is None:
                    raise _not_found()
                return {"cbor": record.cbor.hex()}
            case ["scripts", script_hash]:
                found = self._script(script_hash)
                return {
                    "script_hash": script_hash,
                    "type": found[0],
                    "serialised_size": len(found[1]),
                }
            case ["scripts", script_hash, "cbor"]:
                return {"cbor": self._script(script_hash)[1].hex()}
            case ["ledger", "info"]:
                return self.ledger.info()
            case ["ledger", "faucet", "audit"]:
                return self.state.faucet_audit()
        raise _not_found()

    def _post(self, req: _Request, p: list[str]) -> Any:
        match p:
            case ["tx", "submit"]:
                if not req.body:
                    raise HttpError(HTTPStatus.BAD_REQUEST, "empty body: send the tx CBOR")
                try:
                    return self.ledger.submit(req.body)
                except TxRejected as exc:
                    raise HttpError(HTTPStatus.BAD_REQUEST, f"transaction rejected: {exc}") from exc
            case ["utils", "txs", "evaluate"]:
                return self.ledger.evaluate(_cbor_body(req.body))
            case ["ledger", "faucet"] if self.dev:
                data = _json_body(req.body)
                try:
                    tx_hash, lovelace, ntx = self.ledger.faucet(
                        str(data.get("address", "")),
                        ada=data.get("ada", 0),
                        ntx=data.get("ntx", 0),
                        note=str(data.get("note", "http")),
                    )
                except ValueError as exc:
                    raise HttpError(HTTPStatus.BAD_REQUEST, str(exc)) from exc
                return {"tx_hash": tx_hash, "lovelace": lovelace, "ntx": ntx}
            case ["ledger", "clock"] if self.dev:
                data = _json_body(req.body)
                try:
                    if "advance_s" in data:
                        self.clock.advance(float(data["advance_s"]))
                    if "offset_s" in data:
                        self.clock.set_offset(float(data["offset_s"]))
                except (TypeError, ValueError) as exc:
                    raise HttpError(HTTPStatus.BAD_REQUEST, "advance_s/offset_s: numbers") from exc
                return {"slot": self.clock.slot(), "offset_s": self.clock.offset_s}
        raise _not_found()

    # -- helpers -----------------------------------------------------------------------------

    def _epoch(self) -> int:
        return max(self.clock.slot(), 0) // EPOCH_LENGTH

    def _latest_block(self) -> JsonDict:
        # The tip's slot is "now": wallets derive validity intervals from it.
        latest = self.state.latest_block()
        slot, now = self.clock.slot(), int(self.clock.now())
        if latest is None:
            return block_json(0, "0" * 64, None, slot, now, 0)
        height, block_hash, _, _, _ = latest
        return block_json(height, block_hash, None, slot, now, 1)

    def _known(self, address: str) -> None:
        # Blockfrost: 404 for an address never seen on chain, [] for one whose UTxOs are spent.
        if not self.state.address_known(address):
            raise _not_found()

    def _utxos(self, addr: str, query: dict[str, list[str]], unit: str | None) -> Any:
        a = _address(addr)
        count, page, desc = _page_args(query)
        self._known(str(a))
        rows = self.state.unspent_at(str(a), count=count, page=page, desc=desc, unit=unit)
        return [utxo_json(u) for u in rows]

    @staticmethod
    def _hash(text: str) -> str:
        if not _HEX64.match(text):
            raise HttpError(HTTPStatus.BAD_REQUEST, "Invalid or malformed hash format.")
        return text

    def _script(self, script_hash: str) -> tuple[str, bytes]:
        if not _HEX56.match(script_hash):
            raise HttpError(HTTPStatus.BAD_REQUEST, "Invalid or malformed script hash format.")
        found = self.state.script(script_hash)
        if found is None:
            raise _not_found()
        return found


def _cbor_body(body: bytes) -> bytes:
    """/utils/txs/evaluate: blockfrost-python sends hex text; raw CBOR is accepted too."""
    text = body.strip()
    if text and re.fullmatch(rb"[0-9a-fA-F]+", text) and len(text) % 2 == 0:
        return bytes.fromhex(text.decode("ascii"))
    return body


def _json_body(body: bytes) -> dict[str, Any]:
    try:
        data = json.loads(body or b"{}")
    except (ValueError, UnicodeDecodeError) as exc:
        raise HttpError(HTTPStatus.BAD_REQUEST, "body must be a JSON object") from exc
    if not isinstance(data, dict):
        raise HttpError(HTTPStatus.BAD_REQUEST, "body must be a JSON object")
    return data


class _Handler(BaseHTTPRequestHandler):
    server: _HttpServer
    protocol_version = "HTTP/1.1"  # keep-alive for clients that pool connections
    timeout = 30  # a client that stops sending mid-body does not hold a thread forever

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s " + format, self.address_string(), *args)

    def do_GET(self) -> None:
        self._serve("GET")

    def do_POST(self) -> None:
        self._serve("POST")

    def do_PUT(self) -> None:
        self._serve("PUT")

    def do_DELETE(self) -> None:
        self._serve("DELETE")

    def _read_body(self) -> bytes:
        if self.command != "POST":
            return b""
        length_text = self.headers.get("Content-Length")
        if length_text is None:
            if self.headers.get("Transfer-Encoding"):
                raise HttpError(HTTPStatus.LENGTH_REQUIRED, "send a Content-Length, not chunks")
            return b""
        try:
            length = int(length_text)
        except ValueError as exc:
            raise HttpError(HTTPStatus.BAD_REQUEST, "bad Content-Length") from exc
        if length < 0:
            raise HttpError(HTTPStatus.BAD_REQUEST, "bad Content-Length")
        if length > MAX_BODY:
            raise HttpError(
                HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
                f"body of {length} bytes; the limit is {MAX_BODY}",
            )
        body = self.rfile.read(length)
        if len(body) != length:
            raise HttpError(HTTPStatus.BAD_REQUEST, "body shorter than its Content-Length")
        return body

    def _serve(self, method: str) -> None:
        status, payload = HTTPStatus.OK, None
        try:
            body = self._read_body()
            url = urlsplit(self.path)
            path = url.path
            if path.startswith(API_PREFIX):
                path = path[len(API_PREFIX) :]
            parts = [unquote(s) for s in path.split("/") if s]
            query = parse_qs(url.query, keep_blank_values=True, max_num_fields=20)
            payload = self.server.router.handle(_Request(method, parts, query, body, self.headers))
        except HttpError as exc:
            status, payload = exc.status, _error(exc.status, exc.message)
            if exc.status in (HTTPStatus.REQUEST_ENTITY_TOO_LARGE, HTTPStatus.LENGTH_REQUIRED):
                self.close_connection = True  # the unread body would be parsed as a request
        except (ValueError, DeserializeException) as exc:
            status, payload = HTTPStatus.BAD_REQUEST, _error(HTTPStatus.BAD_REQUEST, str(exc))
        except Exception:
            log.exception("nunet-ledger: %s %s failed", method, self.path)
            status = HTTPStatus.INTERNAL_SERVER_ERROR
            payload = _error(status, "internal error; see the ledger's log")
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(data)


def _error(status: HTTPStatus, message: str) -> JsonDict:
    return {"status_code": int(status), "error": status.phrase, "message": message}


class _HttpServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], router: Router) -> None:
        self.router = router
        super().__init__(address, _Handler)


class LedgerServer:
    """The ledger served over HTTP. `start()` runs it in a daemon thread; `url` is the
    Blockfrost base URL to give `BlockFrostChainContext(base_url=...)`: like Blockfrost's own
    it ends in "/api", and blockfrost-python appends the "/v0"."""

    def __init__(
        self,
        db_path: str | Path,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        clock: LedgerClock | None = None,
        slot_offset: float = 0.0,
        project_id: str | None = None,
        dev: bool = False,
    ) -> None:
        self.state = LedgerState(db_path)
        self.clock = clock or LedgerClock(self.state.system_start, offset_s=slot_offset)
        self.ledger = Ledger(self.state, self.clock)
        self.router = Router(self.ledger, project_id=project_id, dev=dev)
        self._http = _HttpServer((host, port), self.router)
        self.host = host
        self.port = int(self._http.server_address[1])
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/api"

    @property
    def ntx_unit(self) -> str:
        return self.state.ntx_unit

    def faucet(
        self,
        address: str | Address,
        *,
        ada: str | int | Decimal = 0,
        ntx: str | int | Decimal = 0,
        note: str = "",
    ) -> tuple[str, int, int]:
        return self.ledger.faucet(str(address), ada=ada, ntx=ntx, note=note)

    def start(self) -> LedgerServer:
        self._thread = threading.Thread(
            target=self._http.serve_forever, name="nunet-ledger", daemon=True
        )
        self._thread.start()
        return self

    def serve_forever(self) -> None:
        self._http.serve_forever()

    def stop(self) -> None:
        if self._thread is not None:
            self._http.shutdown()
            self._thread.join(timeout=5)
            self._thread = None
        self._http.server_close()
        self.state.close()

    def __enter__(self) -> LedgerServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_server(
    db_path: str | Path,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    clock: LedgerClock | None = None,
    slot_offset: float = 0.0,
    project_id: str | None = None,
    dev: bool = False,
) -> LedgerServer:
    """Open (or create) the ledger at `db_path` and serve it in a daemon thread."""
    return LedgerServer(
        db_path,
        host=host,
        port=port,
        clock=clock,
        slot_offset=slot_offset,
        project_id=project_id,
        dev=dev,
    ).start()


__all__ = ["Ledger", "LedgerServer", "start_server", "to_base_units"]
