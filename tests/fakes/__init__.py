"""Fakes of our own ports (engine/ports.py) for unit tests of one subsystem at a time.

Each is named ``Fake…`` and does the least the port promises, recording what it was asked.
``make_context`` builds a real ``NodeContext`` (real SQLite store, real identity) in a folder.
"""
