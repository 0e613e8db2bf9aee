"""Check a Cardano (Shelley) payment address before a provider onboards with it.

Rewards are paid to this address, so a typo costs real money: the address is checked
offline against its bech32 checksum, its prefix, the network id in its header byte and the
payload length of its type (CIP-19). The ``bech32`` package's decoder refuses strings over
BIP-173's 90 characters, and a Cardano base address is 103 (mainnet) or 108 (testnet), so the
checksum is verified here; only ``convertbits`` is borrowed.
"""

from __future__ import annotations

from typing import Literal

from bech32 import convertbits

from oracle_client.bech32 import CHARSET, hrp_expand, polymod

Network = Literal["testnet", "mainnet"]

PAYMENT_PREFIX: dict[Network, str] = {"testnet": "addr_test", "mainnet": "addr"}
_PREFIX_NETWORK: dict[str, Network] = {"addr_test": "testnet", "addr": "mainnet"}
_STAKE_PREFIXES = ("stake", "stake_test")
_NETWORK_ID: dict[Network, int] = {"testnet": 0, "mainnet": 1}

_BECH32_CONST = 1
_BECH32M_CONST = 0x2BC830A3
_CHECKSUM_LEN = 6
# Far above any real address; stops pathological input from costing anything.
_MAX_LENGTH = 200

_HASH_LEN = 28
# Shelley header types (high nibble): 0-3 base, 4-5 pointer, 6-7 enterprise.
_BASE_TYPES = range(0, 4)
_POINTER_TYPES = (4, 5)
_ENTERPRISE_TYPES = (6, 7)
_BASE_LEN = 1 + 2 * _HASH_LEN
_ENTERPRISE_LEN = 1 + _HASH_LEN
# A pointer holds three variable-length naturals of at least one byte each.
_POINTER_MIN_LEN = 1 + _HASH_LEN + 3

_TEST_MARKERS = ("test", "team")
_MAINNET_CHANNELS = frozenset({"nunet", "mainnet", "nunet-mainnet"})


def network_for_channel(channel: str) -> Network:
    """Which Cardano network a NuNet channel settles on.

    Rule: a channel whose name starts or ends with "test" or "team" ("nunet-test",
    "nunet-team", "testnet", "test-local") is testnet; "nunet", "mainnet" and any name
    ending in "-mainnet" are mainnet; everything else (local sandboxes, dev channels) is
    testnet, because a mistaken testnet guess costs nothing and a mainnet one costs ADA.
    """
    name = channel.strip().lower()
    if any(name.startswith(m) or name.endswith(m) for m in _TEST_MARKERS):
        return "testnet"
    if name in _MAINNET_CHANNELS or name.endswith("-mainnet"):
        return "mainnet"
    return "testnet"


def check_address(address: str, network: Network, *, channel: str | None = None) -> str | None:
    """None when ``address`` is a well-formed Shelley payment address on ``network``,
    otherwise one sentence that says what is wrong and what to use instead.

    ``channel`` only makes the network-mismatch message name the channel.
    """
    want = PAYMENT_PREFIX[network]
    if not address:
        return f"address is required: paste your {want}1… payment address"
    if address != address.strip() or any(c.isspace() for c in address):
        return "address contains spaces or line breaks: paste it as one word"
    if len(address) > _MAX_LENGTH:
        return f"address is {len(address)} characters long; a Cardano address is at most ~110"
    if any(not 33 <= ord(c) <= 126 for c in address):
        return "address contains characters that never appear in a Cardano address"
    if address.startswith(("Ae2", "DdzFF")):
        # Base58 Byron addresses mix cases by design; name them before the case check.
        return f"this is a Byron-era (legacy) address; use a Shelley {want}1… address"
    if address.lower() != address and address.upper() != address:
        return "address mixes upper- and lower-case letters: copy it again exactly"
    text = address.lower()
    hrp, sep, data = text.rpartition("1")
    if not sep or not hrp:
        return f"not a Cardano address: it should start with {want}1"
    if hrp in _STAKE_PREFIXES:
        return f"this is a stake (reward account) address; use a payment address ({want}1…)"
    if hrp not in _PREFIX_NETWORK:
        return f"not a Cardano payment address (prefix {hrp!r}): it should start with {want}1"
    if len(data) < _CHECKSUM_LEN + 1:
        return "address is too short: it looks cut off, copy it again"
    if any(c not in CHARSET for c in data):
        bad = next(c for c in data if c not in CHARSET)
        return f"address contains {bad!r}, which bech32 never uses (no 1, b, i or o after '1')"
    values = [CHARSET.index(c) for c in data]
    residue = polymod(hrp_expand(hrp) + values)
    if residue == _BECH32M_CONST:
        return "address has a bech32m checksum; Cardano addresses use bech32"
    if residue != _BECH32_CONST:
        return "address checksum does not match: a character is mistyped, missing or extra"
    payload_words = convertbits(values[:-_CHECKSUM_LEN], 5, 8, False)
    if not payload_words:
        return "address payload is malformed (bad padding): copy it again"
    problem = _check_payload(bytes(payload_words))
    if problem is not None:
        return problem
    return _check_network(hrp, payload_words[0] & 0x0F, network, channel)


