"""``nunet-tui log [-o FILE]``: one .tar.gz for a support request (NuNet's ``nunet log``).

It holds the engine's log and its rotated files, a daemon's kept stderr, the config with its
secrets replaced by ``<redacted>``, the NUNET_* environment (likewise), the versions of
nunet-tui, Python, the main libraries and the Docker engine, the machine's readiness and the
recent jobs' states: from the running node over its control socket when one runs, else from
the database opened read-only (nothing in the home is written either way).

Secrets never reach the archive: the config is rebuilt from an allowlist ([payments] keeps
only its known non-secret fields), every key that names a secret is redacted, URLs lose their
credentials and query values (a webhook URL keeps only its scheme and host: its path is often
the token), and then every text member is scrubbed of each secret value found (the keystore
passphrase from NUNET_KEYRING_PASSPHRASE and the passphrase file, the redacted URLs' parts,
the hook's arguments) and of anything shaped like a Blockfrost project id, so a secret that
some log line quoted is caught too. The keys folder and the keystore are never read.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import platform
import re
import stat
import sys
import threading
import time
import tomllib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit, urlunsplit

import msgspec

from engine import api
from engine.config import MAX_CONFIG_BYTES, Paths, PaymentsSettings
from engine.errors import EngineError
from nunet_tui.cli import output

REDACTED = "<redacted>"
MAX_LOG_BYTES = 20 << 20  # per file: the newest part of a log bigger than this
RECENT_JOBS = 50
MAX_TEXT = 500  # a job's reason or an escrow's error (peer words, bounded)
CALL_TIMEOUT_S = 10.0
DOCKER_TIMEOUT_S = 3.0
PACKAGES = (
    "libp2p",
    "trio",
    "textual",
    "msgspec",
    "httpx",
    "pycardano",
    "prometheus-client",
    "docker",
    "nvidia-ml-py",
)
# Words that make a key's value a secret wherever it appears (a stray one in config.toml
# too), matched against the key's words ("ntx_policy_id" has none; "blockfrost_project_id",
# "api_key" and "NUNET_KEYRING_PASSPHRASE" do), never as substrings: "key" in "keystore",
# "pass" in "compass" name no secret.
SECRET_WORDS = frozenset(
    {
        "pass", "passphrase", "password", "passwd", "secret", "secrets", "token", "tokens",
        "key", "keys", "apikey", "mnemonic", "seed", "credential", "credentials", "auth",
        "authorization", "blockfrost", "cookie", "cookies", "private", "signing",
    }
)  # fmt: skip
NOT_SECRET = frozenset({"keystore", "passphrase_file"})  # names a backend or a path


def _payments_public() -> frozenset[str]:
    """[payments] fields whose names say no secret: the settings' own fields (config.toml
    cannot hold others), so a new setting is shown without a list to keep."""
    names = {f.name for f in msgspec.structs.fields(PaymentsSettings)}
    return frozenset(n for n in names if n in NOT_SECRET or not is_secret_key(n))


def is_secret_key(name: str) -> bool:
    """Whether a setting or variable of this name holds a secret (by its words)."""
    lowered = name.lower()
    if lowered in NOT_SECRET:
        return False
    words = set(re.split(r"[^a-z0-9]+", lowered))
    return bool(words & SECRET_WORDS) or "project_id" in lowered or "projectid" in lowered


# Where a secret's value is looked for in free text (log lines, a job's reason), it must be
# distinctive: a short value or a number ("3000", "30.0") found inside other text is a
# coincidence, and replacing it there corrupted figures ("created_at": 17963272<redacted>851927).
# Shorter values are still redacted where they stand: by their key, or as a whole value.
MIN_SCRUBBED_CHARS = 8
_FIGURE = re.compile(r"[\d\s.,:+-]+")


BLOCKFROST_ID = re.compile(r"\b(?:mainnet|preprod|preview)[A-Za-z0-9]{32}\b")
URL_CREDENTIALS = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)[^/\s@]+@")


def add_parsers(sub: Any, common: argparse.ArgumentParser) -> None:
    log = sub.add_parser(
        "log",
        parents=[common],
        help="logs, config (secrets hidden), versions and job states in one .tar.gz",
    )
    log.add_argument(
        "-o",
        "--output",
        metavar="FILE",
        help="write the archive here (default: nunet-log-DATE.tar.gz in this folder)",
    )


# --- secrets ---------------------------------------------------------------------------------


@dataclass
class Secrets:
    """Every secret value seen, to scrub from every text that goes into the archive."""

    values: set[str] = field(default_factory=set)

    def add(self, value: object) -> None:
        if isinstance(value, str) and value.strip():
            self.values.add(value.strip())

    def scrub(self, text: str) -> str:
        """Free text without the secrets' distinctive values, Blockfrost ids and URL
        credentials; a text that is exactly a secret is redacted whole."""
        if text.strip() in self.values:
            return REDACTED
        for value in sorted(self.values, key=len, reverse=True):  # longest first
            if len(value) >= MIN_SCRUBBED_CHARS and not _FIGURE.fullmatch(value):
                text = text.replace(value, REDACTED)
        text = BLOCKFROST_ID.sub(REDACTED, text)
        return URL_CREDENTIALS.sub(lambda m: f"{m.group('scheme')}{REDACTED}@", text)

    def scrub_data(self, data: Any) -> Any:
        """JSON-shaped ``data`` with each text value scrubbed; keys and numbers as they are
        (the serialized text is never searched: that cut secrets out of figures)."""
        if isinstance(data, dict):
            return {k: self.scrub_data(v) for k, v in data.items()}
        if isinstance(data, list | tuple):
            return [self.scrub_data(v) for v in data]
        return self.scrub(data) if isinstance(data, str) else data


def redact_url(url: str, secrets: Secrets, *, keep_path: bool = True) -> str:
    """``url`` without credentials and query values (and its path unless ``keep_path``);
    each removed part is remembered as a secret."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        secrets.add(url)
        return REDACTED
    secrets.add(parts.password)
    secrets.add(parts.username)
    query = parse_qsl(parts.query, keep_blank_values=True)
    for _, value in query:
        secrets.add(value)
    netloc = (
        (f"{REDACTED}@" if parts.username or parts.password else "")
        + (f"[{host}]" if ":" in host else host)
        + port
    )
    if not keep_path:
        secrets.add(url)
        if parts.path not in ("", "/"):
            secrets.add(parts.path.strip("/"))
        hidden = "/" + REDACTED if parts.path not in ("", "/") or parts.query else ""
        return f"{parts.scheme}://{netloc}{hidden}"
    shown_query = "&".join(f"{name}={REDACTED}" for name, _ in query)
    return urlunsplit((parts.scheme, netloc, parts.path, shown_query, ""))


