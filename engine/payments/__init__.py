"""Payments (issue 6): the wallet, its keystore, the chain backend, and their engine commands.

Nothing here is imported at engine start: pycardano alone costs ~2 s to import, so
``Node.payments()`` loads this package on the first payments command. See docs/payments.md.
"""
