"""``nunet-tui demo``: a sandbox compute market on 127.0.0.1, then the app in consumer mode.

Three provider daemons with different (declared) machines, a consumer node, an HTTP server
for the example jobs, the local ledger (``nunet-ledger``) and the reference oracle
(``nunet-oracle``), all in a fresh folder. Every node has a wallet funded from the ledger's
faucet, so jobs are paid through the escrow exactly as on a real network. Offline: the
providers run jobs with the process executor (the sandbox is a trusted local network).
``--no-tui`` starts the same sandbox, makes the consumer a daemon too, prints one JSON line
describing it (with ``ledger_url`` and ``oracle_url``), and runs until interrupted.
Everything stops when the app quits.

Start-up runs in parallel (ports and the first identities are chosen up front, so every node
can be configured before any is running) and says what it is doing on stderr. By default the
processes are forked from two zygotes (zygote.py) that import pycardano, and libp2p with the
engine, once instead of in every process, and the nodes' wallets are made before the nodes
start (sandbox_wallets.py); ``NUNET_TUI_DEMO_START=spawn`` starts a fresh interpreter for
each instead. SIGINT or SIGTERM at any moment, also during start-up, stops every process the
sandbox started; the last line says where its files are and whether they were removed.

Here: :func:`run_demo` and the app's side (the app attached to the sandbox's consumer, and
the note that follows the examples' frameworks installing in the background). The sandbox's
processes, signals and node configs are in demo_sandbox.py, its ledger, oracle and wallet
funding in demo_chain.py, its start-up (the plan, the two strategies) in demo_start.py.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path
from types import FrameType
from typing import Any

from nunet_tui.cli.demo_sandbox import Interrupted, Progress, Sandbox, Signals
from nunet_tui.cli.demo_start import start_sandbox


def _say(started: float) -> Progress:
    def say(message: str) -> None:
        print(f"demo: {message} ({time.monotonic() - started:.1f} s)", file=sys.stderr, flush=True)

    return say


def _finish(sandbox: Sandbox | None, root: Path, made_root: bool, ok: bool) -> None:
    """The last line: where the sandbox's files are, and whether they are gone."""
    if made_root and ok:
        shutil.rmtree(root, ignore_errors=True)
        gone = not root.exists()
        message = f"removed its files ({root})" if gone else f"could not remove {root}"
    else:
        why = "kept (--root)" if not made_root else "kept for their logs"
        message = f"its files are in {root}, {why}; remove them with: rm -rf {root}"
    print(f"demo: stopped; {message}", file=sys.stderr, flush=True)


def run_demo(*, tui: bool, root: Path | None = None) -> int:
    started = time.monotonic()
    say = _say(started)
    made_root = root is None
    root = Path(root or tempfile.mkdtemp(prefix="nunet-demo-"))
    signals = Signals()
    signals.install()
    if (extra := _extra_log()) is not None:
        say(f"the example jobs' frameworks are installing in the background: tail -f {extra}")
    elif missing := _missing_frameworks():
        # The sandbox's providers run jobs with this Python and offer only the frameworks it
        # has: without them the examples are refused ("framework ... not offered").
        say(
            f"this Python lacks {', '.join(missing)}: the examples that need them will find no "
            "provider; install them with: pip install 'nunet-tui[demo]'"
        )
    sandbox: Sandbox | None = None
    ok = False
    try:
        # The consumer is a daemon of the sandbox in both modes, started and funded with the
        # providers; the app attaches to it. Embedded in the app, its engine started only
        # once the sandbox was up, and ready came ~3 s later (7.4 s against 4.7 s).
        if tui:  # the app's modules load while the sandbox starts, not after it
            threading.Thread(target=_preload_app, name="demo-preload", daemon=True).start()
        sandbox = start_sandbox(root, consumer_daemon=True, progress=say, signals=signals)
        sandbox.removed_on_exit = made_root
        if not tui:
            say("ready")
            print(json.dumps(sandbox.describe()), flush=True)
            with contextlib.suppress(Interrupted):
                while True:
                    time.sleep(3600)
            ok = True
            return 0
        status = _run_app(sandbox, say)
        ok = status == 0
        return status
    except Interrupted as exc:
        ok = sandbox is not None  # interrupted once it ran: a normal end
        return 128 + exc.signum
    finally:
        signals.stopping = True
        if sandbox is not None:
            sandbox.stop()
        signals.restore()
        _finish(sandbox, root, made_root, ok)


