"""Build the escrow script and write the committed artifact.

    .venv/bin/python scripts/build_contract.py          # rewrites contract/build/escrow.json
    .venv/bin/python scripts/build_contract.py --out X  # writes X instead (the test compares)

Two parts: the OpShin validator (Claim, Refund), compiled with the opshin CLI, and the split
(Distribute), written as UPLC in distribute_uplc.py; `with_distribute` wraps the first in the
second and the result is flattened again with uplc. The CLI, not opshin's Python API: the
CLI tags the script with its version before flattening, so only the CLI reproduces the hash
of what we ship (PLATFORM-NOTES). Both steps are deterministic: the same sources, opshin and
uplc give the same bytes.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from pycardano import Address, Network, PlutusV3Script, plutus_script_hash

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from uplc.tools import flatten, unflatten  # noqa: E402

from oracle_client.escrow.contract.distribute_uplc import with_distribute  # noqa: E402

CONTRACT = REPO / "oracle_client" / "escrow" / "contract"
SOURCE = CONTRACT / "escrow_validator.py"
# The split's UPLC: part of the script, so part of what the artifact records it was built from.
DISTRIBUTE_SOURCE = CONTRACT / "distribute_uplc.py"
ARTIFACT = REPO / "oracle_client" / "escrow" / "contract" / "build" / "escrow.json"
# -O3 is ~0.5 % of a tx's memory budget cheaper on a split than the default -O1
# (bench/escrow_costs.py); it also strips traces, which the tests and the off-chain errors read
# ("consumer underpaid"), so they are kept. Its reordering within a block only changes which of
# two failing asserts names the failure.
OPSHIN_FLAGS = ("-O3", "-fno-remove-trace")


def opshin_version() -> str:
    from importlib.metadata import version

    return version("opshin")


def compile_validator(source: Path = SOURCE) -> dict[str, Any]:
    """Run `opshin build` on `source`, wrap it in the split's UPLC and describe the result
    as the artifact dict."""
    with tempfile.TemporaryDirectory(prefix="escrow-build-") as tmp:
        result = subprocess.run(
            [sys.executable, "-m", "opshin", "build", str(source), "-o", tmp, *OPSHIN_FLAGS],
            capture_output=True,
            text=True,
            cwd=tmp,
        )
        if result.returncode != 0:
            raise RuntimeError(f"opshin build failed:\n{result.stdout}\n{result.stderr}")
        opshin_cbor = bytes.fromhex((Path(tmp) / "script.cbor").read_text().strip())
    # uplc's decoder and encoder recurse once per nested term (OpShin's ~900 deep).
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 20_000))
    script_bytes = flatten(with_distribute(unflatten(opshin_cbor)))
    cbor_hex = script_bytes.hex()
    script = PlutusV3Script(script_bytes)
    script_hash = plutus_script_hash(script)
    return {
        "title": "nunet NTX escrow",
        "plutus_version": 3,
        "opshin_version": opshin_version(),
        "opshin_flags": list(OPSHIN_FLAGS),
        "sources": {
            _shown(path): hashlib.sha256(path.read_bytes()).hexdigest()
            for path in (source, DISTRIBUTE_SOURCE)
        },
        "cbor_hex": cbor_hex,
        "size_bytes": len(script),
        "script_hash": script_hash.payload.hex(),
        "testnet_address": str(Address(script_hash, network=Network.TESTNET)),
        "mainnet_address": str(Address(script_hash, network=Network.MAINNET)),
    }


def _shown(path: Path) -> str:
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ARTIFACT, help="artifact path to write")
    parser.add_argument("--source", type=Path, default=SOURCE, help="OpShin validator source")
    args = parser.parse_args(argv)
    artifact = compile_validator(args.source.resolve())
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(artifact, indent=2) + "\n", encoding="utf-8")
    print(f"{args.out}: {artifact['size_bytes']} bytes, hash {artifact['script_hash']}")
    print(f"  testnet {artifact['testnet_address']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