def redact_config(raw: dict[str, Any], secrets: Secrets) -> dict[str, Any]:
    """config.toml's tables with every secret replaced (and remembered in ``secrets``)."""

    def value(path: tuple[str, ...], item: Any) -> Any:
        key = path[-1] if path else ""
        if isinstance(item, dict):
            return {k: value((*path, str(k)), v) for k, v in item.items()}
        if path[:1] == ("payments",) and len(path) == 2 and key not in _payments_public():
            return _hide(item, secrets)
        if path == ("notify", "command") and isinstance(item, list):
            for arg in item[1:]:
                secrets.add(arg)
            return item[:1] + [REDACTED] * (len(item) - 1)
        if path == ("notify", "webhook_url") and isinstance(item, str):
            return redact_url(item, secrets, keep_path=False) if item else item
        if is_secret_key(key):
            return _hide(item, secrets)
        if isinstance(item, list):
            return [value(path, v) for v in item]
        if isinstance(item, str) and "://" in item:
            return redact_url(item, secrets)
        return item

    return {str(k): value((str(k),), v) for k, v in raw.items()}


def _hide(item: Any, secrets: Secrets) -> str:
    # Only text is scrubbed elsewhere: a hidden number ("30.0") would otherwise be cut out of
    # every figure that happens to share it, and the archive's JSON with it.
    for part in item if isinstance(item, list) else [item]:
        if isinstance(part, str):
            secrets.add(part)
    return REDACTED


