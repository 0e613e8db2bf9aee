"""Wallets for the demo's sandbox nodes, made before their daemons start.

A node makes its wallet with ``wallet new`` (engine/payments/service.py), which loads
pycardano: seconds of CPU in every node, the longest step of a sandbox node's set-up. The
sandbox's chain zygote has pycardano imported already, so one child of it makes every node's
wallet at once and writes it where the node's own ``wallet new`` would: the mnemonic into the
home's encrypted keystore (under the sandbox's passphrase file), the public half into its
database. The daemons then start with a wallet and import pycardano only when a payment
needs it.

``python -m nunet_tui.cli.sandbox_wallets --passphrase-file F --channel C HOME...`` prints one
JSON line ``{HOME: address}``. Run with ``NUNET_SANDBOX_WEAK_KDF=1`` (engine/payments/keystore.py:
sandbox keystores only).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

from engine import identity
from engine.config import Paths
from engine.payments.keystore import FILE_NAME, Keystore, passphrase_sources
from engine.payments.service import KEYSTORE_CHOICE, MNEMONIC
from engine.payments.wallet import derive_keys, generate_mnemonic
from engine.store import Store, WalletRow
from oracle_client.cardano.address import network_for_channel


def make_wallet(paths: Paths, passphrase_file: Path, channel: str) -> str:
    """A new wallet in the (not yet running) node at ``paths``; its address on ``channel``."""
    paths.ensure()
    peer_id = identity.load_or_create(paths.identity_key).peer_id
    keystore = Keystore(
        "file",
        paths.keys_dir / FILE_NAME,
        namespace=peer_id,
        sources=passphrase_sources(os.environ, passphrase_file),
    )
    mnemonic = generate_mnemonic()
    keys = derive_keys(mnemonic)
    keystore.put(MNEMONIC, mnemonic)
    del mnemonic
    store = Store(paths.database)
    try:
        store.save_wallet(
            WalletRow(
                chain="cardano",
                payment_key_hash=keys.payment_key_hash,
                stake_key_hash=keys.stake_key_hash,
                origin="new",
                created_at=time.time(),
            )
        )
        store.set_value(KEYSTORE_CHOICE, keystore.backend)
    finally:
        store.close()
    return keys.address(network_for_channel(channel))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m nunet_tui.cli.sandbox_wallets")
    parser.add_argument("--passphrase-file", type=Path, required=True)
    parser.add_argument("--channel", required=True)
    parser.add_argument("homes", nargs="+")
    args = parser.parse_args(argv)
    addresses = {
        home: make_wallet(Paths.for_home(home), args.passphrase_file, args.channel)
        for home in args.homes
    }
    print(json.dumps(addresses), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
