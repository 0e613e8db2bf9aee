"""Payments (issue 6): the wallet, the keystore, and the escrow of each paid job.

Data and commands of engine/payments/; handlers in engine/payments/service.py. A secret
(mnemonic, passphrase, API key) travels only in the command that carries it in and in
WalletCreated, and their reprs hide it, so a logged or printed object never shows one.

Escrow: one row per paid job on each side (engine/payments/escrow.py). Amounts are NTX base
units (6 decimals) so nothing is ever rounded; `ntx` fields are for display.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

from engine.api.base import Command, Done, Event, Record

KeystoreBackend = Literal["secretservice", "file"]
CardanoNetwork = Literal["testnet", "mainnet"]
_HIDDEN = "<hidden>"


class KeystoreInfo(Record, frozen=True):
    """Where this node's secrets are kept, and whether they can be read now."""

    backend: KeystoreBackend
    location: str  # "Secret Service (desktop keyring)" or the encrypted file's path
    locked: bool  # file: no passphrase given (TUI, `wallet unlock`) nor configured (env, file)
    exists: bool  # file: the encrypted file has been created


class WalletInfo(Record, frozen=True):
    """The wallet's public half: never a secret."""

    address: str  # base address on ``network`` (the node's channel decides it)
    network: CardanoNetwork
    channel: str
    payment_key_hash: str  # hex, 28 bytes: what the escrow datum names
    stake_key_hash: str
    origin: Literal["new", "import"]
    created_at: float
    chain: Literal["cardano"] = "cardano"
    keystore: KeystoreInfo | None = None


class WalletCreated(Record, frozen=True):
    """WalletNew's reply: the one time the mnemonic leaves the keystore."""

    wallet: WalletInfo
    mnemonic: str  # 24 words, space-separated
    replaced: str | None = None  # the address of the wallet that --force replaced

    def __repr__(self) -> str:
        return (
            f"WalletCreated(wallet={self.wallet!r}, mnemonic={_HIDDEN}, replaced={self.replaced!r})"
        )

    def __rich_repr__(self) -> Any:
        yield "wallet", self.wallet
        yield "mnemonic", _HIDDEN
        yield "replaced", self.replaced


class WalletImported(Record, frozen=True):
    wallet: WalletInfo
    replaced: str | None = None


class Balance(Record, frozen=True):
    """What the wallet's address holds on the chain backend: exact units and decimals."""

    address: str
    network: CardanoNetwork
    backend: str  # [payments] backend: local, preprod or mainnet
    lovelace: int
    # None: the NTX token is not known ([payments] ntx_policy_id, or the local ledger says).
    ntx_units: int | None  # NTX base units (6 decimals)
    ntx_unit: str | None  # policy id hex + asset name hex


class Recharge(Record, frozen=True):
    """NTX that arrived in the wallet from outside this node's escrows (a faucet, an
    exchange, another wallet), as the chain backend lists the wallet's transactions."""

    tx_hash: str
    at: float  # the block's time (seconds)
    amount_units: int  # NTX base units the wallet gained in this transaction
    kind: Literal["recharge"] = "recharge"
    # The senders' addresses as the chain shows them (the wallet's own left out); empty for
    # NTX created by the local ledger's faucet (a transaction with no inputs).
    from_addresses: tuple[str, ...] = ()


class RechargeList(Record, frozen=True):
    """The wallet's recharges, newest first, and how much of its history was read."""

    address: str
    backend: str
    recharges: tuple[Recharge, ...] = ()
    recharged_units: int = 0  # the sum of ``recharges``
    scanned: int = 0  # transactions of the address read from the backend
    # False: the address has more transactions than the bound; the oldest were not read.
    complete: bool = True


MAX_RECHARGE_SCAN = 1000


class WalletRecharges(Command, tag="wallet_recharges", frozen=True):
    """Read the wallet's transactions on the chain backend (newest first, at most ``limit``)
    and list those that brought NTX in; escrow refunds and pay are not recharges."""

    reply = RechargeList
    limit: Annotated[int, msgspec.Meta(ge=1, le=MAX_RECHARGE_SCAN)] = 200


class WalletNew(Command, tag="wallet_new", frozen=True):
    reply = WalletCreated
    force: bool = False  # replace an existing wallet (its mnemonic is deleted)


class WalletImport(Command, tag="wallet_import", frozen=True):
    reply = WalletImported
    mnemonic: str
    force: bool = False

    def __repr__(self) -> str:
        return f"WalletImport(mnemonic={_HIDDEN}, force={self.force!r})"

    def __rich_repr__(self) -> Any:
        yield "mnemonic", _HIDDEN
        yield "force", self.force


