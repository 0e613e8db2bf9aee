"""``nunet-tui wallet …``: new, import, show, balance, unlock, blockfrost.

Secrets come in through a hidden prompt or stdin, never argv (any user can read a process's
arguments in ``ps``). The mnemonic goes out once, from ``wallet new``. Every runner prints
its own output and returns None, so main's generic printer never sees a secret.
"""

from __future__ import annotations

import argparse
import getpass
import sys
import time
from collections.abc import Callable
from typing import Any

from engine import api
from engine.client import EngineClient
from engine.errors import EngineError
from engine.secret_input import read_secret
from nunet_tui.cli.output import show, show_json
from oracle_client.ntx import digits, format_ntx

MNEMONIC_WARNING = (
    "Write these words down, in order, on paper, and keep them offline. They are shown this "
    "once. Anyone who has them controls the wallet's funds; without them a lost keystore "
    "means lost funds."
)
_STDIN_HELP = (
    "reads from stdin when it is not a terminal, else asks without echo; never from the "
    "command line, where other users could read it in `ps`"
)


def add_parsers(sub: Any, common: argparse.ArgumentParser) -> None:
    wallet = sub.add_parser("wallet", help="the Cardano wallet NTX is paid from and to")
    wallet_sub = wallet.add_subparsers(
        dest="wallet_command", metavar="WALLET_COMMAND", required=True
    )
    new = wallet_sub.add_parser(
        "new",
        parents=[common],
        help="make a wallet: a 24-word mnemonic, shown once, kept in the keystore",
    )
    new.add_argument(
        "--cardano", action="store_true", help="a Cardano wallet (the only kind; the default)"
    )
    new.add_argument(
        "--force", action="store_true", help="replace this node's wallet (its mnemonic is deleted)"
    )
    imp = wallet_sub.add_parser(
        "import",
        parents=[common],
        help="restore a wallet from its mnemonic",
        description=f"Restore a wallet from its 12-24 word mnemonic. The mnemonic {_STDIN_HELP}.",
    )
    imp.add_argument("--force", action="store_true", help="replace this node's other wallet")
    wallet_sub.add_parser("show", parents=[common], help="address and network (no secret)")
    wallet_sub.add_parser(
        "balance", parents=[common], help="ADA and NTX at the address ([payments] backend)"
    )
    wallet_sub.add_parser(
        "unlock",
        parents=[common],
        help="give a daemon the keystore passphrase",
        description=f"Unlock (or create) the encrypted keystore. The passphrase {_STDIN_HELP}.",
    )
    wallet_sub.add_parser(
        "blockfrost",
        parents=[common],
        help="keep a Blockfrost project id in the keystore",
        description=f"Store the Blockfrost project id for preprod/mainnet. It {_STDIN_HELP}.",
    )


# --- runners ---------------------------------------------------------------------------------


def _new(args: argparse.Namespace, client: EngineClient) -> None:
    created: api.WalletCreated = _unlocking(client, api.WalletNew(force=args.force))
    if _json(args):
        data = {
            **api.to_builtins(created.wallet),
            "mnemonic": created.mnemonic,
            "replaced": created.replaced,
            "warning": MNEMONIC_WARNING,
        }
        show_json(data)
        return None
    lines = [wallet_text(created.wallet)]
    if created.replaced:
        lines.append(f"replaced  {created.replaced}")
    lines += ["", "RECOVERY PHRASE", *_numbered(created.mnemonic.split()), "", MNEMONIC_WARNING]
    show("\n".join(lines))
    return None


def _import(args: argparse.Namespace, client: EngineClient) -> None:
    mnemonic = _secret("Mnemonic (words separated by spaces, not shown): ", "mnemonic")
    imported: api.WalletImported = _unlocking(
        client, api.WalletImport(mnemonic=mnemonic, force=args.force)
    )
    del mnemonic
    if _json(args):
        show_json({**api.to_builtins(imported.wallet), "replaced": imported.replaced})
    else:
        text = wallet_text(imported.wallet)
        show(text + (f"\nreplaced  {imported.replaced}" if imported.replaced else ""))
    return None


def _show(args: argparse.Namespace, client: EngineClient) -> None:
    info: api.WalletInfo = client.call_blocking(api.WalletShow())
    if _json(args):
        show_json(api.to_builtins(info))
    else:
        show(wallet_text(info))
    return None


