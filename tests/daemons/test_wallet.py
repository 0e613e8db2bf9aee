"""The Cardano wallet: derivation vectors, mnemonic checks, engine commands and the CLI.

Keystores are the encrypted file with a passphrase from NUNET_KEYRING_PASSPHRASE (no D-Bus
here). Every secret check looks for the whole mnemonic and for any two of its words side by
side, in replies, JSON, logs and the keystore file.
"""

from __future__ import annotations

import configparser
import json
import os
from collections.abc import Iterator
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
from nacl.signing import VerifyKey

from engine import api
from engine.config import Paths
from engine.errors import EngineError
from engine.facade import Engine
from engine.payments.keystore import FILE_NAME, PASSPHRASE_ENV
from engine.payments.wallet import (
    base_address,
    derive_keys,
    generate_mnemonic,
    normalize_mnemonic,
    validate_mnemonic,
)
from tests.conftest import MACHINE_TOML, make_home, run_cli
from tests.daemon_harness import Daemon

# The Cardano Shelley test vector (CIP-19's keys): its published account-0 hashes and addresses.
VECTOR = "test walk nut penalty hip pave soap entry language right filter choice"
VECTOR_PAYMENT_HASH = "9493315cd92eb5d8c4304e67b7e16ae36d61d34502694657811a2c8e"
VECTOR_STAKE_HASH = "32c728d3861e164cab28cb8f006448139c8f1740ffb8e7aa9e5232dc"
VECTOR_TESTNET = (
    "addr_test1qz2fxv2umyhttkxyxp8x0dlpdt3k6cwng5pxj3jhsydzer3jcu5d8ps7zex2k2xt3uqxgjqnnj83ws8lh"
    "rn648jjxtwq2ytjqp"
)
VECTOR_MAINNET = (
    "addr1qx2fxv2umyhttkxyxp8x0dlpdt3k6cwng5pxj3jhsydzer3jcu5d8ps7zex2k2xt3uqxgjqnnj83ws8lhrn64"
    "8jjxtwqfjkjv7"
)
# A valid 24-word mnemonic (all-zero entropy): its address is computed by pycardano below.
ZERO_24 = " ".join(["abandon"] * 23 + ["art"])
PASSPHRASE = "a long test passphrase"
ENV = {PASSPHRASE_ENV: PASSPHRASE}


def pycardano_address(mnemonic: str, network: str) -> str:
    """The same address the long way round: pycardano's HD wallet, raw public keys, Address."""
    from pycardano import Address, HDWallet, Network, PaymentVerificationKey, StakeVerificationKey

    root = HDWallet.from_mnemonic(mnemonic)
    payment = PaymentVerificationKey.from_primitive(
        root.derive_from_path("m/1852'/1815'/0'/0/0").public_key
    )
    stake = StakeVerificationKey.from_primitive(
        root.derive_from_path("m/1852'/1815'/0'/2/0").public_key
    )
    net = Network.MAINNET if network == "mainnet" else Network.TESTNET
    return str(Address(payment.hash(), stake.hash(), net))


def leaks(mnemonic: str, text: str) -> list[str]:
    """Pieces of ``mnemonic`` found in ``text``: the whole phrase or two adjacent words."""
    words = mnemonic.split()
    pieces = [mnemonic] + [f"{a} {b}" for a, b in pairwise(words)]
    return [piece for piece in pieces if piece in text]


# --- derivation and checks --------------------------------------------------------------


def test_known_vector_and_network_prefixes() -> None:
    keys = derive_keys(validate_mnemonic(VECTOR))
    assert (keys.payment_key_hash, keys.stake_key_hash) == (VECTOR_PAYMENT_HASH, VECTOR_STAKE_HASH)
    assert keys.address("testnet") == VECTOR_TESTNET == pycardano_address(VECTOR, "testnet")
    assert keys.address("mainnet") == VECTOR_MAINNET == pycardano_address(VECTOR, "mainnet")
    # A 24-word mnemonic against pycardano computed independently.
    zero = derive_keys(validate_mnemonic(ZERO_24))
    assert zero.address("testnet") == pycardano_address(ZERO_24, "testnet")
    assert zero.address("testnet").startswith("addr_test1q")
    assert zero.address("mainnet").startswith("addr1q")
    assert "signing" not in repr(keys)  # WalletKeys' repr leaves the key out


