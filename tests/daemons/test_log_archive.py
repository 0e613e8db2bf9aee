"""``nunet-tui log``: the support archive, with and without a running daemon, through the real
CLI; secrets planted in the config, the environment and the logs never reach it."""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable
from pathlib import Path

from engine import api
from engine.config import Paths
from engine.domain.spec import JobSpec
from engine.store import Store
from nunet_tui.cli.log_archive import members
from tests.conftest import MACHINE_TOML, make_home, run_cli
from tests.daemon_harness import Daemon, daemons

__all__ = ["daemons"]

PASSPHRASE = "correct-horse-PLANTED-passphrase"
ENV_PASSPHRASE = "env-PLANTED-passphrase-42"
BLOCKFROST = "preprodPLANTEDx0123456789abcdefghijklmnopq"[:39]
WEBHOOK_PASSWORD = "PLANTEDhookpw"
WEBHOOK_PATH = "T0PLANTED/B0PLANTED/PLANTEDpathtoken"
WEBHOOK_QUERY = "PLANTEDquerytoken"
HOOK_ARG = "Bearer PLANTEDhookarg"
LEDGER_TOKEN = "PLANTEDledgerkey"
SECRETS = (
    PASSPHRASE,
    ENV_PASSPHRASE,
    BLOCKFROST,
    WEBHOOK_PASSWORD,
    WEBHOOK_PATH,
    WEBHOOK_QUERY,
    HOOK_ARG,
    LEDGER_TOKEN,
    "PLANTED",  # every planted value carries it: none may survive anywhere
)
WEBHOOK = f"https://ops:{WEBHOOK_PASSWORD}@hooks.example.net/services/{WEBHOOK_PATH}?token={WEBHOOK_QUERY}"
CONFIG = f"""
[payments]
passphrase_file = "passphrase.txt"
ledger_url = "http://127.0.0.1:9/ledger?api_key={LEDGER_TOKEN}"

[notify]
webhook_url = "{WEBHOOK}"
command = ["/usr/local/bin/page-me", "--header", "{HOOK_ARG}"]
"""


def plant(home: Paths, *, stray: bool = False) -> dict[str, str]:
    """Secrets in the config, the passphrase file, the environment and the logs."""
    extra = f'blockfrost_project_id = "{BLOCKFROST}"\n' if stray else ""
    config = CONFIG.replace("[notify]", extra + "\n[notify]") if stray else CONFIG
    home.config_file.write_text(home.config_file.read_text() + config)
    secret_file = home.config_dir / "passphrase.txt"
    secret_file.write_text(PASSPHRASE + "\n")
    secret_file.chmod(0o600)
    home.log_dir.mkdir(parents=True, exist_ok=True)
    (home.log_dir / "engine.log").write_text(
        "2026-12-01 10:00:00 INFO    nunet.engine: engine started\n"
        f"2026-12-01 10:00:01 WARNING nunet.x: someone logged {BLOCKFROST} and {PASSPHRASE}\n"
        f"2026-12-01 10:00:02 WARNING nunet.x: posting to {WEBHOOK} failed\n"
    )
    (home.log_dir / "engine.log.1").write_text(
        f"2026-11-30 09:00:00 INFO    nunet.engine: older line, env {ENV_PASSPHRASE}\n"
    )
    return {"NUNET_KEYRING_PASSPHRASE": ENV_PASSPHRASE, "NUNET_LOG_LEVEL": "info"}


def read_archive(path: Path) -> dict[str, bytes]:
    files = {name.split("/", 1)[1]: data for name, data in members(path)}
    raw = path.read_bytes()
    for secret in SECRETS:
        assert secret.encode() not in raw
        for name, data in files.items():
            assert secret.encode() not in data, (secret, name)
    return files


def snapshot(root: Path) -> dict[str, str]:
    """Every file under ``root`` and its hash: what a read-only look must leave as it was."""
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def job(job_id: str, state: str) -> api.JobInfo:
    return api.JobInfo(
        job_id=job_id,
        role="provider",
        state=state,  # type: ignore[arg-type]
        provider="me",
        consumer="them",
        spec=JobSpec(name="iris", framework="scikit-learn", env={"TOKEN": "PLANTEDspec"}),
        reason="exit 1" if state == "failed" else "",
        created_at=time.time(),
    )