def _balance(args: argparse.Namespace, client: EngineClient) -> None:
    balance: api.Balance = _unlocking(client, api.WalletBalance(), timeout=90)
    if _json(args):
        show_json(api.to_builtins(balance))
        return None
    ntx = (
        format_ntx(balance.ntx_units)
        if balance.ntx_units is not None
        else "NTX unknown (set [payments] ntx_policy_id)"
    )
    show(
        f"{digits(balance.lovelace)} ADA  {ntx}\n"
        f"  at {balance.address} ({balance.network}, {balance.backend})"
    )
    return None


def _unlock(args: argparse.Namespace, client: EngineClient) -> None:
    passphrase = _secret("Keystore passphrase: ", "passphrase")
    info: api.KeystoreInfo = client.call_blocking(api.UnlockKeystore(passphrase=passphrase))
    del passphrase
    if _json(args):
        show_json(api.to_builtins(info))
    else:
        show(f"keystore unlocked: {info.location}")
    return None


def _blockfrost(args: argparse.Namespace, client: EngineClient) -> None:
    project_id = _secret("Blockfrost project id (not shown): ", "project id")
    done: api.Done = _unlocking(client, api.SetBlockfrostProjectId(project_id=project_id))
    if _json(args):
        show_json(api.to_builtins(done), indent=None)
    else:
        show(done.message)
    return None


RUNNERS: dict[str, Callable[[argparse.Namespace, EngineClient], Any]] = {
    "wallet new": _new,
    "wallet import": _import,
    "wallet show": _show,
    "wallet balance": _balance,
    "wallet unlock": _unlock,
    "wallet blockfrost": _blockfrost,
}


# --- text ------------------------------------------------------------------------------------


def wallet_text(info: api.WalletInfo) -> str:
    origin = "imported" if info.origin == "import" else "made here"
    stamp = time.strftime("%Y-%m-%d %H:%M", time.localtime(info.created_at))
    lines = [
        f"wallet    {info.chain}, {info.network} (channel {info.channel})",
        f"address   {info.address}",
        f"keys      payment {info.payment_key_hash}",
        f"          stake   {info.stake_key_hash}",
        f"origin    {origin} {stamp}",
    ]
    if info.keystore is not None:
        ks = info.keystore
        where = "encrypted file " + ks.location if ks.backend == "file" else ks.location
        lines.append(f"keystore  {where}" + ("  (locked)" if ks.locked else ""))
    return "\n".join(lines)


def _numbered(words: list[str]) -> list[str]:
    """Four columns, numbered down each column as people copy them onto paper."""
    rows = (len(words) + 3) // 4
    lines = []
    for row in range(rows):
        cells = [f"{i + 1:>2}. {words[i]:<10}" for i in range(row, len(words), rows)]
        lines.append("  " + "  ".join(cells).rstrip())
    return lines


# --- input -----------------------------------------------------------------------------------


def _json(args: argparse.Namespace) -> bool:
    return bool(getattr(args, "json", False))


def _secret(prompt: str, what: str) -> str:
    """A secret from a hidden prompt on a terminal, else from stdin (one line end dropped)."""
    if sys.stdin.isatty():
        return getpass.getpass(prompt)
    return read_secret(sys.stdin, what)


def _unlocking(client: EngineClient, command: api.Command, timeout: float = 60.0) -> Any:
    """Run ``command``; when the keystore wants a passphrase and a person is at the terminal,
    ask for it (twice when choosing a new one), unlock, and run the command again."""
    try:
        return client.call_blocking(command, timeout=timeout)
    except EngineError as exc:
        if exc.code not in ("keystore_locked", "keystore_new") or not sys.stdin.isatty():
            raise
        if exc.code == "keystore_new":
            print("This node's keystore is new: choose its passphrase.", file=sys.stderr)
            passphrase = getpass.getpass("New keystore passphrase: ")
            if getpass.getpass("Same passphrase again: ") != passphrase:
                raise EngineError("wrong_passphrase", "the two passphrases differ") from None
        else:
            passphrase = getpass.getpass("Keystore passphrase: ")
    client.call_blocking(api.UnlockKeystore(passphrase=passphrase))
    del passphrase
    return client.call_blocking(command, timeout=timeout)
