"""Constrained field types shared by the oracle's wire models and the job receipt.

Every size is bounded here, once, so a peer or a client can never make the oracle store or sign
something unbounded, and so the Python types and the on-chain datum agree on lengths.
"""

from __future__ import annotations

from typing import Annotated, Literal

from msgspec import Meta

# The datum stores the job id as UTF-8 bytes; engine job ids are 12 hex digits, but other
# clients may use UUIDs or prefixed ids: a safe ASCII set, at most 63 bytes (the contract's
# JOB_ID_MAX_BYTES: longer byte strings are chunked differently by Plutus evaluators).
JobId = Annotated[str, Meta(min_length=1, max_length=63, pattern=r"^[A-Za-z0-9._:-]+$")]
# A payment key hash (blake2b-224) as lowercase hex.
KeyHashHex = Annotated[str, Meta(min_length=56, max_length=56, pattern=r"^[0-9a-f]{56}$")]
# An Ed25519 public key (32 bytes) and signature (64 bytes) as lowercase hex.
PublicKeyHex = Annotated[str, Meta(min_length=64, max_length=64, pattern=r"^[0-9a-f]{64}$")]
SignatureHex = Annotated[str, Meta(min_length=128, max_length=128, pattern=r"^[0-9a-f]{128}$")]
# A signature slot that may still be empty (a receipt signed by one peer so far).
MaybeSignatureHex = Annotated[str, Meta(max_length=128, pattern=r"^([0-9a-f]{128})?$")]
TxHashHex = Annotated[str, Meta(min_length=64, max_length=64, pattern=r"^[0-9a-f]{64}$")]
UtxoRef = Annotated[str, Meta(max_length=70, pattern=r"^[0-9a-f]{64}#[0-9]{1,5}$")]
# The messages the oracle signs are small CBOR/byte strings; 1 KiB of hex is plenty.
MessageHex = Annotated[str, Meta(min_length=2, max_length=2048, pattern=r"^([0-9a-f]{2})+$")]
# libp2p peer ids in base58btc; an Ed25519 one is 52 characters ("12D3KooW...").
PeerIdText = Annotated[
    str,
    Meta(
        min_length=40,
        max_length=64,
        pattern=r"^[123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz]+$",
    ),
]
# Bech32 Shelley addresses are 58-108 characters; models check the checksum and network.
AddressText = Annotated[str, Meta(min_length=10, max_length=120)]
# NTX base units (6 decimals). The upper bound is NTX's total supply in base units, so no
# quote, datum or receipt can ever name an amount that cannot exist.
Amount = Annotated[int, Meta(ge=1, le=1_000_000_000 * 1_000_000)]
# The same bound, but 0 allowed: a price, a minimum charge, or one party's share of a split.
Units = Annotated[int, Meta(ge=0, le=1_000_000_000 * 1_000_000)]
# POSIX milliseconds, as in the datum's deadline; bounded to years 2001..2286.
PosixMs = Annotated[int, Meta(ge=1_000_000_000_000, le=9_999_999_999_999)]
Seconds = Annotated[float, Meta(ge=0.0, le=10_000_000.0)]
MemoryMb = Annotated[float, Meta(ge=0.0, le=100_000_000.0)]
Reason = Annotated[str, Meta(max_length=1000)]

Network = Literal["testnet", "mainnet"]
# withdraw: everything to the provider (the older Claim path, no longer signed by the oracle);
# refund: everything back to the consumer; distribute: the receipt's charge to the provider
# and the rest of the lock back to the consumer, in one tx (issue 12).
RewardType = Literal["withdraw", "refund", "distribute"]
# A short label (a resource spec's name).
ShortText = Annotated[str, Meta(max_length=64)]
