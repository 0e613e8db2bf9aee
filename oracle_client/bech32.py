"""Bech32 (BIP-173) checksum arithmetic without the 90-character limit.

The ``bech32`` package refuses strings over 90 characters and a Cardano address is 103-108,
so the two address readers (``oracle_client.cardano.address`` for the escrow's parties,
``engine.cardano_address`` for onboarding's messages) share these two functions instead.
"""

from __future__ import annotations

CHARSET = "qpzry9x8gf2tvdw0s3jn54khce6mua7l"
_GENERATOR = (0x3B6A57B2, 0x26508E6D, 0x1EA119FA, 0x3D4233DD, 0x2A1462B3)


def hrp_expand(hrp: str) -> list[int]:
    return [ord(c) >> 5 for c in hrp] + [0] + [ord(c) & 31 for c in hrp]


def polymod(values: list[int]) -> int:
    checksum = 1
    for value in values:
        top = checksum >> 25
        checksum = (checksum & 0x1FFFFFF) << 5 ^ value
        for i, gen in enumerate(_GENERATOR):
            if (top >> i) & 1:
                checksum ^= gen
    return checksum
