"""The job protocol (``/nunet/job/1.0.0``): one request and its answers per stream.

Consumer -> provider: ``Offer`` (answered by a signed ``Quote`` or a ``Refusal``),
``Confirm`` (the escrow lock goes between quote and confirm; answered by ``Accepted`` or a
``Refusal``, each final: a Confirm repeated with the same job id gets the same answer and
never starts a second run), ``Release`` (the consumer stops waiting for its Confirm: answered
``Accepted`` when the job was accepted before it, else a ``Refusal`` after which the provider
never runs it),
``Follow`` (the provider streams ``Update`` frames: state, log lines, metering, until the job
ends; a paid job's last one carries the provider's signed receipt), ``Countersign`` (the
consumer's signature on that receipt), ``Cancel``, ``FetchResults`` (a signed
``ResultsHeader``, then raw chunks whose sha256 the header fixes, from an offset when a
transfer resumes) and ``DeleteResults`` (a
finished job's files removed on the provider: ``notebook delete``). Every frame is
length-prefixed, size-bounded and signed by its sender; the receiver checks that the signer
is the peer at the other end of the stream.
"""

from __future__ import annotations

import contextlib
from typing import Annotated, Any

import msgspec
import trio

from engine.api import JobLogLine, JobMetering, Measured, RunSpan, StepInfo, UsageSample
from engine.api.jobs import MAX_JOB_STEPS
from engine.domain import wire
from engine.domain.gang import MAX_GANG
from engine.domain.safe_paths import JobId, is_job_id
from engine.domain.spec import JobSpec, offer_spec
from engine.identity import Identity
from oracle_client.billing import MAX_REPLICAS

JOB_PROTOCOL = "/nunet/job/1.0.0"
MAX_MESSAGE_BYTES = 1 << 20  # an Update carries at most a few thousand log lines
MAX_LINES_PER_UPDATE = 20_000
UPDATE_BUDGET_BYTES = 768 * 1024  # of log text per Update: well inside MAX_MESSAGE_BYTES
MAX_LINE_CHARS = 8192
RESULT_CHUNK = 256 * 1024
# The first frame a provider reads from a stranger: an Offer is its largest request (a spec
# with at most 64 environment variables of 4 KiB, 100 dependencies); a Confirm or Countersign
# carries a few KiB of signed JSON. A peer announcing more is reset before any of it is read.
MAX_REQUEST_BYTES = 320 * 1024
MAX_ANSWER_BYTES = 64 * 1024  # a Quote, Refusal or Accepted, read by the consumer
# Offers per consumer a provider answers: a person or script submitting jobs makes a few; a
# flood is refused. Honest consumers pace their own offers under it (consumer.py).
OFFERS_PER_S = 2.0
OFFER_BURST = 10.0
# Free text that crosses the wire and may be shown or stored: each has a bound in the schema.
MAX_REASON_CHARS = 1000
MAX_JOB_NAME_CHARS = 200
MAX_SIGNED_JSON_CHARS = 32 * 1024  # escrow terms, receipts
MAX_SPEC_FIELDS = 32
MAX_RUNS = MAX_REPLICAS  # a job's runs: each bills as one replica of its receipt
# Live samples in one Update (issue 22 §3): a new follow gets the provider's whole ring (its
# last 120, live_usage.KEEP), then each new one; each sample's figures are bounded in its
# schema (api.UsageSample). About 60 bytes each: at most ~7 KiB an Update.
MAX_USAGE_SAMPLES = 120

PeerIdText = Annotated[str, msgspec.Meta(max_length=128)]
Reason = Annotated[str, msgspec.Meta(max_length=MAX_REASON_CHARS)]
ShortText = Annotated[str, msgspec.Meta(max_length=200)]
SignedJson = Annotated[str, msgspec.Meta(max_length=MAX_SIGNED_JSON_CHARS)]


class JobMessage(msgspec.Struct, frozen=True, kw_only=True, tag_field="t"):
    v: int = 1
    # Checked by the schema: a job id becomes a folder name on both sides, and a bad one
    # ("../../x") must be refused before anything is stored or looked up.
    job_id: JobId


class Offer(JobMessage, tag="offer", frozen=True):
    # Typed on the wire: a spec whose fields are not JobSpec's does not decode (the provider
    # answers it with a Refusal: see BadOffer). On the wire it is offer_spec's form.
    spec: JobSpec
    consumer: PeerIdText

    def __post_init__(self) -> None:
        # The spec's one free-text field is bounded here, before anything shows or keeps it.
        _check_name(self.spec.name)


