"""The local ledger (nunet-ledger): a Blockfrost API subset over SQLite, with a faucet.

`start_server(db_path)` serves it in a thread (tests, the demo launcher); `nunet-ledger serve`
runs it as a process. docs/payments.md describes where it fits.
"""

from oracle_client.ledger.clock import LedgerClock
from oracle_client.ledger.server import Ledger, LedgerServer, start_server
from oracle_client.ledger.state import NTX_ASSET_NAME, LedgerState

__all__ = ["NTX_ASSET_NAME", "Ledger", "LedgerClock", "LedgerServer", "LedgerState", "start_server"]
