"""Executors: one interface (base.Executor), a Docker and a local-process implementation."""