def _environment(secrets: Secrets, environ: dict[str, str]) -> dict[str, str]:
    shown: dict[str, str] = {}
    for name, text in sorted(environ.items()):
        if not (name.startswith("NUNET_") or name == "DOCKER_HOST"):
            continue
        lowered = name.lower()
        if is_secret_key(lowered.removeprefix("nunet_")) and not lowered.endswith(
            ("_keystore", "_passphrase_file")
        ):
            secrets.add(text)
            shown[name] = REDACTED
        elif name == "NUNET_NOTIFY_WEBHOOK_URL":
            shown[name] = redact_url(text, secrets, keep_path=False)
        elif name == "NUNET_NOTIFY_COMMAND":
            args = [a for a in text.split(",") if a.strip()]
            for arg in args[1:]:
                secrets.add(arg)
            shown[name] = ",".join(args[:1] + [REDACTED] * (len(args) - 1))
        elif (
            name.startswith("NUNET_PAYMENTS_")
            and lowered.removeprefix("nunet_payments_") not in _payments_public()
        ):
            secrets.add(text)
            shown[name] = REDACTED
        else:
            shown[name] = redact_url(text, secrets) if "://" in text else text
    return shown


def _passphrase_file(raw: dict[str, Any], paths: Paths) -> Path | None:
    payments = raw.get("payments")
    name = payments.get("passphrase_file") if isinstance(payments, dict) else None
    if not isinstance(name, str) or not name.strip():
        return None
    path = Path(name.strip()).expanduser()
    return path if path.is_absolute() else paths.config_dir / path


def _read_small(path: Path, most: int = 4096) -> str | None:
    """A regular file's text, if it is one (no links followed) and small; else None."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            return None
        return handle.read(most).decode("utf-8", "replace")


# --- what goes in ------------------------------------------------------------------------------


@dataclass
class Archive:
    root: str
    members: dict[str, bytes] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    def text(self, name: str, text: str, secrets: Secrets) -> None:
        self.members[f"{self.root}/{name}"] = secrets.scrub(text).encode("utf-8")

    def json(self, name: str, data: Any, secrets: Secrets) -> None:
        shown = secrets.scrub_data(json.loads(json.dumps(data, default=str)))
        text = json.dumps(shown, indent=2, ensure_ascii=False) + "\n"
        self.members[f"{self.root}/{name}"] = text.encode("utf-8")


def _log_files(paths: Paths) -> list[tuple[str, Path]]:
    found: list[tuple[str, Path]] = []
    with contextlib.suppress(OSError):
        for entry in sorted(paths.log_dir.iterdir()):
            if entry.name.startswith("engine.log") or entry.name.endswith((".stderr", ".log")):
                found.append((f"logs/{entry.name}", entry))
    if paths.home is not None:
        stderr = paths.home / "daemon.stderr"  # where a service wrapper keeps the daemon's
        found.append(("logs/daemon.stderr", stderr))
    return found


def _read_log(path: Path) -> str | None:
    """The newest MAX_LOG_BYTES of a regular file (no links followed), or None."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode):
            return None
        if info.st_size > MAX_LOG_BYTES:
            handle.seek(info.st_size - MAX_LOG_BYTES)
        data = handle.read(MAX_LOG_BYTES)
    return data.decode("utf-8", "replace")


def _versions() -> dict[str, Any]:
    from importlib import metadata  # 25 ms: only the archive needs it, not every command

    def version(name: str) -> str:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return "not installed"

    return {
        "nunet-tui": version("nunet-tui"),
        "python": sys.version.split()[0],
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "packages": {name: version(name) for name in PACKAGES},
        "docker_engine": _docker_version(),
    }


def _docker_version() -> str:
    from engine.resources.readiness import probe_docker

    result: list[str] = []

    def probe() -> None:
        status = probe_docker(os.environ)
        if status.reachable:
            result.append(status.server_version or "reachable, version unknown")
        else:
            result.append(f"not reachable at {status.url} ({status.error or 'no answer'})")

    thread = threading.Thread(target=probe, daemon=True)
    thread.start()
    thread.join(DOCKER_TIMEOUT_S)
    return result[0] if result else f"no answer within {DOCKER_TIMEOUT_S:g} s"