def _preload_app() -> None:
    import importlib

    for name in ("engine.connect", "engine.control_client", "engine.reconnect", "nunet_tui.app"):
        importlib.import_module(name)


def _extra_log() -> Path | None:
    """scripts/start.sh installs the example jobs' frameworks in the background and names
    its log here; None once that install is over (or for any other start)."""
    name = os.environ.get("NUNET_TUI_DEMO_EXTRA_LOG")
    if not name:
        return None
    log = Path(name)
    return None if _extra_state(log) == "done" else log


def _missing_frameworks() -> list[str]:
    """The frameworks the example jobs use that this Python (the sandbox's providers') lacks."""
    from engine.jobs.executors.process import FRAMEWORK_MODULES, importable

    found = importable(sys.executable, tuple(FRAMEWORK_MODULES.values()))
    return [name for name, module in FRAMEWORK_MODULES.items() if module not in found]


def _extra_state(log: Path) -> str:
    try:
        with log.open("rb") as handle:
            handle.seek(max(0, log.stat().st_size - 4096))
            lines = handle.read().decode(errors="replace").strip().splitlines()
    except OSError:
        return "unknown"
    last = lines[-1] if lines else ""
    if last == "done":
        return "done"
    return "failed" if last.startswith("failed") else "installing"


def _follow_extra_install(app: Any, log: Path) -> None:
    """Say in the app that the frameworks are still coming, and again when they are in."""
    from nunet_tui.cli.output import safe_lines

    deadline = time.monotonic() + 30
    while not app.is_running and time.monotonic() < deadline:
        time.sleep(0.2)
    if not app.is_running:
        return
    place = safe_lines(str(log))
    notify = functools.partial(_notify_from_thread, app)
    notify(
        f"Installing PyTorch and TensorFlow for the examples in the background ({place}); "
        "iris needs only scikit-learn, which comes first.",
        timeout=15,
    )
    while app.is_running:
        state = _extra_state(log)
        if state != "installing":
            text = (
                "The examples' frameworks are installed."
                if state == "done"
                else f"Installing the examples' frameworks failed: see {place}"
            )
            notify(text, severity="information" if state == "done" else "error")
            return
        time.sleep(2)


def _notify_from_thread(app: Any, text: str, **kwargs: Any) -> None:
    with contextlib.suppress(RuntimeError):  # the app quit meanwhile
        app.call_from_thread(app.notify, text, **kwargs)


def _run_app(sandbox: Sandbox, say: Progress) -> int:
    from engine.connect import open_client
    from engine.logsetup import configure
    from nunet_tui.app import NunetApp

    configure(sandbox.consumer)
    # Set to consumer mode and funded by the sandbox already; reconnect: as any attached app.
    client = open_client(sandbox.consumer, attach=True, reconnect=True)
    try:
        say("ready")
        app = NunetApp(client=client, examples=sandbox.describe())
        if (extra := _extra_log()) is not None:
            threading.Thread(
                target=_follow_extra_install, args=(app, extra), name="demo-extra", daemon=True
            ).start()

        def quit_app(signum: int, frame: FrameType | None) -> None:
            # Inside Textual's loop an exception would leave the terminal raw: ask it to exit.
            app.exit()

        signal.signal(signal.SIGTERM, quit_app)
        signal.signal(signal.SIGINT, quit_app)
        app.run()
        return 0
    finally:
        client.close()
