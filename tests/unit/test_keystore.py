"""The keystore: which keyring, the encrypted file, and its passphrase.

There is no D-Bus session here, so the encrypted file (keyrings.cryptfile) is exercised for
real; the Secret Service side is exercised through its decision rules and its refusal.
Each unlock costs an Argon2 derivation (~0.4 s), so the tests keep them few.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from engine.errors import EngineError
from engine.payments.keystore import (
    FILE_NAME,
    PASSPHRASE_ENV,
    Keystore,
    PassphraseSource,
    choose_backend,
    passphrase_sources,
    read_passphrase,
    secret_service_problem,
)

PASSPHRASE = "correct horse battery staple"
SECRET = "legal winner thank year wave sausage worth useful legal winner thank yellow"


def _fixed(passphrase: str | None, label: str = "test passphrase") -> list[PassphraseSource]:
    return [PassphraseSource(label, lambda: passphrase)]


def _store(keyfile: Path, passphrase: str | None = PASSPHRASE) -> Keystore:
    return Keystore("file", keyfile, namespace="12D3KooWtest", sources=_fixed(passphrase))


def test_choose_backend_rules() -> None:
    usable, absent = (lambda: None), (lambda: "no D-Bus session")
    # Config wins, whatever else is true.
    assert choose_backend("file", "secretservice", file_exists=False, probe=usable) == "file"
    assert choose_backend("secretservice", "file", file_exists=True, probe=absent) == (
        "secretservice"
    )
    # Then this home's earlier choice: a wallet must not vanish in a session without D-Bus.
    assert choose_backend("auto", "secretservice", file_exists=False, probe=absent) == (
        "secretservice"
    )
    assert choose_backend("auto", "file", file_exists=False, probe=usable) == "file"
    # Then an existing file, then the Secret Service when it is usable, else the file.
    assert choose_backend("auto", None, file_exists=True, probe=usable) == "file"
    assert choose_backend("auto", None, file_exists=False, probe=usable) == "secretservice"
    assert choose_backend("auto", None, file_exists=False, probe=absent) == "file"


def test_no_dbus_session_means_no_secret_service() -> None:
    problem = secret_service_problem({})
    assert problem is not None and "D-Bus" in problem


def test_unusable_secret_service_is_refused_not_replaced(tmp_path: Path) -> None:
    keystore = Keystore(
        "secretservice", tmp_path / FILE_NAME, namespace="n", probe=lambda: "no D-Bus session"
    )
    with pytest.raises(EngineError) as err:
        keystore.get("wallet")
    assert err.value.code == "keystore_unavailable"
    assert "no D-Bus session" in err.value.message and 'keystore = "file"' in err.value.message
    assert not (tmp_path / FILE_NAME).exists()  # never a silent fall back to another keyring


def test_encrypted_file_round_trip_is_private_and_not_plaintext(tmp_path: Path) -> None:
    keyfile = tmp_path / FILE_NAME
    keystore = _store(keyfile)
    assert keystore.info().exists is False
    keystore.put("wallet", SECRET)
    assert keystore.get("wallet") == SECRET
    assert keystore.get("absent") is None
    assert stat.S_IMODE(keyfile.stat().st_mode) == 0o600
    assert [p.name for p in tmp_path.iterdir()] == [FILE_NAME]  # no temporary file left
    text = keyfile.read_text()
    assert SECRET not in text and PASSPHRASE not in text
    assert not [word for word in set(SECRET.split()) if len(word) >= 5 and word in text]
    # A second process (a new Keystore) reads it back with the same passphrase.
    assert _store(keyfile).get("wallet") == SECRET


def test_wrong_passphrase_is_clear_and_changes_nothing(tmp_path: Path) -> None:
    keyfile = tmp_path / FILE_NAME
    _store(keyfile).put("wallet", SECRET)
    before = keyfile.read_bytes()

    from_env = Keystore(
        "file",
        keyfile,
        namespace="n",
        sources=passphrase_sources({PASSPHRASE_ENV: "not the passphrase"}, None),
    )
    with pytest.raises(EngineError) as err:
        from_env.get("wallet")
    assert err.value.code == "wrong_passphrase"
    assert PASSPHRASE_ENV in err.value.message and "wrong passphrase" in err.value.message
    assert "not the passphrase" not in err.value.message

    typed = _store(keyfile, passphrase=None)  # nothing configured: the TUI types it
    with pytest.raises(EngineError) as err:
        typed.get("wallet")
    assert err.value.code == "keystore_locked" and typed.info().locked
    with pytest.raises(EngineError) as err:
        typed.unlock("not the passphrase")
    assert err.value.code == "wrong_passphrase" and typed.info().locked
    assert typed.unlock(PASSPHRASE).locked is False
    # A wrong passphrase after a right one leaves the keystore open with the right one.
    with pytest.raises(EngineError):
        typed.unlock("still not it")
    assert typed.get("wallet") == SECRET
    assert keyfile.read_bytes() == before


def test_new_keystore_needs_a_real_passphrase(tmp_path: Path) -> None:
    keyfile = tmp_path / FILE_NAME
    with pytest.raises(EngineError) as err:
        _store(keyfile, passphrase=None).get("wallet")
    assert err.value.code == "keystore_new" and PASSPHRASE_ENV in err.value.message
    with pytest.raises(EngineError) as err:
        _store(keyfile, passphrase="short").put("wallet", SECRET)
    assert err.value.code == "weak_passphrase"
    with pytest.raises(EngineError) as err:
        _store(keyfile, passphrase=None).unlock("   ")
    assert err.value.code == "wrong_passphrase"
    assert not keyfile.exists()


def test_damaged_keystore_is_not_overwritten(tmp_path: Path) -> None:
    keyfile = tmp_path / FILE_NAME
    keyfile.write_text("[something]\nelse = 1\n")
    with pytest.raises(EngineError) as err:
        _store(keyfile).get("wallet")
    assert err.value.code == "keystore" and "not a nunet-tui keystore" in err.value.message
    assert keyfile.read_text() == "[something]\nelse = 1\n"


def test_passphrase_file_must_be_private(tmp_path: Path) -> None:
    path = tmp_path / "passphrase"
    path.write_text(PASSPHRASE + "\n")
    os.chmod(path, 0o644)
    with pytest.raises(EngineError) as err:
        read_passphrase(path)
    assert err.value.code == "passphrase_file"
    assert "0644" in err.value.message and f"chmod 600 {path}" in err.value.message
    os.chmod(path, 0o600)
    assert read_passphrase(path) == PASSPHRASE  # the editor's newline is not part of it
    with pytest.raises(EngineError, match="does not exist"):
        read_passphrase(tmp_path / "missing")
    path.write_text("\n")
    with pytest.raises(EngineError, match="is empty"):
        read_passphrase(path)


def test_environment_beats_the_passphrase_file(tmp_path: Path) -> None:
    path = tmp_path / "passphrase"
    path.write_text("from the file")
    os.chmod(path, 0o600)
    sources = passphrase_sources({PASSPHRASE_ENV: "from the env"}, path)
    assert [s.read() for s in sources] == ["from the env", "from the file"]
    assert [s.read() for s in passphrase_sources({}, None)] == [None]


def test_sandbox_kdf_only_for_a_keystore_created_with_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from engine.payments import keystore as ks

    # Created under the sandbox variable: the file says so and opens with the cheap KDF.
    monkeypatch.setenv(ks.SANDBOX_KDF_ENV, "1")
    weak = tmp_path / "weak.cfg"
    _store(weak).put("wallet", SECRET)
    assert "nunet_20kdf = sandbox" in weak.read_text()  # escaped by the library
    monkeypatch.delenv(ks.SANDBOX_KDF_ENV)
    reopened = _store(weak)._unlocked_file()
    assert (reopened.time_cost, reopened.memory_cost) == (1, ks.SANDBOX_KDF["memory_cost"])
    assert _store(weak).get("wallet") == SECRET
    with pytest.raises(EngineError) as wrong:
        _store(weak, "not the passphrase at all").get("wallet")
    assert wrong.value.code == "wrong_passphrase"
    # A keystore that exists already keeps its full cost, variable or not.
    full = tmp_path / "full.cfg"
    _store(full).put("wallet", SECRET)
    monkeypatch.setenv(ks.SANDBOX_KDF_ENV, "1")
    opened = _store(full)._unlocked_file()
    assert "nunet_20kdf" not in full.read_text()
    assert opened.time_cost == ks.CryptFileKeyring.time_cost > 1
    assert _store(full).get("wallet") == SECRET
