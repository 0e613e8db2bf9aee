"""pycardano's Blockfrost chain context, with the cost models in the ledger's canonical order.

pycardano builds a transaction's script integrity hash from the cost models in its protocol
parameters, and serialises PlutusV2 and V3 in the order of the named map it read from
Blockfrost's ``cost_models``: that is the JSON's key order, not necessarily the ledger's
parameter order. Where the two differ, every script transaction is refused on a real network
(``PPViewHashesDontMatch``; pycardano's issue tracker has users hitting exactly that).
Blockfrost also serves ``cost_models_raw``: the same numbers as lists, in the canonical order.
This context rebuilds the cost models from those lists, keyed so that both of pycardano's
rules (V1: sorted keys; V2, V3: insertion order) give the lists' order.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from pycardano import BlockFrostChainContext, ProtocolParameters


def canonical_cost_models(raw: Mapping[str, Sequence[int]]) -> dict[str, dict[str, int]]:
    """``cost_models_raw`` ({"PlutusV3": [...]}) as pycardano's named cost models, in order."""
    return {
        language: {f"{index:04d}": int(value) for index, value in enumerate(values)}
        for language, values in raw.items()
        if values
    }


class CanonicalBlockFrostContext(BlockFrostChainContext):
    """``BlockFrostChainContext`` whose protocol parameters carry the canonical cost models."""

    _read: ProtocolParameters | None = None  # the parameters as pycardano read them
    _canonical: ProtocolParameters | None = None  # the same with the canonical cost models

    @property
    def protocol_param(self) -> ProtocolParameters:
        params = super().protocol_param
        if params is not self._read or self._canonical is None:  # read again: a new epoch
            lists = _as_dict(getattr(self.api.epoch_latest_parameters(), "cost_models_raw", None))
            named = {**(params.cost_models or {}), **canonical_cost_models(lists)}
            self._read = params
            self._canonical = dataclasses.replace(params, cost_models=named)
        return self._canonical


def _as_dict(raw: Any) -> dict[str, Sequence[int]]:
    """blockfrost-python's Namespace (or a plain dict) as {language: values}."""
    if raw is None:
        return {}
    if hasattr(raw, "to_dict"):
        raw = raw.to_dict()
    elif not isinstance(raw, Mapping):
        raw = vars(raw)
    return {str(k): list(v) for k, v in raw.items() if isinstance(v, list | tuple)}
