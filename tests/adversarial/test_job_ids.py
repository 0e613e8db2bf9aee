"""Job ids (and chat ids) from a stranger never become paths: a hostile consumer sends every
job message with ids made to leave ``state/jobs`` or to reach another consumer's job, against
a real provider daemon running the process executor; an honest consumer's job on the same
provider completes before and after, its log and results untouched."""

from __future__ import annotations

import contextlib
import hashlib
import os
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest
import trio

from engine.domain import wire
from engine.domain.safe_paths import is_job_id
from tests.adversarial.hostile import JOB_PROTOCOL, HostilePeer, open_job, seal_job
from tests.conftest import run_cli
from tests.daemon_harness import Daemon, wait_for
from tests.daemons.test_jobs_e2e import _pair, _state, _submit, scripts

__all__ = ["scripts"]

CHAT_PROTOCOL = "/nunet/chat/1.0.0"


def _messages(job_id: Any, peer: HostilePeer, script_url: str) -> list[dict[str, Any]]:
    """Every job message a consumer may send first on a stream, with ``job_id``."""
    spec = {"framework": "scikit-learn", "script_url": script_url, "expected_minutes": 1}
    return [
        {"t": "offer", "v": 1, "job_id": job_id, "spec": spec, "consumer": peer.peer_id},
        {"t": "confirm", "v": 1, "job_id": job_id, "total_ntx": 0.0},
        {"t": "follow", "v": 1, "job_id": job_id, "after_seq": -1},
        {"t": "fetch_results", "v": 1, "job_id": job_id},
        {"t": "cancel", "v": 1, "job_id": job_id},
        {"t": "countersign", "v": 1, "job_id": job_id, "receipt": "{}"},
    ]


def _ask_all(
    peer: HostilePeer, provider_id: str, messages: list[dict[str, Any]]
) -> list[list[bytes]]:
    """Each message on its own stream, several at a time (opening a stream takes a second
    on a busy machine), and the frames that came back on each until EOF or a reset."""
    from libp2p.custom_types import TProtocol

    from engine.network.host import peer_id_of

    async def ask(message: dict[str, Any], limit: trio.CapacityLimiter) -> list[bytes]:
        async with limit:
            with trio.fail_after(20):
                stream = await peer.host.new_stream(
                    peer_id_of(provider_id), [TProtocol(JOB_PROTOCOL)]
                )
            frames: list[bytes] = []
            try:
                await stream.write(seal_job(peer.identity, message))
                with trio.move_on_after(10):
                    while (frame := await wire.read_frame(stream, 1 << 22)) is not None:
                        frames.append(frame)
            except Exception:  # the victim reset the stream: what came before counts
                pass
            finally:
                with contextlib.suppress(Exception):
                    await stream.reset()
            return frames

    async def ask_all() -> list[list[bytes]]:
        replies: list[list[bytes]] = [[] for _ in messages]
        limit = trio.CapacityLimiter(8)

        async def one(index: int) -> None:
            replies[index] = await ask(messages[index], limit)

        async with trio.open_nursery() as nursery:
            for index in range(len(messages)):
                nursery.start_soon(one, index)
        return replies

    return peer.call(ask_all)


def _stored_ids(daemon: Daemon) -> set[str]:
    db = sqlite3.connect(f"file:{daemon.home.database}?mode=ro", uri=True)
    try:
        rows = db.execute("SELECT DISTINCT job_id FROM job_messages").fetchall()
    finally:
        db.close()
    return {row[0] for row in rows}


