"""Where a node keeps things, and its settings.

Without ``--home`` the usual per-user folders (platformdirs) are used. ``--home DIR`` (or
``NUNET_HOME``) puts config, state, logs and keys under one folder, which is what lets several
nodes share one machine in tests and the demo. Settings come from ``config.toml`` and are
overridden by ``NUNET_<SECTION>_<KEY>`` environment variables.
"""

from __future__ import annotations

import hashlib
import os
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import msgspec
import platformdirs

from engine.errors import EngineError
from engine.jobs.fetch_policy import parse_networks
from engine.resources.ml_images import DEFAULT_ML_IMAGES

APP_NAME = "nunet-tui"
ENV_PREFIX = "NUNET_"
# AF_UNIX paths are limited to 108 bytes; leave room for the terminating NUL.
_MAX_SOCKET_PATH = 100


@dataclass(frozen=True)
class Paths:
    config_dir: Path
    state_dir: Path
    log_dir: Path
    keys_dir: Path
    home: Path | None = None

    @classmethod
    def for_home(cls, home: str | os.PathLike[str] | None = None) -> Paths:
        home = home if home is not None else os.environ.get(f"{ENV_PREFIX}HOME") or None
        if home is not None:
            root = Path(home).expanduser().resolve()
            return cls(root / "config", root / "state", root / "logs", root / "keys", root)
        state = Path(platformdirs.user_state_dir(APP_NAME))
        return cls(
            Path(platformdirs.user_config_dir(APP_NAME)),
            state,
            Path(platformdirs.user_log_dir(APP_NAME)),
            state / "keys",
        )

    @property
    def label(self) -> str:
        return str(self.home) if self.home is not None else str(self.state_dir)

    @property
    def config_file(self) -> Path:
        return self.config_dir / "config.toml"

    @property
    def database(self) -> Path:
        return self.state_dir / "nunet.db"

    @property
    def identity_key(self) -> Path:
        return self.keys_dir / "identity.key"

    @property
    def lock_file(self) -> Path:
        return self.state_dir / "engine.lock"

    @property
    def log_file(self) -> Path:
        return self.log_dir / "engine.log"

    @property
    def control_socket(self) -> Path:
        preferred = self.state_dir / "control.sock"
        if len(os.fsencode(preferred)) <= _MAX_SOCKET_PATH:
            return preferred
        # Deep homes (pytest's tmp dirs) overflow sun_path: use a per-user 0700 folder
        # keyed by the state dir, so the same home always maps to the same socket.
        digest = hashlib.sha256(os.fsencode(self.state_dir)).hexdigest()[:20]
        return Path(f"/tmp/nunet-tui-{os.getuid()}") / f"{digest}.sock"

    def ensure(self) -> None:
        """Create the folders, private to the user (keys and the socket live there)."""
        for folder in (self.config_dir, self.state_dir, self.log_dir, self.keys_dir):
            folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        for private in (self.state_dir, self.keys_dir):
            os.chmod(private, 0o700)
        sock_dir = self.control_socket.parent
        if sock_dir != self.state_dir:
            sock_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
            os.chmod(sock_dir, 0o700)


