"""A job's running state is declared once (protocol.PROGRESS_FIELDS): the provider's Update
carries exactly those fields of its job record, and the consumer applies exactly those."""

from __future__ import annotations

import msgspec
from nacl.signing import SigningKey

from engine import api
from engine.domain.spec import JobSpec
from engine.identity import Identity
from engine.jobs import protocol as p

# What an Update carries besides the running state: the message's own, the log, the receipt
# and the live samples (kept apart: JobInfo.usage is the latest of them).
NOT_PROGRESS = {"v", "job_id", "lines", "receipt", "usage"}


def _fields(kind: type) -> set[str]:
    return {f.name for f in msgspec.structs.fields(kind)}


def test_the_running_state_is_one_list_both_structs_hold() -> None:
    assert set(p.PROGRESS_FIELDS) <= _fields(api.JobInfo)
    # Every field an Update carries is either running state or one of its own: a new field
    # cannot be sent without being applied (or applied without being sent).
    assert _fields(p.Update) - NOT_PROGRESS == set(p.PROGRESS_FIELDS)


def test_the_provider_s_state_reaches_the_consumer_s_record_field_for_field() -> None:
    spec = JobSpec(framework="scikit-learn", script_url="https://example.org/iris.py")
    ran = api.JobInfo(
        job_id="0123456789ab",
        role="provider",
        state="completed",
        provider="12D3KooWprovider",
        consumer="12D3KooWconsumer",
        spec=spec,
        reason="done",
        exit_code=0,
        checkpoint=3,
        resumed_from=2,
        started_at=10.0,
        finished_at=70.0,
        metering=api.JobMetering(wall_s=60.0, cpu_s=55.5),
        results_sha256="ab" * 32,
        results_size=1234,
    )
    identity = Identity(SigningKey(b"\x07" * 32))
    sent = p.encode(identity, p.Update(job_id=ran.job_id, **p.progress_of(ran)))
    wire, _ = p.decode(sent, identity.peer_id)  # over the wire, signed, as the consumer reads it
    assert isinstance(wire, p.Update)
    mine = msgspec.structs.replace(ran, role="consumer", state="running", reason="", exit_code=None)
    applied = msgspec.structs.replace(mine, **wire.progress())
    assert p.progress_of(applied) == p.progress_of(ran)
    assert applied.role == "consumer"  # only the running state moved