class _OfferOnTheWire(JobMessage, tag="offer", frozen=True):
    """An Offer as it is written (offer_spec: newer fields left out at their defaults, so
    older providers still read it) and, when the typed decode failed, read again to say why."""

    spec: Annotated[dict[str, Any], msgspec.Meta(max_length=MAX_SPEC_FIELDS)]
    consumer: PeerIdText

    def __post_init__(self) -> None:
        name = self.spec.get("name")
        if isinstance(name, str):
            _check_name(name)


def _check_name(name: str) -> None:
    if len(name) > MAX_JOB_NAME_CHARS:
        raise ValueError(f"job name of {len(name)} characters: at most {MAX_JOB_NAME_CHARS}")


class Quote(JobMessage, tag="quote", frozen=True):
    provider: PeerIdText
    # NTX as decimals, for consumers of older releases, which require them: the price per
    # hour and the lock, written from the base units below. This node reads the integers; a
    # quote of before issue 12 has only ``total_ntx``, read once at the boundary
    # (consumer_base.py ``quoted_units``), exact to the base unit or refused.
    price_ntx_hour: float
    total_ntx: float
    expires_at: float
    executor: ShortText
    payment_address: ShortText = ""  # the provider's wallet: what the escrow pays (paid jobs)
    # Billing (issue 12), base units: the spec quoted, its price per machine-hour and minimum
    # charge, the estimate for the expected time and the lock (the cap for the maximum time).
    spec_name: ShortText = ""
    price_units_hour: int = 0
    min_charge_units: int = 0
    estimate_units: int = 0
    lock_units: int = 0


class Refusal(JobMessage, tag="refusal", frozen=True):
    reason: Reason


class Confirm(JobMessage, tag="confirm", frozen=True):
    total_ntx: float  # the quote's lock as a decimal (older providers compare it): in units too
    escrow_tx: ShortText = ""  # the lock's transaction id (paid jobs)
    escrow_terms: SignedJson = ""  # the oracle's signed terms (ServiceQuote JSON) of the lock


class Accepted(JobMessage, tag="accepted", frozen=True):
    pass


class Release(JobMessage, tag="release", frozen=True):
    """The consumer gives up waiting for its Confirm (issue 20 §1). The answer is the job's one
    outcome: ``Accepted`` (it was accepted first: it runs, and ``Cancel`` ends it) or a
    ``Refusal`` (the provider will never run it; its lock can come back at once)."""


# A Confirm's timing (issue 20 §1), nested so that each side's patience outlasts the other's
# bound: the provider answers every Confirm within CONFIRM_CHECK_S (refusing when it could not
# see the lock by then); the consumer waits for that answer up to CONFIRM_ANSWER_S per try,
# asks again with the same job id while it has time, and never asks another provider before
# it has a final answer.
CONFIRM_CHECK_S = 75.0  # > engine/payments/escrow_lock.py LOCK_WAIT_S (60 s on chain)
CONFIRM_ANSWER_S = CONFIRM_CHECK_S + 20.0  # the provider's bound and a slow link's round trip


class Cancel(JobMessage, tag="cancel", frozen=True):
    # `job stop`: a service job's normal end ("completed"). A provider that predates the
    # field ignores it and cancels: the job still ends, as "cancelled".
    stop: bool = False


class Follow(JobMessage, tag="follow", frozen=True):
    after_seq: int = -1


# A job's running state, as the provider tells it and the consumer keeps it in its JobInfo:
# declared once, here. Both sides copy exactly these fields (``progress_of``/``progress``),
# so a field added to both structs is carried without a third, hand-written list. (One
# nested struct would change the wire's bytes and the stored records: older peers and rows.)
PROGRESS_FIELDS = (
    "state",
    "reason",
    "exit_code",
    "checkpoint",
    "resumed_from",
    "runs",
    "started_at",
    "finished_at",
    "metering",
    "results_sha256",
    "results_size",
    "results_cid",
    "steps",
)


class WireMetering(Measured, frozen=True, forbid_unknown_fields=False):
    """A job's metering as Updates carry it: what the provider measured, without a cost.
    A consumer works the charge out from its own record (engine/domain/charges.py), never from
    what the provider says it costs; an older provider's ``cost_ntx`` is skipped as an unknown
    field, and an older consumer reads a missing one as 0."""

    @classmethod
    def of(cls, metering: JobMetering | None) -> WireMetering | None:
        if metering is None:
            return None
        return cls(**{name: getattr(metering, name) for name in cls.__struct_fields__})

    def record(self) -> JobMetering:
        return JobMetering(**msgspec.structs.asdict(self))