class NetworkSettings(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    # The channel a node that is not onboarded (a consumer) watches; onboarding sets its own.
    channel: str = "nunet-test"
    listen: list[str] = msgspec.field(default_factory=lambda: ["/ip4/0.0.0.0/tcp/9000"])
    bootstrap: list[str] = msgspec.field(default_factory=list)
    heartbeat_interval_s: float = 60.0
    mdns_interfaces: list[str] = msgspec.field(default_factory=list)


class JobSettings(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    slots: int = 1
    executors: list[str] = msgspec.field(default_factory=lambda: ["docker"])
    # Snapshots of a running job's /workspace, for resuming after a restart (0: none).
    checkpoint_interval_s: float = 60.0
    # NTX per hour of machine time, per resource tier; advertised to consumers.
    prices: dict[str, float] = msgspec.field(
        default_factory=lambda: {"low": 1.0, "moderate": 2.5, "high": 6.0}
    )
    # How long a quote holds for the consumer to confirm; unconfirmed ones are then dropped.
    quote_ttl_s: float = 120.0
    # Networks (CIDRs) a job's script URL or git host may be in besides public addresses:
    # loopback, LAN and link-local ones are refused unless listed (a LAN market, the demo).
    fetch_allow_networks: list[str] = msgspec.field(default_factory=list)


class MachineSettings(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """What to believe instead of detection, for VMs and containers whose probes lie.

    Unset fields (None) are detected. Declared values replace the detected ones in every
    capacity view, so the available view never exceeds what was declared.
    """

    hostname: str | None = None
    cpu_model: str | None = None
    cpu_cores: int | None = None
    cpu_mhz_per_core: int | None = None
    memory_mb: int | None = None
    disk_mb: int | None = None


class MlImagesSettings(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """[ml_images]: the framework images onboard-ml pulls (an empty string skips one)."""

    pytorch_cpu: str = DEFAULT_ML_IMAGES["pytorch_cpu"]
    pytorch_nvidia: str = DEFAULT_ML_IMAGES["pytorch_nvidia"]
    pytorch_amd: str = DEFAULT_ML_IMAGES["pytorch_amd"]
    tensorflow_cpu: str = DEFAULT_ML_IMAGES["tensorflow_cpu"]
    tensorflow_nvidia: str = DEFAULT_ML_IMAGES["tensorflow_nvidia"]
    tensorflow_amd: str = DEFAULT_ML_IMAGES["tensorflow_amd"]

    def as_map(self) -> dict[str, str]:
        return {f.name: getattr(self, f.name) for f in msgspec.structs.fields(self)}


class PaymentsSettings(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """[payments]: the wallet's keystore and the chain it reads (engine/payments/)."""

    # none: no chain reads; local: the local ledger at ledger_url; preprod/mainnet: Blockfrost
    # (its project id is kept in the keystore: `nunet-tui wallet blockfrost`).
    backend: Literal["none", "local", "preprod", "mainnet"] = "none"
    ledger_url: str = ""  # the local ledger's Blockfrost base URL (/v0 is appended)
    # auto: the desktop's Secret Service when usable, else the encrypted file in the keys dir.
    keystore: Literal["auto", "secretservice", "file"] = "auto"
    passphrase_file: str = ""  # unlocks the encrypted file; must be 0600 (relative: config dir)
    ntx_policy_id: str = ""  # hex; empty with backend = "local": the ledger says
    ntx_asset_name: str = ""  # hex
    # The oracle that signs escrow releases; its key (from its /info) is what the datum names.
    oracle_url: str = ""
    # Provider: run only jobs whose NTX is locked in escrow (when a backend is configured).
    require_payment: bool = True
    # Consumer: the escrow deadline is twice the expected duration plus this margin.
    deadline_margin_s: Annotated[int, msgspec.Meta(ge=60, le=30 * 86400)] = 3600


class Settings(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    log_level: str = "info"
    ml_images: MlImagesSettings = msgspec.field(default_factory=MlImagesSettings)
    machine: MachineSettings = msgspec.field(default_factory=MachineSettings)
    network: NetworkSettings = msgspec.field(default_factory=NetworkSettings)
    jobs: JobSettings = msgspec.field(default_factory=JobSettings)
    payments: PaymentsSettings = msgspec.field(default_factory=PaymentsSettings)


_LOG_LEVELS = ("debug", "info", "warning", "error")


def load_settings(paths: Paths, environ: dict[str, str] | None = None) -> Settings:
    """Read config.toml, apply NUNET_* overrides, validate; a bad value is a clear error."""
    environ = dict(os.environ) if environ is None else environ
    raw: dict[str, Any] = {}
    if paths.config_file.exists():
        try:
            raw = tomllib.loads(paths.config_file.read_text(encoding="utf-8"))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise EngineError(
                "config", f"{paths.config_file} is not valid TOML ({exc}); fix or remove it"
            ) from exc
    _apply_env(raw, environ)
    try:
        settings = msgspec.convert(raw, Settings)
    except msgspec.ValidationError as exc:
        raise EngineError(
            "config", f"bad setting in {paths.config_file} or NUNET_* environment: {exc}"
        ) from exc
    if settings.log_level.lower() not in _LOG_LEVELS:
        raise EngineError(
            "config",
            f"log_level must be one of {', '.join(_LOG_LEVELS)}, not {settings.log_level!r}",
        )
    _check_multiaddrs(settings.network)
    if settings.jobs.slots < 1:
        raise EngineError("config", f"jobs.slots must be at least 1, not {settings.jobs.slots}")
    parse_networks(settings.jobs.fetch_allow_networks)
    return settings


def _check_multiaddrs(network: NetworkSettings) -> None:
    import multiaddr  # small; py-libp2p itself is only imported when the network starts

    for kind, addrs in (
        ("network.listen", network.listen),
        ("network.bootstrap", network.bootstrap),
    ):
        for addr in addrs:
            try:
                parsed = multiaddr.Multiaddr(addr)
            except Exception as exc:
                raise EngineError(
                    "config",
                    f"{kind}: {addr!r} is not a multiaddr ({exc}); "
                    "write it like /ip4/127.0.0.1/tcp/9000",
                ) from exc
            if kind == "network.bootstrap" and "p2p" not in [p.name for p in parsed.protocols()]:
                raise EngineError(
                    "config",
                    f"{kind}: {addr!r} names no peer; end it with /p2p/12D3KooW… "
                    "(`nunet-tui peer self` on that node prints its full addresses)",
                )


def _apply_env(raw: dict[str, Any], environ: dict[str, str]) -> None:
    """NUNET_LOG_LEVEL, NUNET_NETWORK_LISTEN=a,b, NUNET_JOBS_SLOTS=2 ... (lists: commas)."""
    top = {f.name for f in msgspec.structs.fields(Settings)}
    sections: dict[str, type[msgspec.Struct]] = {
        "network": NetworkSettings,
        "jobs": JobSettings,
        "machine": MachineSettings,
        "ml_images": MlImagesSettings,
        "payments": PaymentsSettings,
    }
    for key, value in environ.items():
        if not key.startswith(ENV_PREFIX):
            continue
        name = key[len(ENV_PREFIX) :].lower()
        if name in top and name not in sections:
            raw[name] = _env_value(Settings, name, value)
            continue
        for section, struct in sections.items():
            prefix = section + "_"
            if name.startswith(prefix):
                field = name[len(prefix) :]
                if field in {f.name for f in msgspec.structs.fields(struct)}:
                    raw.setdefault(section, {})[field] = _env_value(struct, field, value)


def _env_value(struct: type[msgspec.Struct], field: str, value: str) -> Any:
    kind = next(f.type for f in msgspec.structs.fields(struct) if f.name == field)
    if kind == list[str]:
        return [item.strip() for item in value.split(",") if item.strip()]
    if kind is bool:
        return value.strip().lower() in ("1", "true", "yes", "on")
    if kind is int or kind == (int | None):
        try:
            return int(value)
        except ValueError:
            return value  # msgspec.convert then names the field and the expected type
    if kind is float:
        try:
            return float(value)
        except ValueError:
            return value
    return value
