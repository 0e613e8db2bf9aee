"""A CIP-1852 Cardano wallet from a BIP-39 mnemonic.

Keys: ``m/1852'/1815'/0'/0/0`` (payment) and ``m/1852'/1815'/0'/2/0`` (stake), the first
account's first address, as Daedalus, Yoroi and Eternl derive them (Icarus master key), so a
wallet made here opens in any of them and the other way round. The address is a base address
(payment + stake key hashes) on the network the node's channel settles on.

pycardano is imported only where keys are derived: it costs ~2 s, and ``wallet show`` and the
mnemonic checks need none of it.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from engine.errors import EngineError
from oracle_client.cardano.address import NETWORK_ID, PAYMENT_PREFIX, Network, encode_address

if TYPE_CHECKING:
    from pycardano import PaymentExtendedSigningKey

PAYMENT_PATH = "m/1852'/1815'/0'/0/0"
STAKE_PATH = "m/1852'/1815'/0'/2/0"
NEW_WALLET_WORDS = 24
WORD_COUNTS = (12, 15, 18, 21, 24)  # every BIP-39 length (Yoroi uses 15, Daedalus 24)
# "1." "12)" "3:" : the numbering of a mnemonic pasted from a list.
_NUMBERING = re.compile(r"^\d+[.):]?$")


def _wordlist() -> list[str]:
    from mnemonic import Mnemonic

    return list(Mnemonic("english").wordlist)


def generate_mnemonic() -> str:
    """24 fresh words (256 bits from the OS's CSPRNG, ``secrets``)."""
    from mnemonic import Mnemonic

    return str(Mnemonic("english").generate(strength=256))


def normalize_mnemonic(text: str) -> str:
    """One space between lower-case words; list numbering and commas dropped."""
    words = unicodedata.normalize("NFKD", text).lower().replace(",", " ").split()
    return " ".join(word for word in words if not _NUMBERING.match(word))


def validate_mnemonic(text: str) -> str:
    """The normalized mnemonic, or an EngineError that says what is wrong.

    Messages name word positions, never the words: they may end up in a log or a terminal
    scrollback, and a mistyped word is most of a secret word."""
    from mnemonic import Mnemonic

    mnemonic = normalize_mnemonic(text)
    words = mnemonic.split()
    if not words:
        raise EngineError("invalid_mnemonic", "the mnemonic is empty: type its words in order")
    if len(words) not in WORD_COUNTS:
        raise EngineError(
            "invalid_mnemonic",
            f"the mnemonic has {len(words)} words; a wallet mnemonic has 24 "
            "(or 12, 15, 18 or 21): check for a missing or doubled word",
        )
    known = set(_wordlist())
    unknown = [str(i) for i, word in enumerate(words, 1) if word not in known]
    if unknown:
        which = f"word {unknown[0]} is" if len(unknown) == 1 else f"words {', '.join(unknown)} are"
        raise EngineError(
            "invalid_mnemonic",
            f"{which} not in the BIP-39 English word list: check the spelling "
            "(only English mnemonics are supported)",
        )
    if not Mnemonic("english").check(mnemonic):
        raise EngineError(
            "invalid_mnemonic",
            "the mnemonic's checksum does not match: every word is valid, so one is wrong "
            "or two are swapped; compare it with the copy you wrote down",
        )
    return mnemonic


@dataclass(frozen=True)
class WalletKeys:
    """What a mnemonic derives to. The signing key never leaves the engine; repr hides it."""

    payment_key_hash: str  # hex, 28 bytes
    stake_key_hash: str
    payment_signing_key: PaymentExtendedSigningKey = field(repr=False)

    def address(self, network: Network) -> str:
        return base_address(self.payment_key_hash, self.stake_key_hash, network)


def derive_keys(mnemonic: str) -> WalletKeys:
    """CIP-1852 payment and stake keys of account 0, address 0 (``mnemonic`` already valid)."""
    from pycardano import HDWallet, PaymentExtendedSigningKey, StakeExtendedSigningKey

    try:
        root = HDWallet.from_mnemonic(mnemonic)
    except Exception:
        # Never chain: the underlying message may quote the words.
        raise EngineError(
            "invalid_mnemonic", "the mnemonic could not be turned into keys"
        ) from None
    payment = PaymentExtendedSigningKey.from_hdwallet(root.derive_from_path(PAYMENT_PATH))
    stake = StakeExtendedSigningKey.from_hdwallet(root.derive_from_path(STAKE_PATH))
    return WalletKeys(
        payment_key_hash=payment.to_verification_key().hash().payload.hex(),
        stake_key_hash=stake.to_verification_key().hash().payload.hex(),
        payment_signing_key=payment,
    )


def base_address(payment_key_hash: str, stake_key_hash: str, network: Network) -> str:
    """CIP-19 base address (header type 0: key payment, key stake) without pycardano."""
    header = bytes([NETWORK_ID[network]])  # type 0 in the high nibble, network id low
    payload = header + bytes.fromhex(payment_key_hash) + bytes.fromhex(stake_key_hash)
    return encode_address(PAYMENT_PREFIX[network], payload)
