"""Schema v6 (issue 23 §2): a database written with the float NTX twins opens with every
amount an integer of base units, and the records decode (they refuse unknown fields)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import msgspec

from engine import api
from engine.api import JobMetering
from engine.domain.spec import JobSpec
from engine.payments.records import EscrowRecord
from engine.store import MIGRATIONS, Store, _statements


def _v5_database(path: Path) -> sqlite3.Connection:
    db = sqlite3.connect(path)
    for version, script in enumerate(MIGRATIONS[:5]):
        for statement in _statements(script):
            db.execute(statement)
        db.execute(f"PRAGMA user_version = {version + 1}")
    db.commit()
    return db


def _old_job(job_id: str, **old: object) -> str:
    """A job row as the release before v6 wrote it: today's fields plus the float twins."""
    job = api.JobInfo(
        job_id=job_id,
        role="consumer",
        state="completed",
        provider="12D3KooWprovider",
        consumer="12D3KooWconsumer",
        spec=JobSpec(framework="scikit-learn"),
        metering=JobMetering(wall_s=60.0),
    )
    document = json.loads(msgspec.json.encode(job))
    del document["metering"]["cost_units"]
    for key, value in old.items():
        if key == "cost_ntx":
            document["metering"]["cost_ntx"] = value
        else:
            document[key] = value
    return json.dumps(document)


def _insert_job(db: sqlite3.Connection, job_id: str, info: str) -> None:
    db.execute(
        "INSERT INTO jobs (job_id, role, state, created_at, updated_at, info) "
        "VALUES (?, 'consumer', 'completed', 0, 0, ?)",
        (job_id, info),
    )


def test_v6_turns_the_float_twins_into_base_units_and_the_rows_decode(tmp_path: Path) -> None:
    db = _v5_database(tmp_path / "n.db")
    # Before billing: a quote and a metered cost in floats only, no base-unit fields.
    _insert_job(
        db,
        "old",
        _old_job("old", price_ntx_hour=2.5, quoted_ntx=0.041667, cost_ntx=0.0416666666),
    )
    # With billing: the integer twins were there; the floats only repeated them.
    _insert_job(
        db,
        "billed",
        _old_job(
            "billed",
            price_ntx_hour=2.4,
            quoted_ntx=0.08,
            cost_ntx=0.04,
            price_units_hour=2_400_000,
            estimate_units=40_000,
            lock_units=80_000,
        ),
    )
    escrow = EscrowRecord(
        info=api.EscrowInfo(
            job_id="billed",
            role="consumer",
            state="locked",
            amount=80_000,
            deadline_ms=1,
            consumer_pkh="aa" * 28,
            provider_pkh="bb" * 28,
            oracle_key="cc" * 32,
        ),
        consumer_peer="12D3KooWconsumer",
        provider_peer="12D3KooWprovider",
    )
    escrow_doc = json.loads(msgspec.json.encode(escrow))
    escrow_doc["info"]["ntx"] = 0.08
    db.execute(
        "INSERT INTO escrows (job_id, state, updated_at, info) VALUES ('billed', 'locked', 0, ?)",
        (json.dumps(escrow_doc),),
    )
    peer = {
        "peer_id": "12D3KooWprovider",
        "resources": {"cpu_mhz": 4000, "prices": {"low": 1.0, "high": 6.25}, "ntx_claimed": 1.5},
    }
    db.execute(
        "INSERT INTO peers (peer_id, channel, info, last_seen) VALUES (?, 'c', ?, 0)",
        ("12D3KooWprovider", json.dumps(peer)),
    )
    db.commit()
    db.close()

    store = Store(tmp_path / "n.db")
    old = store.get_job("old")
    assert old is not None and old.metering is not None
    assert old.estimate_units == 41_667  # its quote, the figure a completed old job was charged
    assert old.metering.cost_units == 41_667
    assert old.price_units_hour is None  # never known in base units: not made up
    billed = store.get_job("billed")
    assert billed is not None and billed.metering is not None
    assert (billed.price_units_hour, billed.estimate_units, billed.lock_units) == (
        2_400_000,
        40_000,
        80_000,
    )
    assert billed.metering.cost_units == 40_000
    record = msgspec.json.decode(store.get_escrow("billed") or b"", type=EscrowRecord)
    assert record.info.amount == 80_000
    raw = store._db.execute("SELECT info FROM peers").fetchone()[0]
    resources = json.loads(raw)["resources"]
    assert resources["price_units"] == {"low": 1_000_000, "high": 6_250_000}
    assert resources["claimed_units"] == 1_500_000
    assert "prices" not in resources and "ntx_claimed" not in resources
    decoded = msgspec.json.decode(raw, type=api.Peer)
    assert decoded.resources is not None and decoded.resources.cpu_mhz == 4000
    store.close()
