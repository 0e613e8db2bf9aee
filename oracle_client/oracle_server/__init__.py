"""The reference oracle: registers quoted jobs and signs one release decision per job.

Run it with ``nunet-oracle serve`` (cli.py). The pieces: keys.py (its Ed25519 key),
store.py (SQLite: jobs, decisions, reported transactions), locks.py (is the job's escrow lock
on chain?), rules.py (which outcome pays whom), service.py (the logic), server.py (HTTP).
"""