def encode_address(hrp: str, payload: bytes) -> str:
    """Bech32-encode ``payload`` under ``hrp`` without BIP-173's length limit (CIP-19)."""
    words = convertbits(payload, 8, 5, True)
    if words is None:  # pragma: no cover - padding always succeeds when pad=True
        raise ValueError("cannot convert payload to 5-bit groups")
    residue = polymod([*hrp_expand(hrp), *words, 0, 0, 0, 0, 0, 0]) ^ _BECH32_CONST
    checksum = [(residue >> 5 * (5 - i)) & 31 for i in range(_CHECKSUM_LEN)]
    return hrp + "1" + "".join(CHARSET[w] for w in [*words, *checksum])


def _check_payload(payload: bytes) -> str | None:
    kind = payload[0] >> 4
    size = len(payload)
    if kind in (14, 15):
        return "this is a stake (reward account) address; use a payment address"
    if kind == 8:
        return "this is a Byron-era (bootstrap) address; use a Shelley payment address"
    if kind in _BASE_TYPES:
        if size != _BASE_LEN:
            return _length_problem("base", size, _BASE_LEN)
    elif kind in _ENTERPRISE_TYPES:
        if size != _ENTERPRISE_LEN:
            return _length_problem("enterprise", size, _ENTERPRISE_LEN)
    elif kind in _POINTER_TYPES:
        if size < _POINTER_MIN_LEN or not _is_pointer(payload[1 + _HASH_LEN :]):
            return "pointer address is malformed (its slot/tx/cert pointer is cut off)"
    else:
        return f"address header type {kind} is not a Shelley payment address type (0-7)"
    return None


def _check_network(hrp: str, network_id: int, network: Network, channel: str | None) -> str | None:
    prefix_net = _PREFIX_NETWORK[hrp]
    if network_id not in _NETWORK_ID.values():
        return f"address header names network id {network_id}, neither testnet (0) nor mainnet (1)"
    if network_id != _NETWORK_ID[prefix_net]:
        header_net = "mainnet" if network_id == 1 else "testnet"
        return (
            f"address prefix {hrp} says {prefix_net} but its header says {header_net}: "
            "it is corrupted or forged"
        )
    if prefix_net != network:
        kind = "test" if network == "testnet" else "mainnet"
        where = (
            f"channel {channel} is a {kind} channel"
            if channel
            else f"a {network} address is needed"
        )
        wanted = PAYMENT_PREFIX[network]
        return f"this is a {prefix_net} address; {where}, use an {wanted}1… address"
    return None


def _length_problem(kind: str, size: int, expected: int) -> str:
    how = "cut off" if size < expected else "too long"
    return f"{kind} address payload is {size} bytes, expected {expected}: it is {how}"


def _is_pointer(rest: bytes) -> bool:
    """Exactly three variable-length naturals (7 bits a byte, high bit = more follows)."""
    count = 0
    continued = False
    for byte in rest:
        continued = bool(byte & 0x80)
        if not continued:
            count += 1
    return count == 3 and not continued
