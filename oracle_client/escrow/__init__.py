"""The NTX escrow: the contract (contract/), its transactions (transactions.py) and the job
receipt both peers sign (receipt.py).

Empty on purpose: ``transactions`` imports pycardano (~2 s), so each module is imported by name.
"""
