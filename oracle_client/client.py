"""Async client of the oracle's HTTP API: typed calls, timeouts, retries, plain errors.

Works under trio (the engine) and asyncio alike: httpx and the backoff sleep go through anyio.
Retries: a connection failure, a timeout or a 5xx reply is retried with exponential backoff;
a 4xx is the oracle's answer and is raised at once. Retrying POSTs is safe because the oracle
is idempotent: a repeated request-service returns the same quote and a repeated request-reward
the same decision.
"""

from __future__ import annotations

import random
from typing import TypeVar

import anyio
import httpx
import msgspec

from oracle_client.models import (
    ErrorReply,
    LivenessReport,
    OracleInfo,
    RewardGrant,
    RewardPending,
    RewardRequest,
    ServiceQuote,
    ServiceRequest,
    StatusAck,
    StatusReport,
)

T = TypeVar("T")
# NuNet's "102 job still running" travels as HTTP 202 (see models.py).
PENDING_STATUS = 202
MAX_REPLY_BYTES = 1 << 20


class OracleError(Exception):
    """Anything that kept a call from getting the oracle's answer or a success."""


class OracleUnavailable(OracleError):
    """The oracle cannot be reached, timed out, or says it cannot serve now (502/503/504, or
    429: too many requests from this address)."""


class OracleProtocolError(OracleError):
    """The oracle answered something this client does not understand."""


class OracleFailure(OracleError):
    """The oracle failed inside (500) on every try."""

    def __init__(self, message: str, status: int, reason: str) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason


class OracleRejected(OracleError):
    """The oracle refused the request (4xx); ``error`` is its machine-readable kind."""

    def __init__(self, status: int, reason: str, error: str = "bad_request") -> None:
        super().__init__(f"the oracle refused ({status} {error}): {reason}")
        self.status = status
        self.reason = reason
        self.error = error


class NoMatchingPeer(OracleRejected):
    pass


class PriceAboveBudget(OracleRejected):
    pass


class ProviderBusy(OracleRejected):
    pass


class JobIdTaken(OracleRejected):
    pass


class JobNotFound(OracleRejected):
    pass


class ReceiptRejected(OracleRejected):
    """The receipt is unsigned, wrongly signed or does not match the registered job."""


class Undecidable(OracleRejected):
    """Both peers signed an outcome that no rule pays: the deadline refund remains."""


class DecisionConflict(OracleRejected):
    """The job was already decided the other way; the oracle never signs both."""


class LockNotFound(OracleRejected):
    """No escrow lock on chain matches the registered job (yet)."""


_REJECTIONS: dict[str, type[OracleRejected]] = {
    "no_matching_peer": NoMatchingPeer,
    "price_above_budget": PriceAboveBudget,
    "provider_busy": ProviderBusy,
    "job_id_taken": JobIdTaken,
    "job_not_found": JobNotFound,
    "receipt_mismatch": ReceiptRejected,
    "receipt_unsigned": ReceiptRejected,
    "receipt_invalid": ReceiptRejected,
    "undecidable": Undecidable,
    "decision_conflict": DecisionConflict,
    "lock_not_found": LockNotFound,
}


