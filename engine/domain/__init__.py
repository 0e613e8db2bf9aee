"""The market's pure rules and records, shared by the rooms (jobs, network, payments,
resources), the API, the config and the TUI: the job spec and its tiers, the fetch policy,
the signed wire codecs, rate limits, safe paths, safe text and peer names.

Nothing here does I/O of its own beyond what a rule needs (a DNS lookup for the fetch policy)
and nothing imports the rest of the engine except ``engine.errors`` and ``engine.identity``
(signing): the contracts in pyproject.toml keep it so. A rule that two rooms share lives
here, once; a room's own machinery stays in the room.
"""