def _job(job: api.JobInfo) -> dict[str, Any]:
    spec = {k: getattr(job.spec, k) for k in ("name", "framework", "tier", "device", "kind")}
    return {
        "job_id": job.job_id,
        "role": job.role,
        "state": job.state,
        "reason": job.reason[:MAX_TEXT],
        "exit_code": job.exit_code,
        "executor": job.executor,
        "spec": {k: v for k, v in spec.items() if v is not None},
        "created_at": job.created_at,
        "updated_at": job.updated_at,
        "started_at": job.started_at,
        "finished_at": job.finished_at,
        "metering": api.to_builtins(job.metering) if job.metering else None,
    }


def _from_daemon(paths: Paths) -> dict[str, Any] | None:
    """The running node's view over its control socket, or None when none answers."""
    from engine.control_client import ControlClient

    try:
        client = ControlClient(paths.control_socket)
    except (OSError, EngineError):
        return None
    node: dict[str, Any] = {"source": "running node (control socket)", "problems": []}
    try:
        calls: list[tuple[str, api.Command, Callable[[Any], Any]]] = [
            ("info", api.GetInfo(), api.to_builtins),
            ("jobs", api.ListJobs(), lambda r: [_job(j) for j in r.jobs[:RECENT_JOBS]]),
            ("network", api.GetNetworkStatus(), _network),
            ("escrows", api.RewardList(), _escrows),
        ]
        for name, command, shape in calls:
            try:
                node[name] = shape(client.call_blocking(command, timeout=CALL_TIMEOUT_S))
            except EngineError as exc:
                node["problems"].append(f"{name}: {exc.message}")
    finally:
        client.close()
    info = node.get("info")
    if isinstance(info, dict):
        node["readiness"] = info.pop("readiness", None)
    return node


def _network(status: api.NetworkStatus) -> dict[str, Any]:
    data: dict[str, Any] = api.to_builtins(status)
    data["peers"] = len(status.peers)  # how many, not who
    return data


def _escrows(listing: api.EscrowList) -> dict[str, Any]:
    return {
        "earned_units": listing.earned_units,
        "spent_units": listing.spent_units,
        "locked_units": listing.locked_units,
        "refunded_units": listing.refunded_units,
        "escrows": [
            {
                "job_id": e.job_id,
                "role": e.role,
                "state": e.state,
                "amount": e.amount,
                "error": e.error[:MAX_TEXT],
            }
            for e in listing.escrows[:RECENT_JOBS]
        ],
    }


def _from_store(paths: Paths) -> dict[str, Any]:
    """No node runs: the database read-only, and readiness probed here."""
    from engine.probes import check_host_readiness
    from engine.resources.gpu.detect import detect_gpus
    from engine.store import Store

    node: dict[str, Any] = {"source": "database (read-only; no node running)", "problems": []}
    if paths.database.exists():
        try:
            store = Store(paths.database, readonly=True)
            try:
                onboarding = store.get_onboarding()
                node["onboarding"] = api.to_builtins(onboarding) if onboarding else None
                node["mode"] = store.get_value("mode")
                node["jobs"] = [_job(job) for job in store.list_jobs(limit=RECENT_JOBS)]
            finally:
                store.close()
        except Exception as exc:  # a damaged or newer database: say so, keep going
            node["problems"].append(f"database {paths.database}: {exc}")
    else:
        node["problems"].append(f"no database at {paths.database}")
    try:
        gpus, reason = detect_gpus()
        node["gpus"] = [api.to_builtins(g) for g in gpus]
        node["gpu_reason"] = reason
        node["readiness"] = api.to_builtins(check_host_readiness(gpus))
    except Exception as exc:
        node["problems"].append(f"readiness: {exc}")
    return node