@pytest.mark.parametrize(
    ("channel", "prefix"),
    [
        ("nunet-test", "addr_test1"),
        ("nunet-team", "addr_test1"),
        ("test-local", "addr_test1"),
        ("nunet", "addr1"),
        ("nunet-mainnet", "addr1"),
    ],
)
def test_address_prefix_follows_the_channel(channel: str, prefix: str) -> None:
    from oracle_client.cardano.address import network_for_channel

    address = base_address(VECTOR_PAYMENT_HASH, VECTOR_STAKE_HASH, network_for_channel(channel))
    assert address.startswith(prefix) and not address.startswith(prefix + "_")


def test_new_mnemonic_is_24_valid_words() -> None:
    first, second = generate_mnemonic(), generate_mnemonic()
    assert len(first.split()) == 24 and first != second
    assert validate_mnemonic(first) == first


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (" ".join(VECTOR.split()[:11]), "has 11 words"),
        (" ".join(["abandon"] * 23), "has 23 words"),
        ("", "is empty"),
        (VECTOR.replace("penalty", "penalti"), "word 4 is not in the BIP-39 English word list"),
        (VECTOR.replace("walk", "wlak").replace("soap", "saop"), "words 2, 7 are not"),
        (VECTOR.replace("walk nut", "nut walk"), "checksum does not match"),
        (" ".join(["abandon"] * 24), "checksum does not match"),
    ],
)
def test_mnemonic_errors_are_clear(text: str, expected: str) -> None:
    with pytest.raises(EngineError) as err:
        validate_mnemonic(text)
    assert err.value.code == "invalid_mnemonic" and expected in err.value.message
    # Positions only: a mistyped word is most of a secret word.
    assert not {"penalti", "wlak", "saop", "walk", "nut"} & set(err.value.message.split())


def test_mnemonic_pasted_from_a_numbered_list() -> None:
    numbered = "\n".join(f"{i}. {w.upper()}," for i, w in enumerate(VECTOR.split(), 1))
    assert normalize_mnemonic(numbered) == VECTOR
    assert validate_mnemonic("  " + VECTOR.replace(" ", "\n\t ") + "\n") == VECTOR


# --- engine commands --------------------------------------------------------------------


@pytest.fixture
def wallet_engine(node_home: Paths, monkeypatch: pytest.MonkeyPatch) -> Iterator[Engine]:
    monkeypatch.setenv(PASSPHRASE_ENV, PASSPHRASE)
    engine = Engine(node_home, network=False).start()
    try:
        yield engine
    finally:
        engine.close()


def test_engine_new_show_force_import_and_signing_key(wallet_engine: Engine) -> None:
    with pytest.raises(EngineError) as err:
        wallet_engine.call_blocking(api.WalletShow())
    assert err.value.code == "no_wallet" and "wallet new" in err.value.message

    created: api.WalletCreated = wallet_engine.call_blocking(api.WalletNew(), timeout=60)
    mnemonic = created.mnemonic
    assert len(mnemonic.split()) == 24 and created.replaced is None
    assert created.wallet.address == pycardano_address(mnemonic, "testnet")
    assert created.wallet.network == "testnet" and created.wallet.channel == "nunet-test"
    assert not leaks(mnemonic, repr(created))

    shown: api.WalletInfo = wallet_engine.call_blocking(api.WalletShow())
    assert shown.address == created.wallet.address
    assert shown.keystore is not None and shown.keystore.backend == "file"
    assert not leaks(mnemonic, json.dumps(api.to_builtins(shown)))

    with pytest.raises(EngineError) as err:
        wallet_engine.call_blocking(api.WalletNew())
    assert err.value.code == "wallet_exists" and "--force" in err.value.message
    with pytest.raises(EngineError) as err:
        wallet_engine.call_blocking(api.WalletImport(mnemonic=VECTOR))
    assert err.value.code == "wallet_exists"

    imported: api.WalletImported = wallet_engine.call_blocking(
        api.WalletImport(mnemonic=VECTOR, force=True), timeout=60
    )
    assert imported.wallet.address == VECTOR_TESTNET
    assert imported.replaced == created.wallet.address
    assert "hidden" in repr(api.WalletImport(mnemonic=VECTOR)) and VECTOR not in repr(
        api.WalletImport(mnemonic=VECTOR)
    )

    # The escrow flow's access to the key: derived inside the engine, checked, usable.
    payments = wallet_engine.node.payments()
    key = wallet_engine._require_thread().call_blocking(payments.payment_signing_key)
    vkey = key.to_verification_key()
    assert vkey.hash().payload.hex() == VECTOR_PAYMENT_HASH
    VerifyKey(vkey.to_non_extended().payload).verify(b"receipt", key.sign(b"receipt"))