class Update(JobMessage, tag="update", frozen=True):
    state: ShortText
    reason: Reason = ""
    exit_code: int | None = None
    checkpoint: int = 0
    resumed_from: int | None = None
    runs: Annotated[tuple[RunSpan, ...], msgspec.Meta(max_length=MAX_RUNS)] = ()
    # A job with steps: each replica's state and span (issue 25 §1), bounded in api/jobs.py.
    # Older peers neither send nor read it.
    steps: Annotated[tuple[StepInfo, ...], msgspec.Meta(max_length=MAX_JOB_STEPS)] = ()
    started_at: float | None = None
    finished_at: float | None = None
    metering: WireMetering | None = None
    results_sha256: ShortText = ""
    results_size: int = 0
    # Published results' CID (issue 26); older peers neither send nor read it.
    results_cid: Annotated[str, msgspec.Meta(pattern=r"^(b[a-z2-7]{58})?$")] = ""
    lines: tuple[JobLogLine, ...] = ()
    receipt: SignedJson = ""  # paid jobs, once ended: the provider's signed receipt (JSON)
    # The job's live use since the follow's last Update (all the provider keeps on a new
    # follow), oldest first. Older peers neither send nor read it (unknown fields are
    # skipped, a missing one is empty).
    usage: Annotated[tuple[UsageSample, ...], msgspec.Meta(max_length=MAX_USAGE_SAMPLES)] = ()

    def progress(self) -> dict[str, Any]:
        """The running state it carries (PROGRESS_FIELDS), to apply to the consumer's job."""
        fields = {name: getattr(self, name) for name in PROGRESS_FIELDS}
        fields["metering"] = self.metering.record() if self.metering is not None else None
        return fields


def steps_fit(spec: Any, steps: tuple[StepInfo, ...]) -> bool:
    """Whether a provider's ``steps`` are the spec's own: none yet, or each step by name,
    in order, with as many replicas as the spec asks (more would bill what nobody asked)."""
    if not steps:
        return True
    # A gang's slot runs one replica of its distributed step (its rank's): issue 25 §2.
    wanted = [
        (step.name, 1 if step.distributed and spec.gang is not None else step.replicas)
        for step in spec.subtasks
    ]
    return [(step.name, len(step.replicas)) for step in steps] == wanted


def progress_of(job: Any) -> dict[str, Any]:
    """A job record's running state (PROGRESS_FIELDS), as an Update carries it."""
    fields = {name: getattr(job, name) for name in PROGRESS_FIELDS}
    fields["metering"] = WireMetering.of(job.metering)
    return fields


class Countersign(JobMessage, tag="countersign", frozen=True):
    """The consumer's signature added to the provider's receipt (answered ``Accepted``)."""

    receipt: SignedJson


class Countersigned(JobMessage, tag="countersigned", frozen=True):
    """The provider's answer to a Countersign whose receipt bills less than its own (the
    consumer's offer, issue 20 §7): the offer, now signed by both."""

    receipt: SignedJson


# Where a results transfer resumes (issue 24): a relay ends a circuit after its data cap or
# time, and the consumer asks again from the bytes it has. Bounded by the largest archive a
# consumer fetches (consumer_base.MAX_RESULTS_BYTES is 2 GiB); a provider also refuses an
# offset past its archive's size.
ResultOffset = Annotated[int, msgspec.Meta(ge=0, le=1 << 40)]


class FetchResults(JobMessage, tag="fetch_results", frozen=True):
    # The archive's bytes from here on (0: all). A provider of before issue 24 ignores it
    # and sends everything, with a header whose offset is 0: the consumer starts over.
    offset: ResultOffset = 0


class ResultsHeader(JobMessage, tag="results", frozen=True):
    sha256: ShortText
    size: int
    offset: ResultOffset = 0  # the first byte that follows (FetchResults.offset)


class DeleteResults(JobMessage, tag="delete_results", frozen=True):
    """``notebook delete``: remove a finished job's files on its provider (owner only;
    engine/jobs/notebooks.py). Answered ``Accepted`` or a ``Refusal``."""


class GangStart(JobMessage, tag="gang_start", frozen=True):
    """The consumer's start of a gang's slot (issue 25 §2): every slot was quoted, locked and
    accepted, so the slot's provider may run it. ``members``: the providers' peer ids by rank
    (the slot's own at its rank); the rest (addresses, MASTER_ADDR) follows from the gang id
    (engine/domain/gang.py). Answered ``Accepted`` (a repeat too) or a ``Refusal``."""

    gang_id: Annotated[str, msgspec.Meta(min_length=1, max_length=32, pattern=r"^[0-9a-f]+$")]
    members: Annotated[tuple[PeerIdText, ...], msgspec.Meta(min_length=2, max_length=MAX_GANG)]


AnyJobMessage = (
    Offer
    | Quote
    | Refusal
    | Confirm
    | Accepted
    | Release
    | Cancel
    | Follow
    | Update
    | FetchResults
    | ResultsHeader
    | Countersign
    | Countersigned
    | DeleteResults
    | GangStart
)