def _config(archive: Archive, paths: Paths, secrets: Secrets, environ: dict[str, str]) -> None:
    raw: dict[str, Any] = {}
    note = ""
    data = _read_small(paths.config_file, MAX_CONFIG_BYTES + 1)
    if data is None:
        note = f"# no readable {paths.config_file}: the defaults apply\n"
    else:
        try:
            raw = tomllib.loads(data)
        except (tomllib.TOMLDecodeError, RecursionError) as exc:
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            # Not shown: what does not parse cannot be redacted with any confidence.
            note = f"# {paths.config_file} is not valid TOML ({first}); its text is left out\n"
    redacted = redact_config(raw, secrets)
    if passphrase_file := _passphrase_file(raw, paths):
        secrets.add(_read_small(passphrase_file))
    secrets.add(environ.get("NUNET_KEYRING_PASSPHRASE"))
    shown_env = _environment(secrets, environ)
    import tomli_w

    archive.text("config/config.toml", note + tomli_w.dumps(redacted), secrets)
    archive.json("config/environment.json", shown_env, secrets)
    try:
        from engine.config import load_settings

        settings = load_settings(paths, environ)
        archive.json(
            "config/settings.json",
            redact_config(api.to_builtins(settings), secrets),
            secrets,
        )
    except EngineError as exc:
        archive.problems.append(f"settings: {exc.message}")


def build(paths: Paths, environ: dict[str, str] | None = None) -> Archive:
    environ = dict(os.environ) if environ is None else environ
    stamp = time.strftime("%Y%m%d-%H%M%S")
    archive = Archive(root=f"nunet-log-{stamp}")
    secrets = Secrets()
    _config(archive, paths, secrets, environ)  # first: it finds the secrets to scrub
    logs = []
    for name, path in _log_files(paths):
        text = _read_log(path)
        if text is not None:
            archive.text(name, text, secrets)
            logs.append(name)
    archive.json("versions.json", _versions(), secrets)
    node = _from_daemon(paths) or _from_store(paths)
    archive.json("node.json", node, secrets)
    summary = [
        "nunet-tui support archive",
        f"made {time.strftime('%Y-%m-%d %H:%M:%S %z')} for the home {paths.label}",
        f"node state from: {node['source']}",
        "logs: " + (", ".join(logs) or "none found"),
        "secrets (passphrases, API keys, tokens, URL credentials, hook arguments) are "
        f"replaced by {REDACTED}; keys and the keystore are not included",
        *(f"problem: {p}" for p in archive.problems + node.get("problems", [])),
    ]
    archive.text("README.txt", "\n".join(summary) + "\n", secrets)
    return archive


def write(archive: Archive, target: Path) -> None:
    """The .tar.gz at ``target``, 0600, never over an existing file."""
    import tarfile  # not on the import path of every other command

    try:
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        raise EngineError(
            "exists", f"{target} already exists; name another with -o or remove it"
        ) from None
    try:
        with os.fdopen(fd, "wb") as handle, tarfile.open(fileobj=handle, mode="w:gz") as tar:
            for name, data in archive.members.items():
                info = tarfile.TarInfo(name)
                info.size = len(data)
                info.mtime = int(time.time())
                info.mode = 0o600
                tar.addfile(info, io.BytesIO(data))
    except BaseException:
        with contextlib.suppress(OSError):
            target.unlink()
        raise


def run_log_archive(paths: Paths, args: argparse.Namespace) -> int:
    if not paths.config_dir.exists() and not paths.state_dir.exists():
        raise EngineError(
            "no_home", f"no nunet-tui node at {paths.label}: nothing to collect (--home?)"
        )
    archive = build(paths)
    target = Path(args.output) if args.output else Path.cwd() / f"{archive.root}.tar.gz"
    target = target.expanduser().absolute()
    write(archive, target)
    if getattr(args, "json", False):
        members = [name.split("/", 1)[1] for name in archive.members]
        output.show_json({"path": str(target), "files": members})
    else:
        output.show(str(target))
    return 0


def members(path: Path) -> Iterable[tuple[str, bytes]]:
    """Each file in an archive this module wrote (tests and support read them back)."""
    import tarfile

    with tarfile.open(path, "r:gz") as tar:
        for info in tar.getmembers():
            handle = tar.extractfile(info)
            if handle is not None:
                yield info.name, handle.read()