class OracleClient:
    def __init__(
        self,
        base_url: str,
        timeout: float = 10.0,
        retries: int = 3,
        *,
        backoff: float = 0.25,
        max_backoff: float = 8.0,
        jitter: float = 0.1,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        if retries < 0 or timeout <= 0 or backoff < 0:
            raise ValueError("retries must be >= 0, timeout > 0, backoff >= 0")
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self.retries = retries
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.jitter = jitter
        self._http = httpx.AsyncClient(
            timeout=httpx.Timeout(timeout), transport=transport, follow_redirects=False
        )

    async def __aenter__(self) -> OracleClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def info(self) -> OracleInfo:
        return _decode(await self._call("GET", "/info", None), OracleInfo, self.base_url)

    async def request_service(self, request: ServiceRequest) -> ServiceQuote:
        """Register the job with the cheapest free offer within budget; a signed quote."""
        response = await self._call("POST", "/request-service", _checked(request))
        quote = _decode(response, ServiceQuote, self.base_url)
        try:
            quote.verify()
        except ValueError as exc:
            raise OracleProtocolError(f"the oracle's quote is not valid: {exc}") from None
        return quote

    async def request_reward(self, request: RewardRequest) -> RewardGrant | RewardPending:
        """The job's one decision, or RewardPending while no final receipt was accepted."""
        response = await self._call("POST", "/request-reward", _checked(request))
        if response.status_code == PENDING_STATUS:
            return _decode(response, RewardPending, self.base_url)
        grant = _decode(response, RewardGrant, self.base_url)
        try:
            grant.verify()
        except ValueError as exc:
            raise OracleProtocolError(f"the oracle's grant is not valid: {exc}") from None
        return grant

    async def report_liveness(self, report: LivenessReport) -> RewardGrant | RewardPending:
        """Provider: "still running this job"; the answer is the decision if there is one."""
        return await self.request_reward(RewardRequest(job_id=report.job_id, liveness=report))

    async def send_status(self, report: StatusReport) -> StatusAck:
        response = await self._call("POST", "/send-status", _checked(report))
        return _decode(response, StatusAck, self.base_url)

    def retry_delay(self, attempt: int) -> float:
        """Seconds before try ``attempt + 1``: backoff x 2^attempt, capped, minus some jitter
        so that many clients that failed together do not come back together."""
        delay = min(self.max_backoff, self.backoff * 2**attempt)
        return delay * (1.0 - self.jitter * random.random())

    async def _call(self, method: str, path: str, body: bytes | None) -> httpx.Response:
        url = self.base_url + path
        failure = ""
        last: httpx.Response | None = None
        for attempt in range(self.retries + 1):
            if attempt:
                await anyio.sleep(self.retry_delay(attempt - 1))
            try:
                response = await self._http.request(
                    method, url, content=body, headers={"content-type": "application/json"}
                )
            except httpx.TimeoutException:
                failure, last = f"no reply within {self.timeout:g} s", None
                continue
            except httpx.TransportError as exc:
                failure, last = _plain_transport_error(exc), None
                continue
            if response.status_code < 500 and response.status_code != 429:
                return _raise_for_rejection(response)
            last = response  # 429 (too many from this address) and 5xx: later, again
        tries = f"{self.retries + 1} tries"
        if last is None:
            raise OracleUnavailable(f"the oracle at {self.base_url} is unreachable: {failure}")
        reply = _error_reply(last)
        if last.status_code in (429, 502, 503, 504):
            raise OracleUnavailable(
                f"the oracle at {self.base_url} is unavailable ({last.status_code}, {tries}): "
                f"{reply.reason or last.reason_phrase}"
            )
        raise OracleFailure(
            f"the oracle at {self.base_url} failed ({last.status_code}, {tries}): "
            f"{reply.reason or last.reason_phrase}",
            last.status_code,
            reply.reason,
        )


def _checked(request: msgspec.Struct) -> bytes:
    """Encode after validating: msgspec checks constraints only when decoding, so a bad value
    built in Python is caught here instead of as a 400 from the oracle."""
    builtins = msgspec.to_builtins(request)
    try:
        msgspec.convert(builtins, type(request))
    except msgspec.ValidationError as exc:
        raise ValueError(f"invalid {type(request).__name__}: {exc}") from None
    return msgspec.json.encode(builtins)


def _raise_for_rejection(response: httpx.Response) -> httpx.Response:
    if response.status_code < 400:
        return response
    reply = _error_reply(response)
    cls = _REJECTIONS.get(reply.error, OracleRejected)
    raise cls(response.status_code, reply.reason or response.reason_phrase, reply.error)


def _error_reply(response: httpx.Response) -> ErrorReply:
    try:
        return msgspec.json.decode(response.content[:MAX_REPLY_BYTES], type=ErrorReply)
    except msgspec.DecodeError:
        # A proxy's HTML error page or an empty body: keep the status, drop the body.
        return ErrorReply(code=response.status_code, error="", reason="")


def _decode(response: httpx.Response, cls: type[T], url: str) -> T:
    if len(response.content) > MAX_REPLY_BYTES:
        raise OracleProtocolError(f"the oracle at {url} sent an oversized reply")
    try:
        return msgspec.json.decode(response.content, type=cls)
    except msgspec.DecodeError as exc:
        raise OracleProtocolError(
            f"the oracle at {url} sent a reply this client does not understand: {exc}"
        ) from None


def _plain_transport_error(exc: httpx.TransportError) -> str:
    """A sentence for people: 'connection refused', not a stack of socket exceptions."""
    text = str(exc) or type(exc).__name__
    lowered = text.lower()
    if isinstance(exc, httpx.ConnectError):
        if "refused" in lowered or _caused_by(exc, ConnectionRefusedError):
            return "connection refused (is nunet-oracle running on that host and port?)"
        if "name or service not known" in lowered or "nodename" in lowered:
            return "its host name does not resolve"
        return f"cannot connect: {text}"
    if isinstance(exc, httpx.RemoteProtocolError):
        return f"the connection broke mid-reply: {text}"
    return text


def _caused_by(exc: BaseException, kind: type[BaseException], depth: int = 0) -> bool:
    """Whether ``kind`` is anywhere in the chain: under trio, anyio reports a refused
    connection as "all attempts to connect ... failed" with the real errors as its cause."""
    if isinstance(exc, kind):
        return True
    if depth > 8:
        return False
    inner: list[BaseException] = [e for e in (exc.__cause__, exc.__context__) if e is not None]
    if isinstance(exc, BaseExceptionGroup):
        inner.extend(exc.exceptions)
    return any(_caused_by(e, kind, depth + 1) for e in inner)
