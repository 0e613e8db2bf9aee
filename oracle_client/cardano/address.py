"""Shelley payment addresses (CIP-19): the one reader, and the encoder beside it.

``read_address`` checks an address offline against its bech32 checksum, its prefix, the
network id in its header byte and the payload length of its type, and says what is wrong in
one sentence (``AddressError``). Its callers:

- onboarding and the wallet (``check_address``): rewards are paid to the address a provider
  pastes, so a typo costs real money and the sentence must say what to use instead;
- the oracle's models and service (``parse_payment_address``): the escrow datum names parties
  by payment key hash, so both sides must agree on which hash an address holds, and a script
  address (no key to sign the claim) is refused.

No pycardano (~2 s to import): the CLI and the client models must start fast. The ``bech32``
package refuses strings over BIP-173's 90 characters and a Cardano base address is 103
(mainnet) or 108 (testnet), so the checksum is computed here; only ``convertbits`` is borrowed.
"""

from __future__ import annotations

from dataclasses import dataclass

from bech32 import convertbits

from oracle_client.fields import Network

PAYMENT_PREFIX: dict[Network, str] = {"testnet": "addr_test", "mainnet": "addr"}
NETWORK_ID: dict[Network, int] = {"testnet": 0, "mainnet": 1}
_PREFIX_NETWORK: dict[str, Network] = {"addr_test": "testnet", "addr": "mainnet"}
_STAKE_PREFIXES = ("stake", "stake_test")

CHARSET = "qpzry9x8gf2tvdw0s3jn54khce6mua7l"
_GENERATOR = (0x3B6A57B2, 0x26508E6D, 0x1EA119FA, 0x3D4233DD, 0x2A1462B3)
_BECH32_CONST = 1
_BECH32M_CONST = 0x2BC830A3
_CHECKSUM_LEN = 6
# Far above any real address; stops pathological input from costing anything.
_MAX_LENGTH = 200

HASH_LEN = 28
# Shelley header types (high nibble): 0-3 base, 4-5 pointer, 6-7 enterprise; an odd type's
# payment part is a script hash.
_BASE_TYPES = range(0, 4)
_POINTER_TYPES = (4, 5)
_ENTERPRISE_TYPES = (6, 7)
_BASE_LEN = 1 + 2 * HASH_LEN
_ENTERPRISE_LEN = 1 + HASH_LEN
# A pointer holds three variable-length naturals of at least one byte each.
_POINTER_MIN_LEN = 1 + HASH_LEN + 3

_TEST_MARKERS = ("test", "team")
_MAINNET_CHANNELS = frozenset({"nunet", "mainnet", "nunet-mainnet"})


class AddressError(ValueError):
    """The text is not a Shelley payment address usable here; the message says why."""


@dataclass(frozen=True)
class ShelleyAddress:
    """A well-formed Shelley payment address, as read."""

    text: str
    network: Network
    header_type: int  # 0-7, the header byte's high nibble
    payload: bytes  # header byte, payment part, then the stake part or pointer

    @property
    def pays_a_script(self) -> bool:
        return bool(self.header_type & 1)

    @property
    def payment_hash(self) -> bytes:
        return self.payload[1 : 1 + HASH_LEN]


@dataclass(frozen=True)
class PaymentAddress:
    text: str
    network: Network
    payment_key_hash: bytes


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
    try:
        read_address(address, network, channel=channel)
    except AddressError as exc:
        return str(exc)
    return None


def parse_payment_address(text: str, network: Network | None = None) -> PaymentAddress:
    """The payment key hash an escrow party is named by; when ``network`` is given, the
    address must be on it.

    Only lowercase (canonical) addresses whose payment part is a key hash are accepted: the
    escrow pays a party by the key hash that must sign the claim, and a script address has none.
    """
    address = read_address(text, network)
    if text.lower() != text:
        raise AddressError("address must be lowercase bech32")
    if address.pays_a_script:
        raise AddressError("address pays a script, not a key: the escrow needs a key hash")
    return PaymentAddress(text, address.network, address.payment_hash)


