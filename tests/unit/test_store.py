from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from engine.api import Onboarding
from engine.errors import EngineError
from engine.store import SCHEMA_VERSION, Store


def _onboarding(**changes: object) -> Onboarding:
    base = dict(
        memory_mb=8000,
        cpu_mhz=4000,
        channel="nunet-test",
        address="addr_test1x",
        gpus=("GPU-1",),
        onboarded_at=1.0,
        updated_at=2.0,
    )
    base.update(changes)
    return Onboarding(**base)  # type: ignore[arg-type]


def test_fresh_database_is_wal_and_current(tmp_path: Path) -> None:
    store = Store(tmp_path / "n.db")
    assert store.schema_version == SCHEMA_VERSION
    mode = sqlite3.connect(tmp_path / "n.db").execute("PRAGMA journal_mode").fetchone()[0]
    assert mode == "wal"
    store.close()


def test_onboarding_round_trip_and_history(tmp_path: Path) -> None:
    store = Store(tmp_path / "n.db")
    assert store.get_onboarding() is None
    store.save_onboarding(_onboarding(), "onboard")
    store.save_onboarding(_onboarding(state="paused", updated_at=3.0), "pause")
    got = store.get_onboarding()
    assert got == _onboarding(state="paused", updated_at=3.0)
    store.delete_onboarding()
    assert store.get_onboarding() is None
    assert [action for _, action, _ in store.onboarding_history()] == [
        "offboard",
        "pause",
        "onboard",
    ]
    store.close()


def test_state_survives_reopen(tmp_path: Path) -> None:
    store = Store(tmp_path / "n.db")
    store.save_onboarding(_onboarding(), "onboard")
    store.set_value("mode", "provider")
    store.close()
    again = Store(tmp_path / "n.db")
    assert again.get_onboarding() == _onboarding()
    assert again.get_value("mode") == "provider"
    again.close()


def test_failed_write_keeps_saved_state(tmp_path: Path) -> None:
    store = Store(tmp_path / "n.db")
    store.save_onboarding(_onboarding(), "onboard")
    with pytest.raises(sqlite3.IntegrityError):
        store.save_onboarding(_onboarding(memory_mb=-5), "resource-config")  # CHECK fails
    assert store.get_onboarding() == _onboarding()
    assert len(store.onboarding_history()) == 1  # the history line rolled back too
    store.close()


def test_newer_schema_is_refused(tmp_path: Path) -> None:
    db = sqlite3.connect(tmp_path / "n.db")
    db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    db.close()
    with pytest.raises(EngineError, match="newer than this release"):
        Store(tmp_path / "n.db")


def test_garbage_file_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "n.db").write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(EngineError, match="not a usable nunet-tui database"):
        Store(tmp_path / "n.db")
