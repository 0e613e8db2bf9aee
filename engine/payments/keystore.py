"""Secrets (the wallet's mnemonic, the Blockfrost project id) in an OS keyring.

Which keyring, decided once per node home by ``choose_backend``:
1. ``[payments] keystore = "file"`` or ``"secretservice"`` in config: that one, always.
2. Otherwise the backend this home already chose (recorded by the caller on first write), so
   a wallet never seems to vanish because a later session lacks D-Bus.
3. Otherwise an existing encrypted file in the keys dir: its secrets are there.
4. Otherwise the desktop's Secret Service when a D-Bus session is present, the service answers
   and its default collection is unlocked; else the encrypted file.

The encrypted file is ``keyrings.cryptfile``'s CryptFileKeyring (Argon2id + AES-GCM) at
``<keys dir>/keyring.cfg``, 0600, written atomically. Its passphrase comes from
``NUNET_KEYRING_PASSPHRASE``, else from the 0600 file named by ``[payments] passphrase_file``,
else from ``Keystore.unlock`` (the TUI's prompt, ``nunet-tui wallet unlock``). The first
passphrase ever given creates the file. ``keyring``'s automatic choice is never used: on a
headless box it falls to the fail backend, and keyrings.alt's "plaintext" one is base64.
"""

from __future__ import annotations

import configparser
import os
import stat
import threading
from collections.abc import Callable, Mapping, Sequence
from contextlib import closing
from pathlib import Path
from typing import Any, Literal, NamedTuple

from keyrings.cryptfile.cryptfile import CryptFileKeyring
from keyrings.cryptfile.escape import escape

from engine import api
from engine.errors import EngineError
from engine.secret_input import MAX_SECRET_CHARS, secret_text

Backend = Literal["secretservice", "file"]

FILE_NAME = "keyring.cfg"
PASSPHRASE_ENV = "NUNET_KEYRING_PASSPHRASE"
SERVICE = "nunet-tui"
# Only a new keystore is held to this: an existing one opens with whatever made it.
MIN_NEW_PASSPHRASE = 8
SECRET_SERVICE_LABEL = "Secret Service (desktop keyring)"
# SANDBOX ONLY (`nunet-tui demo`): a keystore *created* while this is "1" derives its key
# with SANDBOX_KDF instead of the library's Argon2id (t=15, 64 MiB: 0.4 s a derivation on a
# quiet core, 1.5 s at load 5, paid several times per wallet and by every sandbox node at
# once). The file records it (KDF_OPTION), so only that file is ever opened so cheaply; a
# keystore created without the variable, or one that exists already, keeps the full cost.
# Never set it for a wallet that holds anything: its passphrase is then cheap to guess.
SANDBOX_KDF_ENV = "NUNET_SANDBOX_WEAK_KDF"
SANDBOX_KDF = {"time_cost": 1, "memory_cost": 8 * 1024, "parallelism": 1}  # 8 MiB
KDF_OPTION = "nunet kdf"  # in [keyring-setting]: "sandbox", or absent (the library's default)


class PassphraseSource(NamedTuple):
    label: str  # how an error names it: "NUNET_KEYRING_PASSPHRASE", "passphrase_file /x"
    read: Callable[[], str | None]  # None: this source is not set


def passphrase_sources(
    environ: Mapping[str, str], passphrase_file: Path | None
) -> list[PassphraseSource]:
    """The environment first (one-off runs, CI), then the configured file (rigs, daemons)."""
    sources = [PassphraseSource(PASSPHRASE_ENV, lambda: environ.get(PASSPHRASE_ENV) or None)]
    if passphrase_file is not None:
        path = passphrase_file
        sources.append(PassphraseSource(f"passphrase_file {path}", lambda: read_passphrase(path)))
    return sources


def read_passphrase(path: Path) -> str:
    """The passphrase in ``path``, refusing a file other users could read or swap."""
    try:
        info = path.stat()
    except FileNotFoundError:
        raise EngineError(
            "passphrase_file",
            f"[payments] passphrase_file {path} does not exist; create it with mode 0600 "
            "or remove the setting",
        ) from None
    except OSError as exc:
        raise EngineError(
            "passphrase_file", f"cannot read [payments] passphrase_file {path}: {exc.strerror}"
        ) from None
    if not stat.S_ISREG(info.st_mode):
        raise EngineError("passphrase_file", f"[payments] passphrase_file {path} is not a file")
    if info.st_size > MAX_SECRET_CHARS:
        raise EngineError(
            "passphrase_file",
            f"[payments] passphrase_file {path} is {info.st_size:,} bytes: it should hold only "
            "the passphrase",
        )
    if info.st_mode & 0o077:
        raise EngineError(
            "passphrase_file",
            f"[payments] passphrase_file {path} has mode {stat.S_IMODE(info.st_mode):04o}: "
            f"other users can read it; run `chmod 600 {path}` and use a new passphrase if "
            "anyone else could have seen it",
        )
    if info.st_uid != os.getuid():
        raise EngineError(
            "passphrase_file",
            f"[payments] passphrase_file {path} belongs to uid {info.st_uid}, not to you; "
            "only a file you own is trusted",
        )
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise EngineError(
            "passphrase_file", f"cannot read [payments] passphrase_file {path}: {exc}"
        ) from None
    # The newline an editor adds is not part of it; spaces inside are (as on stdin).
    passphrase = secret_text(text)
    if not passphrase:
        raise EngineError("passphrase_file", f"[payments] passphrase_file {path} is empty")
    return passphrase


