"""The NTX escrow: the contract, the transactions that spend it, the receipt both peers sign.

contract/ (the OpShin validator, its datum, the compiled artifact), transactions.py (lock,
claim, refund), receipt.py. Empty on purpose: ``transactions`` imports pycardano (~2 s), so
each module is imported by name.
"""
