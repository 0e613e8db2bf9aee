"""The wallet's engine commands, and the wallet as the rest of the engine (escrow) uses it.

Public data (key hashes, origin) lives in the store's ``wallet`` table; the mnemonic and the
Blockfrost project id live only in the keystore. Keystore, key derivation and chain calls
block (Argon2, pycardano, HTTP), so they run in worker threads; the store is touched only
here on the trio thread. Nothing secret is logged or put in an error message.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import trio

from engine import api
from engine.context import NodeContext
from engine.errors import EngineError
from engine.payments import chain
from engine.payments.keystore import (
    FILE_NAME,
    Keystore,
    choose_backend,
    passphrase_sources,
)
from engine.payments.wallet import (
    WalletKeys,
    base_address,
    derive_keys,
    generate_mnemonic,
    validate_mnemonic,
)
from engine.store import WalletRow
from oracle_client.cardano.address import Network, network_for_channel

if TYPE_CHECKING:
    from pycardano import ChainContext, PaymentExtendedSigningKey

log = logging.getLogger("nunet.payments")

MNEMONIC = "cardano-wallet-mnemonic"
BLOCKFROST = "blockfrost-project-id"
KEYSTORE_CHOICE = "payments.keystore"  # node_kv: the backend this home's secrets went to
_MAX_PROJECT_ID = 100


class NodePayments:
    def __init__(self, ctx: NodeContext) -> None:
        self.ctx = ctx
        self._keystore: Keystore | None = None
        self._context: ChainContext | None = None
        # One wallet change at a time: new/import each read, then replace, the one wallet.
        self._changing = trio.Lock()
        # Each transaction's recharge verdict, by address and hash (history.MAX_CACHED).
        self._recharge_verdicts: dict[str, api.Recharge | None] = {}
        from engine.payments.escrow import Escrows

        self.escrows = Escrows(ctx, wallet=self)

    def commands(self) -> dict[type[api.Command], Callable[[Any], Awaitable[Any]]]:
        return {
            api.WalletNew: self._new,
            api.WalletImport: self._import,
            api.WalletShow: self._show,
            api.WalletBalance: self._balance,
            api.WalletRecharges: self._recharges,
            api.UnlockKeystore: self._unlock,
            api.SetBlockfrostProjectId: self._set_blockfrost,
            api.RewardList: self._reward_list,
            api.RewardClaim: self._reward_claim,
            api.RewardRefund: self._reward_refund,
        }

    # --- rewards (the escrow of paid jobs) ----------------------------------------------------

    async def _reward_list(self, command: api.RewardList) -> api.EscrowList:
        return self.escrows.listing()

    async def _reward_claim(self, command: api.RewardClaim) -> api.EscrowInfo:
        return await self._settle(command.job_id, "provider", "claim")

    async def _reward_refund(self, command: api.RewardRefund) -> api.EscrowInfo:
        return await self._settle(command.job_id, "consumer", "refund")

    async def _settle(self, job_id: str, role: str, verb: str) -> api.EscrowInfo:
        job_id = job_id.strip()
        record = self.escrows.get(job_id)
        if record is None:
            raise EngineError("not_found", f"no escrow for job {job_id!r}; `nunet-tui reward list`")
        if record.info.role != role:
            raise EngineError(
                "invalid",
                f"this node is job {job_id}'s {record.info.role}: only its {role} can {verb}",
            )
        return await self.escrows.settle(job_id)

    # --- for other engine code (the escrow flow) -------------------------------------------

    def channel(self) -> str:
        onboarding = self.ctx.store.get_onboarding()
        return onboarding.channel if onboarding else self.ctx.settings.network.channel

    def network(self) -> Network:
        return network_for_channel(self.channel())

    def wallet(self) -> api.WalletInfo:
        """The wallet's public half on this node's network, or a ``no_wallet`` error."""
        return self._info(self._require_wallet())

    async def payment_signing_key(self) -> PaymentExtendedSigningKey:
        """The wallet's payment key, for signing transactions inside the engine only.

        Re-derived from the keystore each time (never cached, never in a reply), and checked
        against the stored key hash so a keystore of another wallet is never used."""
        row = self._require_wallet()
        keystore = await self.keystore()
        mnemonic = await trio.to_thread.run_sync(keystore.get, MNEMONIC)
        if mnemonic is None:
            raise EngineError(
                "keystore",
                f"the keystore ({keystore.location}) holds no mnemonic for this node's wallet; "
                "restore it with `nunet-tui wallet import --force`",
            )
        keys = await trio.to_thread.run_sync(derive_keys, mnemonic)
        del mnemonic
        if keys.payment_key_hash != row.payment_key_hash:
            raise EngineError(
                "keystore",
                f"the mnemonic in the keystore ({keystore.location}) belongs to another wallet; "
                "restore this one with `nunet-tui wallet import --force`",
            )
        return keys.payment_signing_key

    async def chain_context(self) -> ChainContext:
        """The configured chain backend (cached once it answered)."""
        if self._context is None:
            settings = self.ctx.settings.payments
            project_id = await self._project_id()
            context = await trio.to_thread.run_sync(chain.build_context, settings, project_id)
            self._context = self._context or context
        return self._context

    async def _project_id(self) -> str | None:
        """The Blockfrost project id from the keystore (None for the local ledger)."""
        if chain.require_backend(self.ctx.settings.payments) == "local":
            return None
        keystore = await self.keystore()
        found: str | None = await trio.to_thread.run_sync(keystore.get, BLOCKFROST)
        return found

    async def keystore(self) -> Keystore:
        if self._keystore is None:
            settings = self.ctx.settings.payments
            keyfile = self.ctx.paths.keys_dir / FILE_NAME
            recorded = self.ctx.store.get_value(KEYSTORE_CHOICE)
            # Probing the Secret Service is a D-Bus round trip: off the trio thread.
            backend = await trio.to_thread.run_sync(
                lambda: choose_backend(
                    settings.keystore,
                    recorded,
                    file_exists=keyfile.exists() and keyfile.stat().st_size > 0,
                )
            )
            keystore = Keystore(
                backend,
                keyfile,
                namespace=self.ctx.identity.peer_id,
                sources=passphrase_sources(os.environ, self._passphrase_file()),
            )
            if self._keystore is None:  # another command may have built one meanwhile
                self._keystore = keystore
        return self._keystore

    # --- commands --------------------------------------------------------------------------

    async def _new(self, command: api.WalletNew) -> api.WalletCreated:
        async with self._changing:
            existing = self.ctx.store.get_wallet()
            if existing is not None and not command.force:
                raise self._exists(existing, "new")
            keystore = await self.keystore()

            def create() -> tuple[str, WalletKeys]:
                if not command.force and keystore.get(MNEMONIC) is not None:
                    raise _orphan_mnemonic("new")
                mnemonic = generate_mnemonic()
                keys = derive_keys(mnemonic)
                keystore.put(MNEMONIC, mnemonic)
                return mnemonic, keys

            mnemonic, keys = await trio.to_thread.run_sync(create)
            info = self._save(keys, "new", keystore)
            replaced = self._info(existing).address if existing is not None else None
            log.info(
                "wallet created: %s on %s%s",
                info.address,
                info.network,
                f", replacing {replaced}" if replaced else "",
            )
            return api.WalletCreated(wallet=info, mnemonic=mnemonic, replaced=replaced)

    async def _import(self, command: api.WalletImport) -> api.WalletImported:
        mnemonic = validate_mnemonic(command.mnemonic)  # before anything is unlocked
        async with self._changing:
            existing = self.ctx.store.get_wallet()
            keys = await trio.to_thread.run_sync(derive_keys, mnemonic)
            same = existing is not None and existing.payment_key_hash == keys.payment_key_hash
            if existing is not None and not same and not command.force:
                raise self._exists(existing, "import")
            keystore = await self.keystore()

            def store_secret() -> None:
                if existing is None and not command.force:
                    held = keystore.get(MNEMONIC)
                    if held is not None and validate_mnemonic(held) != mnemonic:
                        raise _orphan_mnemonic("import")
                keystore.put(MNEMONIC, mnemonic)

            await trio.to_thread.run_sync(store_secret)
            info = self._save(keys, "import", keystore)
            replaced = self._info(existing).address if existing is not None and not same else None
            log.info("wallet imported: %s on %s", info.address, info.network)
            return api.WalletImported(wallet=info, replaced=replaced)

    async def _show(self, command: api.WalletShow) -> api.WalletInfo:
        row = self._require_wallet()
        keystore = await self.keystore()
        return self._info(row, keystore.info())

    async def _balance(self, command: api.WalletBalance) -> api.Balance:
        settings = self.ctx.settings.payments
        info = self.wallet()
        chain.check_network(settings, info.network, info.channel)
        context = await self.chain_context()
        unit = await trio.to_thread.run_sync(chain.ntx_unit, settings)
        lovelace, ntx_units = await trio.to_thread.run_sync(
            chain.balance, context, info.address, unit
        )
        return api.Balance(
            address=info.address,
            network=info.network,
            backend=settings.backend,
            lovelace=lovelace,
            ntx_units=ntx_units,
            ntx_unit=unit.unit if unit is not None else None,
        )

    async def _recharges(self, command: api.WalletRecharges) -> api.RechargeList:
        from engine.payments import history
        from oracle_client.escrow.contract import escrow_script_hash

        settings = self.ctx.settings.payments
        info = self.wallet()
        chain.check_network(settings, info.network, info.channel)
        unit = await trio.to_thread.run_sync(chain.ntx_unit, settings)
        if unit is None:
            raise EngineError(
                "config", "the NTX token is not known here (set [payments] ntx_policy_id)"
            )
        url, key = chain.endpoint(settings, await self._project_id())
        # Refunds and splits spend the escrow script, or one of our own locks (an escrow of
        # an older script): neither is a recharge.
        own_locks = {e.lock_tx for e in self.escrows.listing().escrows if e.lock_tx}
        is_escrow = history.script_address_matcher(escrow_script_hash().payload)
        return await trio.to_thread.run_sync(
            lambda: history.read_recharges(
                history.Backend(url, key),
                info.address,
                unit.unit,
                is_escrow=is_escrow,
                own_locks=own_locks,
                limit=command.limit,
                backend_name=settings.backend,
                cache=self._recharge_verdicts,
            )
        )

    async def _unlock(self, command: api.UnlockKeystore) -> api.KeystoreInfo:
        keystore = await self.keystore()
        created = not keystore.info().exists
        info = await trio.to_thread.run_sync(keystore.unlock, command.passphrase)
        if created:
            self._record_backend(keystore)
            log.info("keystore created: %s", keystore.location)
        return info

    async def _set_blockfrost(self, command: api.SetBlockfrostProjectId) -> api.Done:
        project_id = command.project_id.strip()
        if not project_id or len(project_id) > _MAX_PROJECT_ID or not project_id.isalnum():
            raise EngineError(
                "invalid",
                "a Blockfrost project id is one word of letters and digits (preprod… or "
                "mainnet…), as blockfrost.io shows it",
            )
        keystore = await self.keystore()
        await trio.to_thread.run_sync(keystore.put, BLOCKFROST, project_id)
        self._record_backend(keystore)
        self._context = None  # the next chain call uses the new id
        return api.Done(
            message=f"Blockfrost project id stored in the keystore ({keystore.location})"
        )

    # --- helpers ---------------------------------------------------------------------------

    def _require_wallet(self) -> WalletRow:
        row = self.ctx.store.get_wallet()
        if row is None:
            raise EngineError(
                "no_wallet",
                "this node has no wallet yet: `nunet-tui wallet new --cardano` makes one, "
                "`nunet-tui wallet import` restores one from its mnemonic",
            )
        return row

    def _info(self, row: WalletRow, keystore: api.KeystoreInfo | None = None) -> api.WalletInfo:
        channel = self.channel()
        network = network_for_channel(channel)
        return api.WalletInfo(
            address=base_address(row.payment_key_hash, row.stake_key_hash, network),
            network=network,
            channel=channel,
            payment_key_hash=row.payment_key_hash,
            stake_key_hash=row.stake_key_hash,
            origin="import" if row.origin == "import" else "new",
            created_at=row.created_at,
            keystore=keystore,
        )

    def _save(
        self, keys: WalletKeys, origin: Literal["new", "import"], keystore: Keystore
    ) -> api.WalletInfo:
        row = WalletRow(
            chain="cardano",
            payment_key_hash=keys.payment_key_hash,
            stake_key_hash=keys.stake_key_hash,
            origin=origin,
            created_at=time.time(),
        )
        self.ctx.store.save_wallet(row)
        self._record_backend(keystore)
        return self._info(row, keystore.info())

    def _record_backend(self, keystore: Keystore) -> None:
        if self.ctx.store.get_value(KEYSTORE_CHOICE) != keystore.backend:
            self.ctx.store.set_value(KEYSTORE_CHOICE, keystore.backend)

    def _exists(self, row: WalletRow, verb: str) -> EngineError:
        return EngineError(
            "wallet_exists",
            f"this node already has a wallet ({self._info(row).address}); "
            f"`nunet-tui wallet {verb} --force` replaces it, and its funds then stay "
            "reachable only through the mnemonic you wrote down",
        )

    def _passphrase_file(self) -> Path | None:
        name = self.ctx.settings.payments.passphrase_file.strip()
        if not name:
            return None
        path = Path(name).expanduser()
        return path if path.is_absolute() else self.ctx.paths.config_dir / path


def _orphan_mnemonic(verb: str) -> EngineError:
    return EngineError(
        "wallet_exists",
        "the keystore already holds a wallet mnemonic this node's database does not list "
        f"(was the state folder reset?); `nunet-tui wallet {verb} --force` replaces it",
    )