def secret_service_problem(environ: Mapping[str, str] | None = None) -> str | None:
    """None when the desktop's Secret Service can be used without a prompt; else why not."""
    environ = os.environ if environ is None else environ
    if not environ.get("DBUS_SESSION_BUS_ADDRESS"):
        return "no D-Bus session (DBUS_SESSION_BUS_ADDRESS is not set)"
    try:
        import secretstorage

        with closing(secretstorage.dbus_init()) as connection:
            if not secretstorage.check_service_availability(connection):
                return "no Secret Service daemon answers on the D-Bus session"
            # A locked collection would pop a desktop prompt nobody sees on a headless rig.
            if secretstorage.get_default_collection(connection).is_locked():
                return "the desktop keyring's default collection is locked"
    except Exception as exc:  # jeepney/secretstorage raise many kinds; all mean "not usable"
        return f"the Secret Service is not usable ({type(exc).__name__}: {exc})"
    return None


def choose_backend(
    setting: str,
    recorded: str | None,
    *,
    file_exists: bool,
    probe: Callable[[], str | None] = secret_service_problem,
) -> Backend:
    """Where this home's secrets live (rules in the module docstring)."""
    if setting == "file":
        return "file"
    if setting == "secretservice":
        return "secretservice"
    if recorded == "file":
        return "file"
    if recorded == "secretservice":
        return "secretservice"
    if file_exists:
        return "file"
    return "secretservice" if probe() is None else "file"


class Keystore:
    """Named secrets of one node home. Blocking (Argon2 ~0.4 s, D-Bus): call from a thread."""

    def __init__(
        self,
        backend: Backend,
        keyfile: Path,
        namespace: str,
        sources: Sequence[PassphraseSource] = (),
        probe: Callable[[], str | None] = secret_service_problem,
    ) -> None:
        self.backend: Backend = backend
        self.keyfile = keyfile
        # Secret Service is shared by every home of the user: name the node in the service.
        self._service = f"{SERVICE}:{namespace}"
        self._sources = tuple(sources)
        self._probe = probe
        self._lock = threading.Lock()
        self._file: _CryptFile | None = None  # set once unlocked

    def __repr__(self) -> str:
        return f"Keystore({self.backend}, {self.location})"

    @property
    def location(self) -> str:
        return SECRET_SERVICE_LABEL if self.backend == "secretservice" else str(self.keyfile)

    def info(self) -> api.KeystoreInfo:
        if self.backend == "secretservice":
            return api.KeystoreInfo(
                backend="secretservice", location=self.location, locked=False, exists=True
            )
        return api.KeystoreInfo(
            backend="file",
            location=self.location,
            locked=self._file is None and not self._has_source(),
            exists=_has_content(self.keyfile),
        )

    def _has_source(self) -> bool:
        """A configured passphrase counts as unlocked: the next use opens the file with it."""
        for source in self._sources:
            try:
                if source.read() is not None:
                    return True
            except EngineError:
                continue  # a bad passphrase file: the use that needs it reports why
        return False

    # --- passphrase ------------------------------------------------------------------------

    def unlock(self, passphrase: str) -> api.KeystoreInfo:
        """Open (or, the first time, create) the encrypted file with ``passphrase``.

        A wrong passphrase raises ``wrong_passphrase`` and leaves everything as it was,
        including an earlier successful unlock."""
        if self.backend == "secretservice":
            return self.info()  # the desktop session unlocks it, not us
        with self._lock:
            self._file = self._open(passphrase, "the passphrase")
        return self.info()

    def _open(self, passphrase: str, label: str) -> _CryptFile:
        if not passphrase.strip():
            raise EngineError("wrong_passphrase", f"{label} is empty")
        creating = not _has_content(self.keyfile)
        if creating and len(passphrase) < MIN_NEW_PASSPHRASE:
            raise EngineError(
                "weak_passphrase",
                f"{label} is too short to create the keystore {self.keyfile}: "
                f"use at least {MIN_NEW_PASSPHRASE} characters",
            )
        candidate = _CryptFile(self.keyfile)
        if creating and os.environ.get(SANDBOX_KDF_ENV) == "1":
            candidate.use_sandbox_kdf()
        try:
            if not creating and not candidate.has_reference():
                raise EngineError(
                    "keystore",
                    f"{self.keyfile} is not a nunet-tui keystore (no password reference); "
                    "restore it from a backup, or move it away and import the wallet again",
                )
            # The setter checks the passphrase against the file's reference entry, or writes
            # that entry when the file is new. Fresh instance: a failure leaves no key behind.
            candidate.keyring_key = passphrase
        except ValueError:
            raise EngineError(
                "wrong_passphrase",
                f"{label} does not unlock the keystore {self.keyfile}: wrong passphrase",
            ) from None
        except (configparser.Error, OSError, UnicodeDecodeError) as exc:
            raise EngineError(
                "keystore", f"cannot read the keystore {self.keyfile}: {type(exc).__name__}"
            ) from None
        return candidate

    def _unlocked_file(self) -> _CryptFile:
        if self._file is not None:
            return self._file
        for source in self._sources:
            passphrase = source.read()
            if passphrase is not None:
                self._file = self._open(passphrase, source.label)
                return self._file
        exists = _has_content(self.keyfile)
        what = "is locked" if exists else "does not exist yet and needs a passphrase"
        # Two codes, so a prompt can ask "choose a passphrase" (twice) or just "passphrase".
        raise EngineError(
            "keystore_locked" if exists else "keystore_new",
            f"the keystore {self.keyfile} {what}: set {PASSPHRASE_ENV}, name a 0600 file in "
            "[payments] passphrase_file, or type it in the TUI (`nunet-tui wallet unlock` "
            "for a daemon)",
        )

    # --- secrets ---------------------------------------------------------------------------

    def get(self, name: str) -> str | None:
        with self._lock:
            if self.backend == "file":
                return _file_call(self.keyfile, self._unlocked_file().get_password, name)
            return self._secret_service(lambda kr: kr.get_password(self._service, name))

    def put(self, name: str, secret: str) -> None:
        with self._lock:
            if self.backend == "file":
                _file_call(
                    self.keyfile,
                    lambda service, key: self._unlocked_file().set_password(service, key, secret),
                    name,
                )
                return
            self._secret_service(lambda kr: kr.set_password(self._service, name, secret))

    def _secret_service(self, action: Callable[[Any], Any]) -> Any:
        from keyring.errors import KeyringError, KeyringLocked

        problem = self._probe()
        if problem is not None:
            raise EngineError(
                "keystore_unavailable",
                f"this node keeps its secrets in the {SECRET_SERVICE_LABEL}, which cannot be "
                f"used now: {problem}. Run it inside the desktop session; or set [payments] "
                'keystore = "file" and import the wallet again from its mnemonic',
            )
        from keyring.backends.SecretService import Keyring

        try:
            return action(Keyring())
        except KeyringLocked:
            raise EngineError(
                "keystore_locked",
                f"the {SECRET_SERVICE_LABEL} is locked: unlock it in the desktop session",
            ) from None
        except KeyringError as exc:
            raise EngineError(
                "keystore", f"the {SECRET_SERVICE_LABEL} failed: {type(exc).__name__}"
            ) from None