def read_address(
    address: str, network: Network | None = None, *, channel: str | None = None
) -> ShelleyAddress:
    """Decode a Shelley payment address; ``AddressError`` says in one sentence what is wrong.

    When ``network`` is given the address must be on it, and the messages name its prefix.
    """
    want = f"{PAYMENT_PREFIX[network]}1" if network else "addr1 or addr_test1"
    if not address:
        raise AddressError(f"address is required: paste your {want}… payment address")
    if address != address.strip() or any(c.isspace() for c in address):
        raise AddressError("address contains spaces or line breaks: paste it as one word")
    if len(address) > _MAX_LENGTH:
        raise AddressError(
            f"address is {len(address)} characters long; a Cardano address is at most ~110"
        )
    if any(not 33 <= ord(c) <= 126 for c in address):
        raise AddressError("address contains characters that never appear in a Cardano address")
    if address.startswith(("Ae2", "DdzFF")):
        # Base58 Byron addresses mix cases by design; name them before the case check.
        raise AddressError(f"this is a Byron-era (legacy) address; use a Shelley {want}… address")
    if address.lower() != address and address.upper() != address:
        raise AddressError("address mixes upper- and lower-case letters: copy it again exactly")
    text = address.lower()
    hrp, sep, data = text.rpartition("1")
    if not sep or not hrp:
        raise AddressError(f"not a Cardano address: it should start with {want}")
    if hrp in _STAKE_PREFIXES:
        raise AddressError(
            f"this is a stake (reward account) address; use a payment address ({want}…)"
        )
    if hrp not in _PREFIX_NETWORK:
        raise AddressError(
            f"not a Cardano payment address (prefix {hrp!r}): it should start with {want}"
        )
    if len(data) < _CHECKSUM_LEN + 1:
        raise AddressError("address is too short: it looks cut off, copy it again")
    if any(c not in CHARSET for c in data):
        bad = next(c for c in data if c not in CHARSET)
        raise AddressError(
            f"address contains {bad!r}, which bech32 never uses (no 1, b, i or o after '1')"
        )
    values = [CHARSET.index(c) for c in data]
    residue = _polymod(_hrp_expand(hrp) + values)
    if residue == _BECH32M_CONST:
        raise AddressError("address has a bech32m checksum; Cardano addresses use bech32")
    if residue != _BECH32_CONST:
        raise AddressError(
            "address checksum does not match: a character is mistyped, missing or extra"
        )
    payload_words = convertbits(values[:-_CHECKSUM_LEN], 5, 8, False)
    if not payload_words:
        raise AddressError("address payload is malformed (bad padding): copy it again")
    payload = bytes(payload_words)
    _check_payload(payload)
    prefix_network = _check_network(hrp, payload[0] & 0x0F, network, channel)
    return ShelleyAddress(address, prefix_network, payload[0] >> 4, payload)


def encode_address(hrp: str, payload: bytes) -> str:
    """Bech32-encode ``payload`` under ``hrp`` without BIP-173's length limit (CIP-19)."""
    words = convertbits(payload, 8, 5, True)
    if words is None:  # pragma: no cover - padding always succeeds when pad=True
        raise ValueError("cannot convert payload to 5-bit groups")
    residue = _polymod([*_hrp_expand(hrp), *words, 0, 0, 0, 0, 0, 0]) ^ _BECH32_CONST
    checksum = [(residue >> 5 * (5 - i)) & 31 for i in range(_CHECKSUM_LEN)]
    return hrp + "1" + "".join(CHARSET[w] for w in [*words, *checksum])


def _hrp_expand(hrp: str) -> list[int]:
    return [ord(c) >> 5 for c in hrp] + [0] + [ord(c) & 31 for c in hrp]


def _polymod(values: list[int]) -> int:
    checksum = 1
    for value in values:
        top = checksum >> 25
        checksum = (checksum & 0x1FFFFFF) << 5 ^ value
        for i, gen in enumerate(_GENERATOR):
            if (top >> i) & 1:
                checksum ^= gen
    return checksum


def _check_payload(payload: bytes) -> None:
    kind = payload[0] >> 4
    size = len(payload)
    if kind in (14, 15):
        raise AddressError("this is a stake (reward account) address; use a payment address")
    if kind == 8:
        raise AddressError("this is a Byron-era (bootstrap) address; use a Shelley payment address")
    if kind in _BASE_TYPES:
        if size != _BASE_LEN:
            raise AddressError(_length_problem("base", size, _BASE_LEN))
    elif kind in _ENTERPRISE_TYPES:
        if size != _ENTERPRISE_LEN:
            raise AddressError(_length_problem("enterprise", size, _ENTERPRISE_LEN))
    elif kind in _POINTER_TYPES:
        if size < _POINTER_MIN_LEN or not _is_pointer(payload[1 + HASH_LEN :]):
            raise AddressError("pointer address is malformed (its slot/tx/cert pointer is cut off)")
    else:
        raise AddressError(
            f"address header type {kind} is not a Shelley payment address type (0-7)"
        )


def _check_network(
    hrp: str, network_id: int, network: Network | None, channel: str | None
) -> Network:
    prefix_net = _PREFIX_NETWORK[hrp]
    if network_id not in NETWORK_ID.values():
        raise AddressError(
            f"address header names network id {network_id}, neither testnet (0) nor mainnet (1)"
        )
    if network_id != NETWORK_ID[prefix_net]:
        header_net = "mainnet" if network_id == 1 else "testnet"
        raise AddressError(
            f"address prefix {hrp} says {prefix_net} but its header says {header_net}: "
            "it is corrupted or forged"
        )
    if network is not None and prefix_net != network:
        kind = "test" if network == "testnet" else "mainnet"
        where = (
            f"channel {channel} is a {kind} channel"
            if channel
            else f"a {network} address is needed"
        )
        wanted = PAYMENT_PREFIX[network]
        raise AddressError(f"this is a {prefix_net} address; {where}, use an {wanted}1… address")
    return prefix_net


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
