"""The committed, compiled escrow script (build/escrow.json, written by scripts/build_contract.py).

Everything that locks, claims, refunds or evaluates uses this artifact, never a fresh
compilation: the script hash is the escrow address, and compilers change hashes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from pycardano import Address, Network, PlutusV3Script, ScriptHash, plutus_script_hash

ARTIFACT_PATH = Path(__file__).resolve().parent / "build" / "escrow.json"


@dataclass(frozen=True)
class EscrowArtifact:
    cbor_hex: str
    script_hash: str
    testnet_address: str
    mainnet_address: str
    opshin_version: str
    # Each source the script was built from (the OpShin validator, the split's UPLC): sha256.
    sources: dict[str, str]
    size_bytes: int


@cache
def load_artifact(path: Path = ARTIFACT_PATH) -> EscrowArtifact:
    """Read the artifact and check that its recorded hash is the hash of its script."""
    raw = json.loads(path.read_text(encoding="utf-8"))
    artifact = EscrowArtifact(
        cbor_hex=raw["cbor_hex"],
        script_hash=raw["script_hash"],
        testnet_address=raw["testnet_address"],
        mainnet_address=raw["mainnet_address"],
        opshin_version=raw["opshin_version"],
        sources=dict(raw["sources"]),
        size_bytes=raw["size_bytes"],
    )
    actual = plutus_script_hash(PlutusV3Script(bytes.fromhex(artifact.cbor_hex))).payload.hex()
    if actual != artifact.script_hash:
        raise ValueError(f"{path}: script hashes to {actual}, artifact says {artifact.script_hash}")
    return artifact


def escrow_script() -> PlutusV3Script:
    """The compiled validator, as a witness or reference script."""
    return PlutusV3Script(bytes.fromhex(load_artifact().cbor_hex))


def escrow_script_hash() -> ScriptHash:
    return ScriptHash(bytes.fromhex(load_artifact().script_hash))


def escrow_address(network: Network) -> Address:
    """The script's enterprise address (no stake part) on `network`."""
    return Address(escrow_script_hash(), network=network)
