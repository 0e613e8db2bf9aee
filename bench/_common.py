"""Shared by the benchmarks: a throwaway home and the project's interpreter."""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PYTHON = sys.executable


def fresh_home() -> Path:
    return Path(tempfile.mkdtemp(prefix="nunet-bench-"))


def cli(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PYTHON, "-m", "nunet_tui", "--home", str(home), *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        check=True,
    )


def summary(label: str, samples: list[float], unit: str = "s", goal: float | None = None) -> str:
    median = statistics.median(samples)
    text = (
        f"{label}: median {median:.3f} {unit}, min {min(samples):.3f}, max {max(samples):.3f} "
        f"(n={len(samples)})"
    )
    if goal is not None:
        verdict = "met" if median < goal else "MISSED"
        text += f"; goal < {goal} {unit}: {verdict} ({median / goal:.2f}x goal)"
    return text


def serve_directory(root: Path) -> str:
    """Serve ``root`` over HTTP on 127.0.0.1 from a daemon thread; its base URL."""
    import functools
    import http.server
    import threading

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass  # a line per request would drown the figures

    class QuietServer(http.server.ThreadingHTTPServer):
        def handle_error(self, request: object, client_address: object) -> None:
            pass  # a client's reset (a bench that cuts links) is not the figures' business

    handler = functools.partial(Quiet, directory=str(root))
    server = QuietServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_address[1]}"


def rss_mb(pid: int) -> float:
    """A process's resident memory now, from /proc."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise SystemExit(f"no VmRSS for pid {pid}")


class DaemonPair:
    """A provider and a consumer daemon on 127.0.0.1 (process executor unless told), the
    provider onboarded on ``channel``, the consumer bootstrapped from it and seeing it."""

    def __init__(self, root: Path, *, channel: str, docker: bool = False) -> None:
        self.procs: list[subprocess.Popen[bytes]] = []
        try:
            self._start(root, channel, docker)
        except BaseException:  # a daemon that never came up: none left behind
            self.close()
            raise

    def _start(self, root: Path, channel: str, docker: bool) -> None:
        import time

        from engine import api
        from engine.config import Paths
        from nunet_tui.cli.demo_sandbox import (
            DEMO_ADDRESS,
            node_client,
            node_config,
            start_daemon,
            wait_listening,
        )

        self.provider_home = Paths.for_home(root / "provider")
        self.provider_home.ensure()
        config = node_config(4, 3000, 16_000, None, (1.0, 2.0, 4.0))
        if docker:
            config = config.replace('executors = ["process"]', 'executors = ["docker"]')
        self.provider_home.config_file.write_text(config)
        self.procs.append(start_daemon(self.provider_home, root / "provider.log"))
        self.provider = node_client(self.provider_home, self.procs[-1])
        self.boot = wait_listening(self.provider)
        self.provider.call_blocking(
            api.OnboardRequest(memory_mb=8000, cpu_mhz=6000, address=DEMO_ADDRESS, channel=channel)
        )
        consumer_home = Paths.for_home(root / "consumer")
        consumer_home.ensure()
        consumer_home.config_file.write_text(
            node_config(4, 3000, 16_000, self.boot, (1.0, 2.0, 4.0))
        )
        self.procs.append(start_daemon(consumer_home, root / "consumer.log"))
        self.consumer = node_client(consumer_home, self.procs[-1])
        wait_listening(self.consumer)
        while not self.consumer.call_blocking(api.ListPeers()).peers:
            time.sleep(0.1)

    def close(self) -> None:
        import contextlib

        for name in ("consumer", "provider"):
            if (client := getattr(self, name, None)) is not None:
                with contextlib.suppress(Exception):
                    client.close()
        for proc in self.procs:
            proc.terminate()
        for proc in self.procs:
            with contextlib.suppress(Exception):
                proc.wait(10)