def _file_call(keyfile: Path, call: Callable[[str, str], Any], name: str) -> Any:
    try:
        return call(SERVICE, name)
    except ValueError:
        # AES-GCM refused an entry although the reference decrypted: edited or damaged file.
        raise EngineError(
            "keystore", f"an entry of {keyfile} fails its integrity check: the file was altered"
        ) from None
    except (configparser.Error, OSError) as exc:
        raise EngineError(
            "keystore", f"cannot use the keystore {keyfile}: {type(exc).__name__}"
        ) from None


def _has_content(path: Path) -> bool:
    try:
        return path.stat().st_size > 0
    except OSError:
        return False


class _CryptFile(CryptFileKeyring):
    """CryptFileKeyring at our path, writing the whole file atomically with mode 0600.

    The library rewrites the file in place (open "w"): a crash mid-write would lose the
    mnemonic. Here a temporary 0600 file is written, synced and renamed over it."""

    def __init__(self, path: Path) -> None:
        super().__init__()
        self.file_path = str(path)
        if _has_content(path) and self._setting(KDF_OPTION) == "sandbox":
            self._weaken()

    def _setting(self, option: str) -> str | None:
        config = configparser.RawConfigParser()
        config.read(self.file_path, encoding="utf-8")
        section, key = escape("keyring-setting"), escape(option)
        return config.get(section, key) if config.has_option(section, key) else None

    def _weaken(self) -> None:
        for name, value in SANDBOX_KDF.items():
            setattr(self, name, value)

    def use_sandbox_kdf(self) -> None:
        """A new sandbox keystore: the marker goes in first, so the file never holds a
        cheaply derived entry without saying so (the reference is written after it)."""
        self._weaken()
        self._write_config_value("keyring-setting", KDF_OPTION, "sandbox")

    def has_reference(self) -> bool:
        config = configparser.RawConfigParser()
        config.read(self.file_path, encoding="utf-8")
        return config.has_option(escape("keyring-setting"), escape("password reference"))

    def _write_config_value(self, service: str, key: str, value: str) -> None:
        config = configparser.RawConfigParser()
        config.read(self.file_path, encoding="utf-8")
        section, option = escape(service), escape(key)
        if not config.has_section(section):
            config.add_section(section)
        config.set(section, option, value)
        target = Path(self.file_path)
        temporary = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                config.write(handle)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(temporary, target)
        except BaseException:
            temporary.unlink(missing_ok=True)
            raise
        os.chmod(target, 0o600)
