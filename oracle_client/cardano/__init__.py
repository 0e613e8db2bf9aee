"""Cardano primitives, offline: Shelley addresses (address.py) and Plutus (plutus/).

Empty on purpose: ``address`` must stay cheap to import (the CLI checks addresses) and
``plutus`` imports pycardano and uplc.
"""
