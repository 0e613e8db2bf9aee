"""The chain backend: a pycardano ChainContext built from ``[payments]``, and balances.

``backend`` picks it: ``none`` (no chain reads), ``local`` (the local ledger, a Blockfrost HTTP
subset at ``ledger_url``), ``preprod`` or ``mainnet`` (Blockfrost, with the project id kept in
the keystore). Every call here blocks on HTTP: run it in a thread.

NTX is the native token ``ntx_policy_id`` + ``ntx_asset_name`` (hex) from config. With the
local ledger and no policy configured, the ledger says (``GET {ledger_url}/v0/ledger/info``,
``{"ntx": {"policy_id": hex, "asset_name_hex": hex, ...}}``: the token its faucet mints).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple, TypeVar

from engine.config import PaymentsSettings
from engine.errors import EngineError
from oracle_client.cardano.address import Network

if TYPE_CHECKING:
    from pycardano import ChainContext

T = TypeVar("T")

BACKEND_NETWORK: dict[str, Network] = {
    "local": "testnet",
    "preprod": "testnet",
    "mainnet": "mainnet",
}
LOCAL_INFO_PATH = "/v0/ledger/info"  # ledger_url ends in /api, like Blockfrost's
# The local ledger takes any project id; Blockfrost's client insists on sending one.
LOCAL_PROJECT_ID = "local"
NTX_DECIMALS = 6
_HEX = re.compile(r"^(?:[0-9a-f]{2})*$")
_POLICY_HEX_LEN = 56  # 28-byte script hash
_MAX_ASSET_NAME_HEX = 64  # 32 bytes


class NtxUnit(NamedTuple):
    policy_id: str  # hex
    asset_name: str  # hex

    @property
    def unit(self) -> str:
        """Blockfrost's spelling: policy id and asset name, both hex, run together."""
        return self.policy_id + self.asset_name


def require_backend(settings: PaymentsSettings) -> str:
    if settings.backend == "none":
        raise EngineError(
            "no_chain",
            'no chain backend is configured: set [payments] backend = "preprod" (Blockfrost '
            'testnet), "mainnet", or "local" with ledger_url for the local ledger',
        )
    if settings.backend == "local" and not settings.ledger_url:
        raise EngineError(
            "config", '[payments] backend = "local" needs ledger_url (the local ledger\'s URL)'
        )
    return settings.backend


def check_network(settings: PaymentsSettings, wallet_network: Network, channel: str) -> None:
    """A testnet wallet on a mainnet backend (or the reverse) would read the wrong chain."""
    backend_network = BACKEND_NETWORK[require_backend(settings)]
    if backend_network != wallet_network:
        raise EngineError(
            "network_mismatch",
            f"channel {channel} settles on {wallet_network} but [payments] backend = "
            f'"{settings.backend}" reads {backend_network}: use a '
            f"{'mainnet' if wallet_network == 'mainnet' else 'preprod or local'} backend",
        )


def build_context(settings: PaymentsSettings, project_id: str | None) -> ChainContext:
    """The Blockfrost-compatible chain context; it asks the backend for the epoch at once.
    Its cost models are the canonical lists (``cost_models_raw``): see that module."""
    from oracle_client.cardano.blockfrost import CanonicalBlockFrostContext

    url, key = endpoint(settings, project_id)
    return _calling(url, lambda: CanonicalBlockFrostContext(key, base_url=url))


def endpoint(settings: PaymentsSettings, project_id: str | None) -> tuple[str, str]:
    """(the Blockfrost API's base URL, ending in /api; the project id it is called with)."""
    from blockfrost import ApiUrls

    backend = require_backend(settings)
    if backend == "local":
        return settings.ledger_url.rstrip("/"), LOCAL_PROJECT_ID
    if not project_id:
        raise EngineError(
            "no_blockfrost_key",
            f"reading {backend} needs a Blockfrost project id: get one at blockfrost.io "
            "and store it with `nunet-tui wallet blockfrost` (it is kept in the keystore)",
        )
    url = ApiUrls.preprod.value if backend == "preprod" else ApiUrls.mainnet.value
    return url, project_id


def ntx_unit(settings: PaymentsSettings) -> NtxUnit | None:
    """The NTX token from config, else from the local ledger; None when nobody says."""
    policy = settings.ntx_policy_id.strip().lower()
    name = settings.ntx_asset_name.strip().lower()
    if policy:
        return _checked_unit(policy, name, "[payments] ntx_policy_id / ntx_asset_name")
    if settings.backend != "local" or not settings.ledger_url:
        return None
    import httpx

    url = settings.ledger_url.rstrip("/") + LOCAL_INFO_PATH
    try:
        response = httpx.get(url, timeout=10.0)
    except httpx.HTTPError as exc:
        raise EngineError("chain", f"cannot reach the local ledger at {url}: {exc}") from None
    if response.status_code == 404:
        return None
    try:
        response.raise_for_status()
        ntx = response.json()["ntx"]
        return _checked_unit(str(ntx["policy_id"]).lower(), str(ntx["asset_name_hex"]), url)
    except (httpx.HTTPError, ValueError, KeyError, TypeError) as exc:
        raise EngineError(
            "chain", f"the local ledger's NTX unit at {url} is unusable: {exc}"
        ) from None


def _checked_unit(policy: str, name: str, where: str) -> NtxUnit:
    name = name.lower()
    if len(policy) != _POLICY_HEX_LEN or not _HEX.match(policy):
        raise EngineError("config", f"{where}: the policy id must be 56 hex digits")
    if len(name) > _MAX_ASSET_NAME_HEX or not _HEX.match(name):
        raise EngineError("config", f"{where}: the asset name must be hex, at most 32 bytes")
    return NtxUnit(policy, name)


def balance(context: ChainContext, address: str, unit: NtxUnit | None) -> tuple[int, int | None]:
    """Lovelace and NTX base units at ``address`` (None: the NTX unit is not known)."""
    from pycardano import AssetName, ScriptHash

    utxos = _calling(_url_of(context), lambda: context.utxos(address))
    lovelace = sum(utxo.output.amount.coin for utxo in utxos)
    if unit is None:
        return lovelace, None
    policy = ScriptHash(bytes.fromhex(unit.policy_id))
    name = AssetName(bytes.fromhex(unit.asset_name))
    ntx = 0
    for utxo in utxos:
        assets = utxo.output.amount.multi_asset.get(policy)
        if assets is not None:
            ntx += int(assets.get(name, 0))
    return lovelace, ntx


def _url_of(context: ChainContext) -> str:
    return str(getattr(context, "_base_url", "the chain backend"))


def _calling(url: str, call: Callable[[], T]) -> T:
    """Blockfrost's client raises ApiError and requests' errors: name the backend instead."""
    import requests
    from blockfrost import ApiError

    try:
        return call()
    except ApiError as exc:
        if exc.status_code == 403:
            raise EngineError(
                "chain",
                f"{url} refused the Blockfrost project id (403): store the right one with "
                "`nunet-tui wallet blockfrost`",
            ) from None
        raise EngineError(
            "chain", f"{url} answered {exc.status_code}: {getattr(exc, 'message', exc)}"
        ) from None
    except requests.RequestException as exc:
        raise EngineError("chain", f"cannot reach the chain backend at {url}: {exc}") from None