def test_mainnet_channel_gives_a_mainnet_address(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(PASSPHRASE_ENV, PASSPHRASE)
    toml = MACHINE_TOML.replace("[network]\n", '[network]\nchannel = "nunet"\n')
    home = make_home(tmp_path / "home", machine_toml=toml + '[payments]\nbackend = "preprod"\n')
    with Engine(home, network=False) as engine:
        imported = engine.call_blocking(api.WalletImport(mnemonic=VECTOR), timeout=60)
        assert (imported.wallet.address, imported.wallet.network) == (VECTOR_MAINNET, "mainnet")
        with pytest.raises(EngineError) as err:
            engine.call_blocking(api.WalletBalance())
        assert err.value.code == "network_mismatch" and "mainnet backend" in err.value.message


def test_blockfrost_project_id_is_kept_in_the_keystore(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(PASSPHRASE_ENV, PASSPHRASE)
    toml = MACHINE_TOML + '[payments]\nbackend = "preprod"\n'
    home = make_home(tmp_path / "home", machine_toml=toml)
    project_id = "preprodAbC123dEf456gHi789"
    with Engine(home, network=False) as engine:
        engine.call_blocking(api.WalletImport(mnemonic=VECTOR), timeout=60)
        with pytest.raises(EngineError) as err:
            engine.call_blocking(api.WalletBalance(), timeout=60)
        assert err.value.code == "no_blockfrost_key" and "wallet blockfrost" in err.value.message
        with pytest.raises(EngineError) as err:
            engine.call_blocking(api.SetBlockfrostProjectId(project_id="two words"))
        assert err.value.code == "invalid"
        done = engine.call_blocking(api.SetBlockfrostProjectId(project_id=project_id))
        assert str(home.keys_dir / FILE_NAME) in done.message and project_id not in done.message
        assert project_id not in repr(api.SetBlockfrostProjectId(project_id=project_id))
        keystore = engine._require_thread().call_blocking(engine.node.payments().keystore)
        assert keystore.get("blockfrost-project-id") == project_id
    assert project_id not in (home.keys_dir / FILE_NAME).read_text()


# --- the command line -------------------------------------------------------------------


def _cli(*args: str, home: Paths, env: dict[str, str] | None = None, stdin: str = "") -> Any:
    result = run_cli(*args, "--json", home=home, env={**ENV, **(env or {})}, input=stdin)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def _fails(*args: str, home: Paths, env: dict[str, str] | None = None, stdin: str = "") -> str:
    result = run_cli(*args, home=home, env={**ENV, **(env or {})}, input=stdin)
    assert result.returncode == 1, (result.stdout, result.stderr)
    assert result.stdout == "" and result.stderr.count("\n") == 1
    return result.stderr


@pytest.fixture
def debug_home(tmp_path: Path) -> Paths:
    """Debug logging, so the secret checks see everything the engine could write."""
    return make_home(tmp_path / "home", machine_toml='log_level = "debug"\n' + MACHINE_TOML)


def test_cli_new_show_json_and_no_secret_anywhere(debug_home: Paths) -> None:
    new = _cli("wallet", "new", "--cardano", home=debug_home)
    mnemonic = str(new["mnemonic"])
    assert len(mnemonic.split()) == 24 and "write these words down" in new["warning"].lower()
    assert {"address", "network", "channel", "payment_key_hash", "stake_key_hash"} <= new.keys()
    assert new["address"] == pycardano_address(mnemonic, "testnet") and new["replaced"] is None

    show = run_cli("wallet", "show", "--json", home=debug_home, env=ENV, input="")
    assert show.returncode == 0, show.stderr
    shown = json.loads(show.stdout)
    assert shown["address"] == new["address"] and shown["network"] == "testnet"
    assert "mnemonic" not in shown and not leaks(mnemonic, show.stdout)
    assert shown["keystore"] == {
        "backend": "file",
        "location": str(debug_home.keys_dir / FILE_NAME),
        "locked": False,
        "exists": True,
    }

    again = _fails("wallet", "new", home=debug_home)
    assert "already has a wallet" in again and "--force" in again

    logs = "".join(p.read_text() for p in debug_home.log_dir.iterdir())
    assert "wallet created" in logs and not leaks(mnemonic, logs)
    keyfile = (debug_home.keys_dir / FILE_NAME).read_text()
    assert not leaks(mnemonic, keyfile) and PASSPHRASE not in keyfile
    # The file's own words ("version", "scheme", its section names) may be mnemonic words too:
    # only what it stores is looked in.
    stored = configparser.ConfigParser(interpolation=None)
    stored.read_string(keyfile)
    values = " ".join(v for section in stored.sections() for v in stored[section].values())
    assert not [w for w in set(mnemonic.split()) if len(w) >= 6 and w in values]
    assert oct((debug_home.keys_dir / FILE_NAME).stat().st_mode & 0o777) == "0o600"


def test_cli_import_validation_passphrases_and_balance(debug_home: Paths) -> None:
    imported = _cli("wallet", "import", home=debug_home, stdin=VECTOR + "\n")
    assert imported["address"] == VECTOR_TESTNET and imported["origin"] == "import"
    assert "mnemonic" not in imported

    wrong_word = _fails("wallet", "import", home=debug_home, stdin=VECTOR.replace("hip", "hipp"))
    assert (
        "word 5 is not in the BIP-39 English word list" in wrong_word and "hipp" not in wrong_word
    )
    short = _fails("wallet", "import", home=debug_home, stdin="test walk nut")
    assert "has 3 words" in short

    # A wrong passphrase: a clear error, and the wallet is still the imported one.
    replace = ("wallet", "import", "--force")
    wrong = _fails(*replace, home=debug_home, env={PASSPHRASE_ENV: "wrong!"}, stdin=ZERO_24)
    assert f"{PASSPHRASE_ENV} does not unlock" in wrong and "wrong passphrase" in wrong
    assert _cli("wallet", "show", home=debug_home)["address"] == VECTOR_TESTNET

    # A passphrase file others can read is refused, whatever it holds.
    secret_file = debug_home.config_dir / "passphrase"
    secret_file.write_text(PASSPHRASE + "\n")
    os.chmod(secret_file, 0o644)
    with debug_home.config_file.open("a") as config:
        config.write('\n[payments]\npassphrase_file = "passphrase"\n')
    no_env = {PASSPHRASE_ENV: ""}
    refused = _fails(*replace, home=debug_home, env=no_env, stdin=ZERO_24)
    assert "other users can read it" in refused and f"chmod 600 {secret_file}" in refused
    os.chmod(secret_file, 0o600)
    replaced = _cli(*replace, home=debug_home, env=no_env, stdin=ZERO_24)
    assert replaced["address"] == pycardano_address(ZERO_24, "testnet")
    assert replaced["replaced"] == VECTOR_TESTNET

    no_chain = _fails("wallet", "balance", home=debug_home)
    assert "no chain backend is configured" in no_chain
    logs = "".join(p.read_text() for p in debug_home.log_dir.iterdir())
    assert not leaks(VECTOR, logs) and not leaks(ZERO_24, logs) and PASSPHRASE not in logs


def test_daemon_is_unlocked_over_the_socket(tmp_path: Path) -> None:
    """A daemon started without a passphrase: `wallet unlock` gives it one (as the TUI would)."""
    home = make_home(tmp_path / "rig")
    no_env = {PASSPHRASE_ENV: ""}
    daemon = Daemon(home, no_env).start()
    try:
        locked = _fails("--attach", "wallet", "new", home=home, env=no_env)
        assert "does not exist yet and needs a passphrase" in locked
        unlocked = _cli("--attach", "wallet", "unlock", home=home, env=no_env, stdin=PASSPHRASE)
        assert unlocked == {
            "backend": "file",
            "location": str(home.keys_dir / FILE_NAME),
            "locked": False,
            "exists": True,
        }
        wrong = _fails("--attach", "wallet", "unlock", home=home, env=no_env, stdin="wrong one")
        assert "wrong passphrase" in wrong
        created = _cli("--attach", "wallet", "new", home=home, env=no_env)
        assert (
            _cli("--attach", "wallet", "show", home=home, env=no_env)["address"]
            == (created["address"])
        )
    finally:
        daemon.stop()
    written = "".join(p.read_text() for p in home.log_dir.iterdir())
    written += daemon.stderr_path.read_text()
    assert not leaks(str(created["mnemonic"]), written) and PASSPHRASE not in written
