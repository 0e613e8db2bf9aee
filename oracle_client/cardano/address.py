"""Read a Shelley payment address: its network and its payment key hash (CIP-19).

The escrow datum names parties by payment key hash, and the oracle's requests carry bech32
addresses, so both sides must agree on which hash an address holds. This is done offline
without pycardano, whose import costs ~2 s, because the client models are used by commands
that must start fast. The ``bech32`` package refuses strings over 90 characters (BIP-173) and
Cardano addresses are longer, so the checksum is verified here.
"""

from __future__ import annotations

from dataclasses import dataclass

from oracle_client.bech32 import CHARSET, hrp_expand, polymod
from oracle_client.fields import Network

_PREFIXES: dict[str, Network] = {"addr": "mainnet", "addr_test": "testnet"}
_NETWORK_IDS: dict[Network, int] = {"testnet": 0, "mainnet": 1}
_HASH_LEN = 28
_MAX_LEN = 120


class AddressError(ValueError):
    """The text is not a Shelley payment address usable in an escrow datum."""


@dataclass(frozen=True)
class PaymentAddress:
    text: str
    network: Network
    payment_key_hash: bytes


def parse_payment_address(text: str, network: Network | None = None) -> PaymentAddress:
    """Decode ``text``; when ``network`` is given, the address must be on it.

    Only addresses whose payment part is a key hash are accepted: the escrow pays a party by
    the key hash that must sign the claim, and a script address has none.
    """
    if len(text) > _MAX_LEN:
        raise AddressError(f"address is {len(text)} characters; a Cardano address is at most ~110")
    if text.lower() != text:
        raise AddressError("address must be lowercase bech32")
    hrp, sep, data = text.rpartition("1")
    if not sep or hrp not in _PREFIXES:
        raise AddressError("not a Cardano payment address: it must start with addr1 or addr_test1")
    if len(data) < 7 or any(c not in CHARSET for c in data):
        raise AddressError("address contains characters bech32 never uses, or is cut off")
    values = [CHARSET.index(c) for c in data]
    if polymod(hrp_expand(hrp) + values) != 1:
        raise AddressError("address checksum does not match: a character is mistyped")
    payload = _from_words(values[:-6])
    if payload is None or not payload:
        raise AddressError("address payload is malformed")
    header = payload[0]
    kind, network_id = header >> 4, header & 0x0F
    if kind > 7:
        raise AddressError("not a Shelley payment address (stake or Byron address)")
    if kind & 1:
        raise AddressError("address pays a script, not a key: the escrow needs a key hash")
    prefix_network = _PREFIXES[hrp]
    if network_id != _NETWORK_IDS[prefix_network]:
        raise AddressError(f"address prefix says {prefix_network} but its header disagrees")
    if kind in (0, 2) and len(payload) != 1 + 2 * _HASH_LEN:
        raise AddressError("base address payload has the wrong length")
    if kind == 6 and len(payload) != 1 + _HASH_LEN:
        raise AddressError("enterprise address payload has the wrong length")
    if kind == 4 and len(payload) < 1 + _HASH_LEN + 3:
        raise AddressError("pointer address payload is cut off")
    if network is not None and prefix_network != network:
        raise AddressError(f"address is on {prefix_network}, expected a {network} address")
    return PaymentAddress(text, prefix_network, bytes(payload[1 : 1 + _HASH_LEN]))


def _from_words(words: list[int]) -> bytes | None:
    """5-bit groups to bytes; None when the padding is not zero bits (malleated input)."""
    acc = bits = 0
    out = bytearray()
    for word in words:
        acc = (acc << 5) | word
        bits += 5
        if bits >= 8:
            bits -= 8
            out.append((acc >> bits) & 0xFF)
    if bits >= 5 or acc & ((1 << bits) - 1):
        return None
    return bytes(out)
