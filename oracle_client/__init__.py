"""Everything NuNet's escrow needs off the node: the oracle's client, the escrow, the chain.

- ``client.py``, ``models.py``: the async client of the oracle's HTTP API and its wire shapes
  (``fields.py``: the bounded field types; ``peerid.py``: peer id -> Ed25519 key).
- ``escrow/``: the NTX escrow contract, the transactions that lock, claim and refund, and the
  job receipt both peers sign.
- ``cardano/``: chain primitives, offline: the one Shelley address reader, and Plutus
  (ScriptContexts, running scripts with uplc).
- ``ledger/``: the local ledger server (``nunet-ledger``).
- ``oracle_server/``: the reference oracle (``nunet-oracle``).

Nothing here imports ``engine`` or ``nunet_tui``; docs/payments.md has the full map.
"""