_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(AnyJobMessage)
_raw_offer = msgspec.msgpack.Decoder(_OfferOnTheWire)
KIND = "job"


class ProtocolError(Exception):
    """The other side sent something we cannot accept; the stream is reset."""


class BadOffer(ProtocolError):
    """A well-formed, signed Offer whose spec is not a JobSpec: answered with a Refusal that
    says why (``reason``), not a reset, so its consumer can tell the user."""

    def __init__(self, job_id: JobId, consumer: str, reason: str) -> None:
        super().__init__(reason)
        self.job_id, self.consumer, self.reason = job_id, consumer, reason


def encode(identity: Identity, message: JobMessage) -> bytes:
    if isinstance(message, Offer):
        message = _OfferOnTheWire(
            v=message.v,
            job_id=message.job_id,
            spec=offer_spec(message.spec),
            consumer=message.consumer,
        )
    return wire.seal_payload(identity, KIND, _encoder.encode(message))


def decode(data: bytes, expected_signer: str) -> tuple[AnyJobMessage, bytes]:
    """The message and the signed bytes as received (kept in the store as evidence)."""
    try:
        envelope = wire.open_payload(data, MAX_MESSAGE_BYTES)
    except wire.WireError as exc:
        raise ProtocolError(str(exc)) from exc
    if envelope.kind != KIND:
        raise ProtocolError(f"expected a job message, got {envelope.kind[:40]!r}")
    if envelope.signer != expected_signer:
        raise ProtocolError(
            f"message signed by {envelope.signer}, not by the peer {expected_signer}"
        )
    try:
        message = _decoder.decode(envelope.payload)
    except msgspec.ValidationError as exc:
        raise _bad_offer(envelope.payload) or ProtocolError(f"bad job message: {exc}") from exc
    except msgspec.DecodeError as exc:
        raise ProtocolError(f"bad job message: {exc}") from exc
    if message.v != 1:
        raise ProtocolError(f"unsupported job protocol version {message.v}")
    if not is_job_id(message.job_id):  # the schema refused it already: a second lock
        raise ProtocolError("bad job id")
    return message, data


def _bad_offer(payload: bytes) -> BadOffer | None:
    """A BadOffer when ``payload`` is an Offer that failed only for its spec."""
    try:
        offer = _raw_offer.decode(payload)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None  # not an Offer, or one bad beyond its spec
    if offer.v != 1:
        return None
    try:
        msgspec.convert(offer.spec, JobSpec)  # only to say which field is wrong
    except msgspec.ValidationError as exc:
        return BadOffer(offer.job_id, offer.consumer, f"bad job spec: {exc}")
    return None  # the spec reads: the message failed elsewhere


async def send(stream: Any, identity: Identity, message: JobMessage) -> bytes:
    data = encode(identity, message)
    await wire.write_frame(stream, data, MAX_MESSAGE_BYTES + 1024)
    return data


async def receive(
    stream: Any, expected_signer: str, max_size: int = MAX_MESSAGE_BYTES + 1024
) -> tuple[AnyJobMessage, bytes] | None:
    """The next message, None at a clean end of stream; ProtocolError on anything bad.
    ``max_size``: the largest frame this read accepts (smaller where only a small message
    may come: a stranger's request, an answer to an offer)."""
    try:
        data = await wire.read_frame(stream, max_size)
    except wire.WireError as exc:
        raise ProtocolError(str(exc)) from exc
    if data is None:
        return None
    return decode(data, expected_signer)


def refusal(job_id: str, reason: str) -> Refusal:
    """A Refusal whose reason fits the schema (reasons may quote what a peer sent)."""
    return Refusal(job_id=job_id, reason=clip(reason))


def clip(text: str, limit: int = MAX_REASON_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


async def finish(stream: Any, linger_s: float, max_drain: int = 64 * 1024) -> None:
    """End our side of a stream properly: close it (the peer reads to the end), wait up to
    ``linger_s`` for the peer to close its side, and reset a stream the peer keeps open or
    keeps writing into: a half-closed stream left behind holds its buffers for ever."""
    try:
        with trio.fail_after(linger_s):
            await stream.close()
            drained = 0
            while drained <= max_drain:
                chunk = await stream.read(max_drain)
                if not chunk:
                    return
                drained += len(chunk)
    except Exception as exc:  # too slow, too chatty, or already gone
        if type(exc).__name__ in ("StreamEOF", "EOFError"):
            return  # the peer closed its side: both are closed, nothing is left behind
    with contextlib.suppress(Exception), trio.move_on_after(1.0):
        await stream.reset()


def kind(message: JobMessage) -> str:
    return type(message).__name__.lower()


def remote_peer(stream: Any) -> str:
    return str(stream.muxed_conn.peer_id)
