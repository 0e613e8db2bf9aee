"""``FakeWallet`` (``WalletPort``): a wallet and a chain backend for the escrow flow.

``chain_context`` fails (an unreachable backend, as an EngineError) ``failures`` times, then
answers with ``FakeChainContext``: a chain that holds no escrow outputs at all."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pycardano import Network

from engine import api
from engine.errors import EngineError


@dataclass
class FakeChainContext:
    network: Network = Network.TESTNET
    asked: list[Any] = field(default_factory=list)

    def utxos(self, address: Any) -> list[Any]:
        self.asked.append(address)
        return []


@dataclass
class FakeWallet:
    info: api.WalletInfo
    failures: int = 0
    chain: FakeChainContext = field(default_factory=FakeChainContext)
    chain_calls: int = 0

    def wallet(self) -> api.WalletInfo:
        return self.info

    async def chain_context(self) -> Any:
        self.chain_calls += 1
        if self.chain_calls <= self.failures:
            raise EngineError("chain", "the chain backend is unreachable (fake); retrying")
        return self.chain

    async def payment_signing_key(self) -> Any:
        raise EngineError("keystore", "the fake wallet signs nothing")
