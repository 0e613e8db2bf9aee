"""``EscrowRecord``: the store's escrow row, shared by the escrow flow and its settling."""

from __future__ import annotations

import msgspec

from engine import api


class EscrowRecord(msgspec.Struct, kw_only=True):
    """The store's escrow row: what the API shows, plus the evidence kept for settling."""

    info: api.EscrowInfo
    consumer_peer: str
    provider_peer: str
    quote: str = ""  # the oracle's signed ServiceQuote, JSON
    receipt: str = ""  # the job receipt, JSON, with the signatures gathered so far
    grant: str = ""  # the oracle's RewardGrant, JSON
    tx_cbor: str = ""  # the claim or refund tx kept before submitting (hex)
