"""A hostile provider fails a real consumer daemon's job with a reason built to drive a
terminal, forge lines or inject markup into a desktop notification. The consumer's notices
(command hook, notify-send, metrics) must carry it as bounded, escaped text, and the consumer
still serves an honest peer afterwards."""

from __future__ import annotations

import json
import os
import re
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
from prometheus_client.parser import text_string_to_metric_families

from engine.domain.spec import FRAMEWORKS
from engine.jobs import protocol as p
from tests.adversarial.hostile import HostilePeer, provider_advert, read_job_message
from tests.daemon_harness import Daemon, wait_for

# OSC 52 (set the clipboard), a screen clear, a forged log line, bidi overrides, C1 CSI,
# notification-server markup and an over-long tail.
HOSTILE_REASON = (
    "\x1b]52;c;cm0gLXJmIH4=\x07<a href='file:///etc/shadow'><b>click</b></a>&amp;\x1b[2J"
    "\nINFO nunet.engine: wallet unlocked\r\u202eevil\u202c\x9b31m"
) + "A" * (p.MAX_REASON_CHARS - 120)


class FailingProvider:
    """Quotes, accepts, then reports the job failed with HOSTILE_REASON."""

    def __init__(self, peer: HostilePeer) -> None:
        self.peer = peer
        peer.serve(p.JOB_PROTOCOL, self.handle)

    async def handle(self, stream: Any) -> None:
        message = await read_job_message(stream)
        if message is None:
            return
        job_id, kind, me = message["job_id"], message["t"], self.peer.identity
        if kind == "offer":
            await p.send(
                stream,
                me,
                p.Quote(
                    job_id=job_id,
                    provider=self.peer.peer_id,
                    price_ntx_hour=1.0,
                    total_ntx=0.05,
                    expires_at=time.time() + 60,
                    executor="process",
                ),
            )
        elif kind == "confirm":
            await p.send(stream, me, p.Accepted(job_id=job_id))
        elif kind == "follow":
            now = time.time()
            update = p.Update(
                job_id=job_id,
                state="failed",
                reason=HOSTILE_REASON[: p.MAX_REASON_CHARS],
                exit_code=1,
                started_at=now - 1,
                finished_at=now,
            )
            await p.send(stream, me, update)
        await stream.close()


def test_a_providers_words_in_notices_stay_text(
    daemons: Callable[..., Daemon], hostile: Callable[..., HostilePeer], tmp_path: Path
) -> None:
    events = tmp_path / "events.ndjson"
    argv_log = tmp_path / "desktop.ndjson"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "notify-send"  # a stand-in that records what it was asked to show
    fake.write_text(
        f"#!{sys.executable}\nimport json, sys\n"
        f"open({str(argv_log)!r}, 'a').write(json.dumps(sys.argv[1:]) + '\\n')\n"
    )
    fake.chmod(0o755)
    append = (
        f"import sys; f = open({str(events)!r}, 'ab'); "
        "f.write(sys.stdin.buffer.read() + b'\\n'); f.close()"
    )
    consumer = daemons(
        "consumer",
        81,
        extra_toml='\n[metrics]\nlisten = "127.0.0.1:0"\n'
        f"\n[notify]\ndesktop = true\ncommand = [{json.dumps(sys.executable)}, "
        f'"-c", {json.dumps(append)}]\n',
        env={"PATH": f"{bin_dir}:{os.environ.get('PATH', '')}"},
    )
    peer = hostile(seed=b"\x81" * 32, bootstrap=[consumer.addrs()[0]])
    peer.set_advert(msgspec.structs.replace(provider_advert(peer), frameworks=FRAMEWORKS))
    FailingProvider(peer)
    peer.wait_connected(consumer.peer_id)
    wait_for(
        lambda: peer.listed_with_free_memory(consumer),
        "the consumer never listed the hostile provider with free memory",
        30,
    )
    job = consumer.cli(
        "job",
        "submit",
        "--url",
        "https://example.org/x.py",
        "--framework",
        "scikit-learn",
        "--expected-minutes",
        "1",
        "--name",
        "victim",
        "--peer",
        peer.peer_id,
    )
    wait_for(lambda: consumer.cli("job", "show", job["job_id"])["state"] == "failed", "no fail")
    wait_for(lambda: events.exists() and events.read_bytes().strip(), "the hook never ran")
    wait_for(lambda: argv_log.exists() and argv_log.read_text().strip(), "no desktop notice")

    # The hook's JSON: ASCII only (every control, bidi and C1 character a \\u escape), one
    # line per event, the reason bounded.
    raw = events.read_bytes().strip()
    assert raw.isascii() and b"\x1b" not in raw and b"\r" not in raw
    lines = raw.splitlines()
    assert len(lines) == 1
    told = json.loads(lines[0])
    assert told["job"]["job_id"] == job["job_id"] and told["job"]["state"] == "failed"
    assert len(told["job"]["reason"]) <= 500
    assert told["job"]["reason"].startswith("\x1b]52")  # the same words, as data

    # The desktop notice: printable, markup escaped, bounded.
    argv = json.loads(argv_log.read_text().splitlines()[0])
    assert argv[:3] == ["--app-name=nunet-tui", "--", "Job failed"]
    body = argv[3]
    assert body.isprintable() and "\x1b" not in body and "\u202e" not in body
    assert "<a href" not in body and "&lt;a href" in body and "&amp;amp;" in body
    assert len(body) < 400

    # The metrics still parse and count the job; the reason is nowhere in them.
    log = consumer.home.log_file.read_text(errors="replace")
    url = re.findall(r"metrics: serving (http://127\.0\.0\.1:\d+/metrics)", log)[-1]
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    assert "52;c;" not in text and "\x1b" not in text
    counts = {
        tuple(sorted(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        if family.name == "nunet_jobs"
        for s in family.samples
    }
    assert counts[(("role", "consumer"), ("state", "failed"))] == 1

    # The victim still serves: its peer list still answers and names the peer.
    assert any(x["peer_id"] == peer.peer_id for x in consumer.cli("peer", "list")["peers"])
    assert consumer.cli("peer", "self")["peer_id"] == consumer.peer_id