def _tree(root: Path) -> set[Path]:
    return {Path(dirpath) / name for dirpath, dirs, files in os.walk(root) for name in dirs + files}


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.timeout(300)  # two real jobs and 126 attacks, on a machine shared with others
def test_hostile_job_ids_are_refused_and_honest_jobs_keep_their_files(
    daemons: Callable[..., Daemon],
    hostile: Callable[..., HostilePeer],
    scripts: str,
    tmp_path: Path,
) -> None:
    provider, consumer = _pair(daemons)
    victim = _submit(consumer, f"{scripts}/iris.py", name="victim")["job_id"]
    wait_for(lambda: _state(consumer, victim) == "completed", "the victim job never ran", 60)
    wait_for(lambda: consumer.cli("job", "show", victim)["results_dir"], "no results fetched", 30)
    jobs_root = provider.home.state_dir / "jobs"
    victim_dir = jobs_root / victim
    results = Path(provider.cli("job", "show", victim)["results_dir"])
    assert results.is_relative_to(victim_dir)
    before = {
        "log": _sha256(victim_dir / "log.jsonl"),
        "results": _sha256(results),
        "consumer_log": run_cli("job", "logs", victim, home=consumer.home).stdout,
    }

    escape = tmp_path / "escaped"
    escape_rel = os.path.relpath(escape, jobs_root)  # ../../../escaped, from state/jobs
    brief_target = (jobs_root / "../../../../tmp/x").resolve()
    brief_existed = brief_target.exists()
    lookalike = victim.replace(victim[0], "\uff10" if victim[0] == "0" else "\u0430", 1)
    bad_ids: list[Any] = [
        "../../../../tmp/x",
        escape_rel,
        f"{escape_rel}/deeper",
        f"x/../{victim}",
        f"./{victim}",
        f"{victim}/../{victim}",
        str(escape),  # absolute
        "/etc",
        f"{victim}\x00",
        "\x00",
        f"{victim}\n",
        f" {victim}",
        lookalike,
        "\u202e" + victim[1:],  # a bidi override in place of the first digit
        victim.upper() if victim.upper() != victim else "ABCDEF012345",
        "a" * 65,
        "a" * 64,
        "",
        12345,
        None,
        [victim],
    ]
    peer = hostile(seed=b"\x42" * 32, bootstrap=[provider.addrs()[0]])
    peer.wait_connected(provider.peer_id)
    tree_before = _tree(tmp_path)

    attacks = [m for bad in bad_ids for m in _messages(bad, peer, f"{scripts}/iris.py")]
    replies = _ask_all(peer, provider.peer_id, attacks)
    kinds = [[open_job(frame).get("t") for frame in frames] for frames in replies]
    # A reset (nothing) or a refusal: never a quote, an update, or results.
    answered = [
        (message["job_id"], message["t"], got)
        for message, got in zip(attacks, kinds, strict=True)
        if any(kind != "refusal" for kind in got)
    ]
    assert answered == []

    # Nothing stored for any of them: the schema refused each before the store saw it.
    assert all(is_job_id(job_id) for job_id in _stored_ids(provider)), _stored_ids(provider)
    # Nothing created anywhere but under a real job's folder.
    assert not escape.exists()
    assert brief_existed or not brief_target.exists()
    created = {
        path
        for path in _tree(tmp_path) - tree_before
        if not path.is_relative_to(provider.home.log_dir)
        and not path.is_relative_to(consumer.home.log_dir)
        and not path.name.startswith("nunet.db")
    }
    assert created == set(), sorted(map(str, created))
    assert all(is_job_id(child.name) for child in jobs_root.iterdir())

    # The victim's log and results are as they were, on both sides.
    assert _sha256(victim_dir / "log.jsonl") == before["log"]
    assert _sha256(results) == before["results"]
    assert run_cli("job", "logs", victim, home=consumer.home).stdout == before["consumer_log"]
    out = consumer.cli("job", "results", victim, "-o", str(tmp_path / "out"))
    assert (Path(out["directory"]) / "outputs" / "metrics.json").exists()

    # A well-formed id still gets an honest answer, and honest jobs still run.
    frames = peer.request(
        provider.peer_id,
        JOB_PROTOCOL,
        [seal_job(peer.identity, {"t": "follow", "v": 1, "job_id": victim})],
    )
    assert [open_job(f)["t"] for f in frames] == ["refusal"]
    again = _submit(consumer, f"{scripts}/iris.py", name="after the attack")["job_id"]
    wait_for(lambda: _state(consumer, again) == "completed", "no honest job after the attack", 60)
    assert "accuracy" in run_cli("job", "logs", again, home=consumer.home).stdout


def test_output_paths_that_leave_the_workspace_are_refused_at_the_offer(
    daemons: Callable[..., Daemon], hostile: Callable[..., HostilePeer], scripts: str
) -> None:
    provider, consumer = _pair(daemons)
    peer = hostile(seed=b"\x43" * 32, bootstrap=[provider.addrs()[0]])
    peer.wait_connected(provider.peer_id)
    evil = (["../../../../keys"], ["/etc/shadow"], ["outputs/\x00"], ["a/\u202eb"], ["./."], [""])
    offers = [
        {
            "t": "offer",
            "v": 1,
            "job_id": f"{index:012x}",
            "spec": {
                "framework": "scikit-learn",
                "script_url": f"{scripts}/iris.py",
                "expected_minutes": 1,
                "outputs": outputs,
            },
            "consumer": peer.peer_id,
        }
        for index, outputs in enumerate(evil)
    ]
    for outputs, frames in zip(evil, _ask_all(peer, provider.peer_id, offers), strict=True):
        answers = [open_job(frame) for frame in frames]
        assert [a["t"] for a in answers] == ["refusal"], (outputs, answers)
        assert "output path" in answers[0]["reason"], answers[0]["reason"]
    job = _submit(consumer, f"{scripts}/iris.py", name="honest")["job_id"]
    wait_for(lambda: _state(consumer, job) == "completed", "no honest job after the offers", 60)


def test_chat_conversation_ids_are_only_what_peers_make(
    daemons: Callable[..., Daemon], hostile: Callable[..., HostilePeer]
) -> None:
    victim = daemons("chat-victim", 12)
    peer = hostile(seed=b"\x44" * 32, bootstrap=[victim.addrs()[0]])
    peer.wait_connected(victim.peer_id)
    for conversation in ("../../x", "a" * 4000, "\x1b[2J", "0123456789abcdef\n", ""):
        hello = {"t": "hello", "v": 1, "conversation": conversation, "request": True}
        reply = peer.call(_chat_reply, peer, victim.peer_id, hello)
        assert reply is not None and reply["t"] == "error", (conversation, reply)
        assert reply["code"] == "bad_conversation"
    assert victim.cli("chat", "list")["requests"] == []
    # The victim still chats with the same peer.
    sent = victim.cli("chat", "send", peer.peer_id, "still here")
    assert sent["status"] == "delivered"
    wait_for(lambda: "still here" in [text for _, text in peer.messages], "no chat after")


async def _chat_reply(peer: HostilePeer, victim: str, frame: dict[str, Any]) -> Any:
    """The victim's answer to one chat frame (it keeps the stream open for more)."""
    from libp2p.custom_types import TProtocol

    from engine.network.host import peer_id_of

    with trio.fail_after(20):
        stream = await peer.host.new_stream(peer_id_of(victim), [TProtocol(CHAT_PROTOCOL)])
        try:
            await stream.write(wire.frame(msgspec.msgpack.encode(frame)))
            data = await wire.read_frame(stream, 1 << 16)
        finally:
            with contextlib.suppress(Exception):
                await stream.reset()
    return None if data is None else msgspec.msgpack.decode(data)
