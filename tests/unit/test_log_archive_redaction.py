"""The support archive redacts by key and by whole value, never by cutting a secret's text
out of other text: a short secret ("3272", a webhook path's number) was string-replaced in
every member, "created_at": 17963272<redacted>851927 among them, and harmless [payments]
settings (settle_interval_s) were hidden."""

from __future__ import annotations

import json

from nunet_tui.cli.log_archive import (
    REDACTED,
    Archive,
    Secrets,
    is_secret_key,
    redact_config,
)


def test_figures_survive_a_short_secret_that_they_contain() -> None:
    secrets = Secrets()
    secrets.add("3272")
    archive = Archive(root="r")
    archive.json("node.json", {"created_at": 1796327285.1927, "id": "a3272b", "k": "3272"}, secrets)
    shown = json.loads(archive.members["r/node.json"])
    assert shown == {"created_at": 1796327285.1927, "id": "a3272b", "k": REDACTED}
    assert secrets.scrub("took 17963272851927 ms") == "took 17963272851927 ms"


def test_a_distinctive_secret_is_still_cut_out_of_free_text() -> None:
    secrets = Secrets()
    secrets.add("correct-horse-battery")
    line = "someone logged correct-horse-battery here"
    assert secrets.scrub(line) == f"someone logged {REDACTED} here"
    archive = Archive(root="r")
    archive.json("j.json", {"reason": line, "n": 3}, secrets)
    assert json.loads(archive.members["r/j.json"]) == {"reason": secrets.scrub(line), "n": 3}


def test_keys_are_judged_by_their_words() -> None:
    assert is_secret_key("blockfrost_project_id") and is_secret_key("api_key")
    assert is_secret_key("KEYRING_PASSPHRASE") and is_secret_key("auth_token")
    for harmless in ("keystore", "passphrase_file", "settle_interval_s", "log_keep_days",
                     "ntx_policy_id", "monkey_count", "compass"):  # fmt: skip
        assert not is_secret_key(harmless), harmless


def test_harmless_payments_settings_are_shown() -> None:
    secrets = Secrets()
    raw = {"payments": {"settle_interval_s": 30.0, "counter_tolerance_s": 30, "seed": "x" * 9}}
    shown = redact_config(raw, secrets)["payments"]
    assert shown == {"settle_interval_s": 30.0, "counter_tolerance_s": 30, "seed": REDACTED}