class WalletShow(Command, tag="wallet_show", frozen=True):
    reply = WalletInfo


class WalletBalance(Command, tag="wallet_balance", frozen=True):
    reply = Balance


class UnlockKeystore(Command, tag="keystore_unlock", frozen=True):
    """Give the encrypted keystore its passphrase (the TUI's prompt, `wallet unlock`).

    The first passphrase ever given creates the keystore file. A wrong one is refused with
    ``wrong_passphrase`` and changes nothing."""

    reply = KeystoreInfo
    passphrase: str

    def __repr__(self) -> str:
        return f"UnlockKeystore(passphrase={_HIDDEN})"

    def __rich_repr__(self) -> Any:
        yield "passphrase", _HIDDEN


class SetBlockfrostProjectId(Command, tag="wallet_blockfrost", frozen=True):
    """Keep the Blockfrost project id (an API key) in the keystore for preprod/mainnet."""

    reply = Done
    project_id: str

    def __repr__(self) -> str:
        return f"SetBlockfrostProjectId(project_id={_HIDDEN})"

    def __rich_repr__(self) -> Any:
        yield "project_id", _HIDDEN


EscrowState = Literal[
    "locking",  # consumer: lock tx built and kept, not yet accepted by the chain
    "locked",  # consumer: the chain holds the lock
    "verified",  # provider: the lock was found on the chain and matches the quote
    "receipt",  # both peers signed the job's receipt
    "claiming",  # provider: claim tx built and kept (resubmitted after a restart)
    "claimed",
    "refunding",  # consumer: refund tx built and kept
    "refunded",
    "paid_out",  # consumer: the provider claimed the lock
    "undecided",  # the oracle would not decide: the deadline refund is the way out
    "void",  # consumer: the lock never reached the chain; nothing was spent
]
ESCROW_OPEN_STATES = ("locking", "locked", "verified", "receipt", "claiming", "refunding")


class EscrowInfo(Record, frozen=True):
    job_id: str
    role: Literal["consumer", "provider"]
    state: EscrowState
    amount: int  # NTX base units
    deadline_ms: int
    consumer_pkh: str
    provider_pkh: str
    oracle_key: str
    lock_tx: str = ""
    claim_tx: str = ""  # the claim's or the refund's tx hash
    reward_type: Literal["", "withdraw", "refund", "distribute"] = ""
    outcome: str = ""  # the job's outcome as the receipt says
    error: str = ""  # the last problem (oracle down, tx refused...): retried or shown
    created_at: float = 0.0
    updated_at: float = 0.0
    # Issue 12, NTX base units: what the receipt charged for the machine time (None: no
    # receipt yet), and once settled what went to the provider and back to the consumer
    # (paid + refunded = amount); settle_tx: the one tx that spent the lock.
    metered_units: int | None = None
    paid_units: int | None = None
    refunded_units: int | None = None
    settle_tx: str = ""
    # Consumer, a refund asked on this node's word alone (its own receipt, issue 22): the job
    # never ran (its provider refused or released it) or its provider vanished mid-job; and
    # when the oracle said it can decide (POSIX s; 0: now, or not known).
    refund_alone: Literal["", "never_ran", "provider_vanished"] = ""
    decidable_at: float = 0.0

    def settled(self) -> tuple[int, int]:
        """(paid to the provider, refunded to the consumer) once settled; rows settled
        before issue 12 carry no split: all one way, by their state; (0, 0) while open."""
        if self.paid_units is not None and self.refunded_units is not None:
            return self.paid_units, self.refunded_units
        if self.state in ("claimed", "paid_out"):
            return self.amount, 0
        if self.state == "refunded":
            return 0, self.amount
        return 0, 0


class EscrowList(Record, frozen=True):
    escrows: tuple[EscrowInfo, ...] = ()
    # NTX base units: claimed as provider, paid out to providers as consumer, in open locks
    # (either side), refunded to this node as consumer.
    earned_units: int = 0
    spent_units: int = 0
    locked_units: int = 0
    refunded_units: int = 0


class RewardList(Command, tag="reward_list", frozen=True):
    reply = EscrowList


class RewardClaim(Command, tag="reward_claim", frozen=True):
    """Provider: ask the oracle for the withdraw signature and claim the job's escrow."""

    reply = EscrowInfo
    job_id: str


class RewardRefund(Command, tag="reward_refund", frozen=True):
    """Consumer: take the lock back (oracle refund signature, or after the deadline)."""

    reply = EscrowInfo
    job_id: str


class EscrowChanged(Event, tag="escrow_changed", frozen=True):
    escrow: EscrowInfo
