"""Submit latency of the local ledger: a plain payment and an escrow split (distribute).

    .venv/bin/python bench/ledger_submit.py [--n 20]

Starts `nunet-ledger serve` as its own process (as the demo does) and talks to it through
pycardano's BlockFrostChainContext. Only `submit_tx` is timed (HTTP, decoding, every check,
the script run for a split, the SQLite commit); building and signing are reported apart,
since the split's build includes the ledger's evaluation round trip. Each split pays the
provider 40 % of its lock and the consumer the rest, in one tx, as the settle loop does.
"""

from __future__ import annotations

import argparse
import json
import logging
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from nacl.signing import SigningKey
from pycardano import (
    Address,
    BlockFrostChainContext,
    Network,
    PaymentSigningKey,
    TransactionBuilder,
    TransactionOutput,
    Value,
)

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import PYTHON, REPO, summary
from oracle_client.escrow import transactions as T
from oracle_client.escrow.contract import EscrowDatum, distribute_message, staking_of

logging.getLogger("PyCardano").setLevel(logging.ERROR)


def wallet() -> tuple[PaymentSigningKey, Address]:
    sk = PaymentSigningKey.generate()
    return sk, Address(sk.to_verification_key().hash(), network=Network.TESTNET)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=20)
    n = parser.parse_args().n
    db = Path(tempfile.mkdtemp(prefix="nunet-ledger-bench-")) / "ledger.db"
    argv = ["serve", "--db", str(db), "--port", "0", "--dev"]
    server = subprocess.Popen(
        [PYTHON, "-m", "oracle_client.ledger.cli", *argv],
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    try:
        assert server.stdout is not None
        ready = json.loads(server.stdout.readline())
        url, unit = ready["url"], ready["ntx_unit"]
        ctx = BlockFrostChainContext("bench", base_url=url)

        def faucet(address: Address, ada: int, ntx: int = 0) -> None:
            body = {"address": str(address), "ada": ada, "ntx": ntx}
            httpx.post(f"{url}/v0/ledger/faucet", json=body).raise_for_status()

        consumer_sk, consumer = wallet()
        provider_sk, provider = wallet()
        oracle = SigningKey.generate()
        faucet(consumer, 10_000, 10_000)
        faucet(provider, 1_000)

        pay_build, pay_submit = [], []
        for _ in range(n):
            _, dst = wallet()
            t0 = time.perf_counter()
            builder = TransactionBuilder(ctx)
            builder.add_input_address(consumer)
            builder.add_output(TransactionOutput(dst, Value(2_000_000)))
            tx = builder.build_and_sign([consumer_sk], change_address=consumer)
            t1 = time.perf_counter()
            ctx.submit_tx(tx)
            t2 = time.perf_counter()
            pay_build.append((t1 - t0) * 1000)
            pay_submit.append((t2 - t1) * 1000)

        claim_build, claim_submit, lock_submit = [], [], []
        for i in range(n):
            job = f"bench-{i}"
            datum = EscrowDatum(
                consumer=consumer.payment_part.payload,
                consumer_stake=staking_of(consumer),
                provider=provider.payment_part.payload,
                oracle_key=bytes(oracle.verify_key),
                job_id=job.encode(),
                amount=1_000_000,
                deadline=int(time.time() * 1000) + 3_600_000,
            )
            tx = T.lock(ctx, signing_key=consumer_sk, address=consumer, datum=datum, ntx=unit)
            t0 = time.perf_counter()
            T.submit(ctx, tx)
            lock_submit.append((time.perf_counter() - t0) * 1000)
            spent = T.locked_output(tx, ctx)  # the signature names the lock it releases
            share = 400_000
            message = distribute_message(share, spent)
            signature = bytes(oracle.sign(message).signature)
            t0 = time.perf_counter()
            tx = T.distribute(
                ctx,
                signing_key=provider_sk,
                address=provider,
                job_id=job,
                oracle_signature=signature,
                provider_amount=share,
                provider_address=provider,
            )
            t1 = time.perf_counter()
            T.submit(ctx, tx)
            t2 = time.perf_counter()
            claim_build.append((t1 - t0) * 1000)
            claim_submit.append((t2 - t1) * 1000)

        print(summary("plain payment: submit", pay_submit, "ms"))
        print(summary("plain payment: build+sign (client)", pay_build, "ms"))
        print(summary("escrow lock: submit", lock_submit, "ms"))
        print(summary("escrow distribute: submit (runs the script)", claim_submit, "ms"))
        print(summary("escrow distribute: build+sign incl. evaluate (client)", claim_build, "ms"))
    finally:
        server.terminate()
        server.wait(timeout=10)


if __name__ == "__main__":
    main()
