"""Offer flood: one peer sends 1,000 job offers (valid and invalid, each with its own job id)
to a real provider daemon. Most are refused (rate limit, admission, the bound on open
quotes), nothing of them reaches the provider's database, its memory and database barely
grow, the few quotes it made are dropped at their TTL, and an honest job still completes.
The same hostile peer also advertises a machine too small for any job: a consumer that
picks it by hand is told why before any offer is sent.

Before the fix: 1,000 offers grew the provider from 107 to 366 MB and its database by 260 MB
(every offer was stored before any check; quotes were only dropped on Confirm).
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest
import trio

from engine.domain import wire
from engine.jobs.provider import OFFER_BURST, OFFERS_PER_S, QUOTES_PER_PEER
from tests.adversarial.hostile import JOB_PROTOCOL, HostilePeer, open_job, provider_advert, seal_job
from tests.adversarial.test_stream_exhaustion import attacked
from tests.conftest import run_cli
from tests.daemon_harness import Daemon, wait_for
from tests.daemons.test_jobs_e2e import _state, _submit, scripts

__all__ = ["scripts"]

OFFERS = 1000
QUOTE_TTL_S = 5.0
# Measured on 2 busy cores: RSS +4 MB and the database (file and WAL) +0.8 MB over the two
# minutes of the flood and the eviction after it, the honest job, heartbeats and peer updates
# writing meanwhile; before the fix the same flood cost 259 MB of RSS and 260 MB of database.
RSS_GROWTH_LIMIT_MB = 20.0
DB_GROWTH_LIMIT_MB = 2.0


def _db_bytes(db: Path) -> int:
    return sum(f.stat().st_size for f in (db, db.with_name(db.name + "-wal")) if f.exists())


def _job_messages(db: Path, job_ids: list[str]) -> tuple[int, int]:
    """(all rows, rows of these job ids) in the provider's job_messages table."""
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5) as conn:
        total = conn.execute("SELECT count(*) FROM job_messages").fetchone()[0]
        ours = 0
        for start in range(0, len(job_ids), 500):
            chunk = job_ids[start : start + 500]
            marks = ",".join("?" * len(chunk))
            ours += conn.execute(
                f"SELECT count(*) FROM job_messages WHERE job_id IN ({marks})", chunk
            ).fetchone()[0]
    return int(total), int(ours)


def _offers(peer: HostilePeer, url: str) -> list[tuple[str, bytes]]:
    """(job id, framed signed offer): one in five valid, the rest each wrong in its own way."""
    valid = {"framework": "scikit-learn", "script_url": url, "expected_minutes": 1}
    wrong: list[dict[str, Any]] = [
        {**valid, "tier": "high"},  # the provider has 4,000 MHz, high needs 8,000
        {**valid, "framework": "cobol"},
        {**valid, "unknown_field": 1},
        {**valid, "name": "n" * 5000},  # over the schema's bound: not even decoded
    ]
    made = []
    for i in range(OFFERS):
        job_id = f"{i:012x}"
        spec = valid if i % 5 == 0 else wrong[i % 5 - 1]
        consumer = peer.peer_id if i % 7 else "12D3KooWsomeoneelse"  # some name another peer
        payload = {"t": "offer", "v": 1, "job_id": job_id, "spec": spec, "consumer": consumer}
        made.append((job_id, seal_job(peer.identity, payload)))
    return made


async def _ask_all(
    peer: HostilePeer, victim: str, requests: list[tuple[str, bytes]], concurrency: int
) -> list[tuple[str, list[bytes]]]:
    """Each request on its own stream (a few at once): what came back for each job id."""
    from libp2p.custom_types import TProtocol

    from engine.network.host import peer_id_of

    answers: list[tuple[str, list[bytes]]] = []
    gate = trio.Semaphore(concurrency)

    async def one(job_id: str, frame: bytes) -> None:
        got: list[bytes] = []
        async with gate:
            with trio.move_on_after(15):
                try:
                    stream = await peer.host.new_stream(
                        peer_id_of(victim), [TProtocol(JOB_PROTOCOL)]
                    )
                    await stream.write(frame)
                    while (body := await wire.read_frame(stream, 1 << 20)) is not None:
                        got.append(body)
                    await stream.close()
                except Exception:
                    pass  # reset: an answer of its own (nothing came back)
        answers.append((job_id, got))

    async with trio.open_nursery() as nursery:
        for job_id, frame in requests:
            nursery.start_soon(one, job_id, frame)
    return answers