def test_without_a_daemon_from_the_database_read_only(tmp_path: Path) -> None:
    home = make_home(tmp_path / "home")
    env = plant(home, stray=True)  # a stray secret setting: the node would not even start
    store = Store(home.database)
    store.save_job(job("job-ok", "completed"))
    store.save_job(job("job-bad", "failed"))
    store.close()
    before = snapshot(tmp_path / "home")
    out = tmp_path / "support.tar.gz"

    result = run_cli("log", "-o", str(out), home=home, env=env)

    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == str(out)
    assert os.stat(out).st_mode & 0o777 == 0o600
    assert snapshot(tmp_path / "home") == before  # nothing in the home was written
    files = read_archive(out)
    assert {
        "README.txt",
        "versions.json",
        "node.json",
        "logs/engine.log",
        "logs/engine.log.1",
    } <= set(files)
    assert b"engine started" in files["logs/engine.log"]  # the log itself is kept
    assert b"older line" in files["logs/engine.log.1"]
    config = files["config/config.toml"].decode()
    assert "hooks.example.net" in config and "page-me" in config
    assert "passphrase.txt" in config and "127.0.0.1:9/ledger" in config
    environment = json.loads(files["config/environment.json"])
    assert environment["NUNET_KEYRING_PASSPHRASE"] == "<redacted>"
    assert environment["NUNET_LOG_LEVEL"] == "info"
    node = json.loads(files["node.json"])
    assert node["source"].startswith("database")
    assert {j["job_id"]: j["state"] for j in node["jobs"]} == {
        "job-ok": "completed",
        "job-bad": "failed",
    }
    assert {"docker", "gpu_driver", "gpu_runtime", "sandbox"} <= set(node["readiness"])
    versions = json.loads(files["versions.json"])
    assert versions["packages"]["libp2p"] == "0.8.1"
    assert versions["python"] and versions["nunet-tui"] and versions["docker_engine"]
    readme = files["README.txt"].decode()
    assert "unknown setting payments.blockfrost_project_id" in readme  # said, not shown


def test_with_a_running_daemon_over_its_socket(
    daemons: Callable[..., Daemon], tmp_path: Path
) -> None:
    daemon = daemons("node", 61, extra_toml=CONFIG)
    env = plant(daemon.home)  # the config once more: the same secrets, valid this time
    daemon.home.config_file.write_text(MACHINE_TOML + CONFIG)
    out = tmp_path / "daemon-log.tar.gz"

    result = run_cli("log", "-o", str(out), "--json", home=daemon.home, env=env)

    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["path"] == str(out)
    files = read_archive(out)
    assert "logs/daemon.stderr" in files
    node = json.loads(files["node.json"])
    assert node["source"].startswith("running node")
    assert node["info"]["peer_id"] == daemon.peer_id
    assert {"docker", "gpu_driver", "gpu_runtime", "sandbox"} <= set(node["readiness"])
    assert node["network"]["online"] is True and isinstance(node["network"]["peers"], int)
    settings = json.loads(files["config/settings.json"])
    assert settings["notify"]["webhook_url"].startswith("https://<redacted>@hooks.example.net")
    # Figures are no secrets: not hidden, nor cut out of others that share their digits.
    assert settings["payments"]["liveness_interval_s"] == settings["jobs"]["log_keep_days"] == 30
    assert settings["notify"]["command"] == ["/usr/local/bin/page-me", "<redacted>", "<redacted>"]
    assert daemon.cli("peer", "self")["peer_id"] == daemon.peer_id  # still serving


def test_an_existing_file_is_not_overwritten(tmp_path: Path) -> None:
    home = make_home(tmp_path / "home")
    out = tmp_path / "taken.tar.gz"
    out.write_bytes(b"mine")
    result = run_cli("log", "-o", str(out), home=home)
    assert result.returncode == 1
    assert len(result.stderr.strip().splitlines()) == 1 and "already exists" in result.stderr
    assert out.read_bytes() == b"mine"


def test_a_home_with_no_node_is_one_line(tmp_path: Path) -> None:
    result = run_cli("--home", str(tmp_path / "nothing"), "log", "-o", str(tmp_path / "x.tgz"))
    assert result.returncode == 1
    assert len(result.stderr.strip().splitlines()) == 1 and "there is no node at" in result.stderr
    assert not (tmp_path / "nothing").exists()
