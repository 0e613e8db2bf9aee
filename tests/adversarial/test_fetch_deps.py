"""Dependencies are a fetch too: a hostile consumer names a pip requirement with a URL
(``pkg @ http://<provider's loopback>/…``, ``file://`` on the provider's disk) to make the
provider's pip fetch what the fetch policy would refuse. The provider refuses the offer with
the reason, the server behind the URL never sees a request, and an honest job still runs."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Callable, Iterator

import pytest

from tests.adversarial.hostile import JOB_PROTOCOL, HostilePeer, open_job, seal_job
from tests.daemon_harness import Daemon, wait_for
from tests.daemons.test_jobs_e2e import _pair, _state, _submit, scripts

__all__ = ["scripts"]


@pytest.fixture
def secret_server() -> Iterator[tuple[str, list[str]]]:
    """A service on the provider's loopback that records every request it gets."""
    seen: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen.append(self.path)
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"secret")

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}", seen
    server.shutdown()
    server.server_close()


@pytest.mark.timeout(300)
def test_a_dependency_with_a_url_is_refused_at_the_offer(
    daemons: Callable[..., Daemon],
    hostile: Callable[..., HostilePeer],
    scripts: str,
    secret_server: tuple[str, list[str]],
) -> None:
    provider, consumer = _pair(daemons)
    secret, seen = secret_server
    peer = hostile(bootstrap=[provider.addrs()[0]])
    peer.wait_connected(provider.peer_id)
    for dep in (
        f"leak @ {secret}/leak-1.0-py3-none-any.whl",
        "keys @ file:///etc/shadow",
        f"leak[extra] @ {secret}/x.tar.gz ; python_version > '3'",
    ):
        offer = {
            "t": "offer",
            "v": 1,
            "job_id": "0123456789ab",
            "spec": {
                "framework": "scikit-learn",
                "script_url": f"{scripts}/iris.py",
                "expected_minutes": 1,
                "deps": [dep],
            },
            "consumer": peer.peer_id,
        }
        replies = [
            open_job(f)
            for f in peer.request(provider.peer_id, JOB_PROTOCOL, [seal_job(peer.identity, offer)])
        ]
        assert [r["t"] for r in replies] == ["refusal"], (dep, replies)
        assert "names a URL" in replies[0]["reason"], replies[0]
    assert seen == []
    # The victim carries on for an honest consumer.
    job_id = _submit(consumer, f"{scripts}/iris.py")["job_id"]
    wait_for(lambda: _state(consumer, job_id) == "completed", "the honest job never ran", 90)
    assert seen == []