def _sleep_past(expires_at: float) -> None:
    """Until a quote's expiry (POSIX seconds, the provider's clock: this machine's) is past."""
    time.sleep(max(0.0, expires_at - time.time()) + 0.2)


def _kinds(answers: list[tuple[str, list[bytes]]]) -> dict[str, dict[str, Any]]:
    """job id -> the payload of its one answer ({} when the stream was reset)."""
    return {job_id: open_job(got[0]) if got else {} for job_id, got in answers}


# Each offer costs py-libp2p about 10 ms of CPU on each end (a stream, its negotiation, Noise):
# 20 s of CPU for the flood, which takes minutes of wall time on 2 busy cores.
@pytest.mark.timeout(300)
def test_an_offer_flood_is_refused_unstored_and_bounded(
    daemons: Callable[..., Daemon], hostile: Callable[..., HostilePeer], scripts: str
) -> None:
    at = attacked(daemons, hostile, b"\x61" * 32, {"NUNET_JOBS_QUOTE_TTL_S": str(QUOTE_TTL_S)})
    provider, consumer, peer, victim = at.provider, at.consumer, at.peer, at.victim
    # The attacker also poses as a provider too small for anything (low needs 1,000 MHz).
    offered: list[Any] = []

    async def count_offers(stream: Any) -> None:
        offered.append(stream)
        await stream.reset()

    peer.serve(JOB_PROTOCOL, count_offers)
    peer.set_advert(msgspec.structs.replace(provider_advert(peer), cpu_mhz=500))

    db = provider.home.database
    url = f"{scripts}/iris.py"
    requests = _offers(peer, url)
    job_ids = [job_id for job_id, _ in requests]
    rows_before, _ = _job_messages(db, job_ids)
    db_before = _db_bytes(db)

    flood: dict[str, Any] = {}

    # One valid offer first, on its own: which of the flood's offers the rate limit's burst
    # judges is a race (one in five is valid), and a burst of invalid ones only left nothing
    # quoted to test the quotes' TTL on (CI failed so, ~1 run in 10).
    first = f"{5:012x}"  # valid, from this peer
    alone = [r for r in requests if r[0] == first]
    rest = [r for r in requests if r[0] != first]

    def run_flood() -> None:
        began = time.monotonic()
        try:
            flood["answers"] = peer.call(_ask_all, peer, victim, alone, 1) + peer.call(
                _ask_all, peer, victim, rest, 16
            )
        except BaseException as exc:  # reported to the test thread
            flood["error"] = exc
        flood["seconds"] = time.monotonic() - began

    attack = threading.Thread(target=run_flood, daemon=True)
    attack.start()
    # While the flood runs, an honest consumer's job goes to the same provider.
    honest = _submit(consumer, url, name="honest")
    assert honest["provider"] == victim
    attack.join(150)
    assert "seconds" in flood and "error" not in flood, flood
    answers = _kinds(flood["answers"])
    flood_s = float(flood["seconds"])
    quoted = [job_id for job_id, a in answers.items() if a.get("t") == "quote"]
    refused = {job_id: a["reason"] for job_id, a in answers.items() if a.get("t") == "refusal"}
    rate_limited = [j for j, reason in refused.items() if reason.startswith("too many offers")]
    reset = [job_id for job_id, a in answers.items() if not a]
    print(
        f"\noffer flood: {len(quoted)} quoted, {len(refused)} refused "
        f"({len(rate_limited)} rate-limited), {len(reset)} reset, in {flood_s:.1f} s"
    )
    # Every offer was answered, or reset (the schema refuses an overlong name; streams past
    # the per-peer cap); almost all were refused.
    assert len(answers) == OFFERS
    assert len(quoted) + len(refused) + len(reset) == OFFERS
    assert len(quoted) <= 0.1 * OFFERS
    # Only what the rate limit let through was judged at all: the rest was rate-limited.
    allowed = OFFER_BURST + OFFERS_PER_S * flood_s + 2
    judged = len(quoted) + len(refused) - len(rate_limited)
    assert judged <= allowed
    assert len(rate_limited) >= OFFERS - len(reset) - allowed
    # Only valid offers were quoted, no more at a time than the per-peer bound (quotes expire
    # during a long flood, and the peer may then hold new ones).
    assert len(quoted) <= QUOTES_PER_PEER * (2 + flood_s // QUOTE_TTL_S), quoted
    assert all(int(job_id, 16) % 5 == 0 for job_id in quoted)

    # Nothing of the flood was stored: the only new rows are the honest job's.
    rows_after, hostile_rows = _job_messages(db, job_ids)
    assert hostile_rows == 0
    assert rows_after - rows_before == _job_messages(db, [honest["job_id"]])[1]
    db_growth = (_db_bytes(db) - db_before) / 2**20

    # The quotes it made are dropped at their TTL: a Confirm of the last to go, asked once it
    # expired, finds none. (A Confirm's answer is final, issue 20 §1: the quote is asked about
    # once, after its expiry; a fresh quote below shows one held, then dropped.)
    assert quoted, "no offer was quoted: the flood tested nothing about quotes"
    late = max(quoted, key=lambda job_id: answers[job_id]["expires_at"])  # the last to go

    def confirm_answer(job_id: str) -> str:
        confirm = seal_job(
            peer.identity, {"t": "confirm", "v": 1, "job_id": job_id, "total_ntx": 999}
        )
        answer = _kinds(peer.call(_ask_all, peer, victim, [(job_id, confirm)], 1))[job_id]
        return str(answer.get("reason", ""))

    gone = ("no quote for this job here", "quote expired")
    _sleep_past(answers[late]["expires_at"])
    assert confirm_answer(late).startswith(gone)
    # The honest consumer's job, submitted during the flood, completed; it had the provider's
    # one slot, which the fresh offers below need free (a fast flood ends before the job does).
    wait_for(lambda: _state(consumer, honest["job_id"]) == "completed", "honest job failed", 60)
    wait_for(
        lambda: _state(provider, honest["job_id"]) == "completed",
        "the provider never ended the honest job",
        30,
    )
    # The peer may hold new quotes again, up to its bound.
    spec = {"framework": "scikit-learn", "script_url": url, "expected_minutes": 1}
    fresh = []
    for i in range(QUOTES_PER_PEER + 1):
        job_id = f"f{i:011x}"
        payload = {"t": "offer", "v": 1, "job_id": job_id, "spec": spec, "consumer": peer.peer_id}
        fresh.append((job_id, seal_job(peer.identity, payload)))
    # One at a time, each asked again while the rate limit (emptied by the flood, refilling
    # at OFFERS_PER_S) answers it: only the bound on open quotes is under test here.
    again: dict[str, Any] = {}

    def answered_past_rate_limit(job_id: str, offer: bytes) -> bool:
        again[job_id] = _kinds(peer.call(_ask_all, peer, victim, [(job_id, offer)], 1))[job_id]
        return not str(again[job_id].get("reason", "")).startswith("too many offers")

    for job_id, offer in fresh:
        wait_for(
            lambda: answered_past_rate_limit(job_id, offer),  # noqa: B023 (called at once)
            "the rate limit never let an offer through again",
            OFFER_BURST / OFFERS_PER_S + 10,
        )
    assert sorted(a.get("t", "") for a in again.values()) == ["quote"] * QUOTES_PER_PEER + [
        "refusal"
    ], again
    assert any("unconfirmed quotes" in a.get("reason", "") for a in again.values())
    # A fresh quote is held (a Confirm with the wrong amount, which can never start a job,
    # finds it; its refusal is final: asked again, the same), another is dropped at its TTL.
    held = sorted(
        (job_id for job_id, a in again.items() if a.get("t") == "quote"),
        key=lambda job_id: again[job_id]["expires_at"],
    )
    assert confirm_answer(held[-1]) == "confirmed amount differs from quote"
    assert confirm_answer(held[-1]) == "confirmed amount differs from quote"
    _sleep_past(again[held[0]]["expires_at"])
    assert confirm_answer(held[0]).startswith(gone)
    _, hostile_rows = _job_messages(db, [*job_ids, *(job_id for job_id, _ in fresh)])
    assert hostile_rows == 0

    peak = at.watch.stop()
    print(f"RSS {at.baseline:.0f} -> {peak:.0f} MB, database +{db_growth:.2f} MB")
    assert peak - at.baseline < RSS_GROWTH_LIMIT_MB
    assert db_growth < DB_GROWTH_LIMIT_MB

    # A consumer that hand-picks the too-small attacker is refused before any offer.
    wait_for(
        lambda: any(
            p["peer_id"] == peer.peer_id and p.get("resources")
            for p in consumer.cli("peer", "list")["peers"]
        ),
        "the consumer never saw the attacker's advert",
        30,
    )
    picked = run_cli(
        "job",
        "submit",
        "--url",
        url,
        "--framework",
        "scikit-learn",
        "--peer",
        peer.peer_id,
        home=consumer.home,
    )
    assert picked.returncode == 1
    assert "not enough CPU: 500 MHz, the low tier needs 1000 MHz" in picked.stderr
    assert offered == []
