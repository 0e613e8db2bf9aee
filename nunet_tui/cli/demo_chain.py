"""The demo sandbox's chain: the local ledger (``nunet-ledger``), the reference oracle
(``nunet-oracle``), and the nodes' wallets funded from the ledger's faucet.

Their command lines, their environment (:func:`chain_env`: pycardano's run-time type checks
off, sandbox only), the ready line each prints once it serves, and :func:`fund_wallet`. Both
start strategies (demo_start.py) start the same ledger and oracle, one as fresh interpreters,
the other forked from the chain's zygote; this is what they share.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from engine import api
from engine.errors import EngineError
from nunet_tui.cli.demo_sandbox import Child, Progress, Sandbox

if TYPE_CHECKING:
    # a type only: fund_wallet is given a node's client (demo_sandbox.node_client)
    from engine.control_client import ControlClient


def chain_env(base: Mapping[str, str] = os.environ) -> dict[str, str]:
    """``base`` for the sandbox's chain: its zygote, the ledger, the oracle and the wallet
    maker. SANDBOX ONLY: pycardano's typeguard instrumentation is off (its own
    PYCARDANO_NO_TYPE_CHECK), a second of CPU at the chain zygote's import, on the demo's
    critical path (the nodes wait for their wallets). These processes are our own stand-ins
    on 127.0.0.1; every node keeps pycardano's checks, and so does a real oracle."""
    return {**base, "PYCARDANO_NO_TYPE_CHECK": "1"}


def start_service(sandbox: Sandbox, name: str, *args: str) -> subprocess.Popen[str]:
    """Start ``python -m oracle_client.<name> serve …``; its first stdout line says where."""
    return sandbox.spawn(
        [sys.executable, "-m", f"oracle_client.{name}", "serve", *args],
        stdout=subprocess.PIPE,
        stderr=(sandbox.root / f"{name}.log").open("ab"),
        text=True,
    )


def ready_line(sandbox: Sandbox, name: str, proc: Child) -> dict[str, str]:
    """The JSON line a service prints once it serves (where, and the ledger's NTX unit)."""
    assert proc.stdout is not None
    line = proc.stdout.readline()
    try:
        ready: dict[str, str] = json.loads(line)
    except ValueError:
        raise EngineError(
            "demo", f"the sandbox's {name} did not start; see {sandbox.root / name}.log"
        ) from None
    return ready


def fund_wallet(
    sandbox: Sandbox,
    client: ControlClient | Any,
    ada: int,
    ntx: int,
    ledger_up: threading.Event | None = None,
    proc: Child | None = None,
    address: str | None = None,
) -> str | None:
    """A sandbox node's wallet, with test ADA and NTX from the ledger's faucet.

    ``address``: the wallet the sandbox made in the node's home before it started
    (sandbox_wallets.py). Otherwise the node makes one first, while the ledger may still be
    starting: that loads pycardano in the node (seconds of CPU), and only the faucet needs
    the ledger. None when the node's process ended while waiting."""
    import httpx

    if address is None:
        address = client.call_blocking(api.WalletNew(), timeout=60).wallet.address
    while ledger_up is not None and not ledger_up.wait(0.1):
        if proc is not None and proc.poll() is not None:
            return None
    response = httpx.post(
        f"{sandbox.ledger_url}/v0/ledger/faucet",
        json={"address": address, "ada": ada, "ntx": ntx, "note": "demo"},
        timeout=30,
    )
    response.raise_for_status()
    return str(address)


def wait_ledger_then_oracle(
    sandbox: Sandbox,
    ledger: subprocess.Popen[str],
    oracle_port: int,
    progress: Progress,
    ledger_up: threading.Event,
) -> None:
    """The spawned start's chain: the ledger's ready line, then the oracle started and its."""
    ready = ready_line(sandbox, "ledger", ledger)
    progress("ledger up")
    ledger_up.set()  # the faucet is all the nodes wait for; the oracle starts meanwhile
    oracle = start_service(sandbox, "oracle_server", *oracle_args(sandbox, oracle_port, ready)[1:])
    ready_line(sandbox, "oracle", oracle)
    progress("oracle up")


def ledger_args(sandbox: Sandbox, port: int) -> list[str]:
    """``nunet-ledger``'s arguments, serving on ``port`` (chosen up front: demo_start.py)."""
    root = sandbox.root
    return ["serve", "--db", str(root / "ledger.db"), "--dev", "--port", str(port)]


def oracle_args(sandbox: Sandbox, port: int, ready: dict[str, str]) -> list[str]:
    """``nunet-oracle``'s arguments, serving on ``port``; ``ready``: the ledger's ready line."""
    root = sandbox.root
    return [
        "serve",
        *("--db", str(root / "oracle.db"), "--key-file", str(root / "oracle.key")),
        *("--ledger-url", ready["url"], "--ntx-unit", ready["ntx_unit"]),
        *("--port", str(port)),
    ]
