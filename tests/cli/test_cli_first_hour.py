"""The command line as a new user meets it (issue 14 §2): framework aliases, usage errors exit
2, `job logs --tail` and `-f` exit statuses, NDJSON streams, shell completion, --version."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from engine.payments.keystore import PASSPHRASE_ENV
from nunet_tui.cli import completion
from nunet_tui.cli.main import build_parser
from tests.conftest import REPO, run_cli, run_cli_fresh
from tests.daemon_harness import Daemon, daemons, wait_for
from tests.daemons.test_jobs_e2e import _pair, _state, scripts

__all__ = ["daemons", "scripts"]

SCRIPT_LINES = """
for i in range(30):
    print(f"line {i}", flush=True)
"""


@pytest.mark.parametrize(
    ("typed", "meant"),
    [
        ("sklearn", "scikit-learn"),
        ("scikit_learn", "scikit-learn"),
        ("Scikit-Learn", "scikit-learn"),
        ("torch", "pytorch"),
        ("tf", "tensorflow"),
        ("keras", "tensorflow"),
        ("pytorch", "pytorch"),
    ],
)
def test_framework_aliases(typed: str, meant: str) -> None:
    args = build_parser().parse_args(
        ["job", "submit", "--url", "http://h/x.py", "--framework", typed]
    )
    assert args.framework == meant


def test_an_unknown_framework_is_a_usage_error_naming_the_choices() -> None:
    done = run_cli_fresh("job", "submit", "--url", "http://h/x.py", "--framework", "jax")
    assert done.returncode == 2
    assert "unknown framework 'jax'" in done.stderr and "sklearn" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_submit_without_a_job_is_a_usage_error(tmp_path: Path) -> None:
    for args in ((), ("--url", "http://h/x.py"), ("--framework", "sklearn")):
        done = run_cli_fresh("--home", str(tmp_path / "home"), "job", "submit", *args)
        assert done.returncode == 2, done.stderr
        assert done.stderr.strip() == (
            "nunet-tui job submit: error: give -f FILE, or --url and --framework "
            "(see nunet-tui job submit --help)"
        )
    # Refused before anything was opened: no home was made for it.
    assert not (tmp_path / "home" / "state").exists()


def test_tail_is_bounded_by_the_parser() -> None:
    for bad in ("0", "-3", "x", "50001"):
        done = run_cli_fresh("job", "logs", "j1", "--tail", bad)
        assert done.returncode == 2 and "--tail" in done.stderr


def test_version() -> None:
    done = run_cli_fresh("--version")
    assert done.returncode == 0 and done.stdout.startswith("nunet-tui ")


def test_a_reader_that_quits_early_gets_no_traceback() -> None:
    # `nunet-tui completion bash | head -1`, with the reader gone before the first write (so
    # every write finds the pipe closed, whatever the timing).
    read_end, write_end = os.pipe()
    os.close(read_end)
    argv = [sys.executable, "-m", "nunet_tui", "completion", "bash"]
    try:
        done = subprocess.run(argv, stdout=write_end, stderr=subprocess.PIPE, timeout=30)
    finally:
        os.close(write_end)
    errors = done.stderr.decode()
    assert done.returncode == 0, errors  # the reader leaving is no error of ours
    assert "Traceback" not in errors and "BrokenPipe" not in errors


def test_stream_options_document_ndjson() -> None:
    logs = run_cli_fresh("job", "logs", "--help").stdout
    watch = run_cli_fresh("gpu", "status", "--help").stdout
    assert "NDJSON" in logs and "NDJSON" in watch
    readme = (REPO / "README.md").read_text()
    assert "NDJSON" in readme


# --- shell completion -------------------------------------------------------------------


def _bash_complete(line: str) -> list[str]:
    """What bash would offer after ``line`` (the cursor at its end), from the real script."""
    words = line.split(" ")
    script = completion.bash(build_parser())
    program = (
        script
        + "\nCOMP_WORDS=("
        + " ".join(f"'{w}'" for w in words)
        + f")\nCOMP_CWORD={len(words) - 1}\n_nunet_tui\nprintf '%s\\n' \"${{COMPREPLY[@]}}\"\n"
    )
    done = subprocess.run(["bash", "-c", program], capture_output=True, text=True, timeout=10)
    assert done.returncode == 0, done.stderr
    return sorted(filter(None, done.stdout.splitlines()))


def test_bash_completes_commands_subcommands_and_options() -> None:
    assert {"job", "gpu", "demo", "completion", "wallet"} <= set(_bash_complete("nunet-tui "))
    assert _bash_complete("nunet-tui jo") == ["job"]
    assert {"submit", "logs", "list", "cancel"} <= set(_bash_complete("nunet-tui job "))
    assert {"--tail", "--follow", "--json"} <= set(_bash_complete("nunet-tui job logs -"))
    assert _bash_complete("nunet-tui --home /tmp/x job logs --t") == ["--tail"]
    assert _bash_complete("nunet-tui completion ") == ["bash", "fish", "zsh"]
    assert _bash_complete("nunet-tui daemon --executor ") == ["docker", "process"]


def test_every_command_of_the_parser_is_in_every_script() -> None:
    parser = build_parser()
    commands = {c for node in completion.walk(parser) for c in node.commands}
    assert {"submit", "logs", "doctor", "completion"} <= commands
    for shell in completion.SHELLS:
        done = run_cli_fresh("completion", shell)
        assert done.returncode == 0
        for command in commands:
            assert command in done.stdout, (shell, command)


@pytest.mark.skipif(shutil.which("fish") is None, reason="fish is not installed")
def test_fish_reads_its_script(tmp_path: Path) -> None:
    script = tmp_path / "nunet-tui.fish"
    script.write_text(completion.fish(build_parser()))
    done = subprocess.run(["fish", "--no-execute", str(script)], capture_output=True, timeout=10)
    assert done.returncode == 0, done.stderr


@pytest.mark.skipif(shutil.which("zsh") is None, reason="zsh is not installed")
def test_zsh_reads_its_script(tmp_path: Path) -> None:
    script = tmp_path / "_nunet-tui"
    script.write_text(completion.zsh(build_parser()))
    done = subprocess.run(["zsh", "-n", str(script)], capture_output=True, timeout=10)
    assert done.returncode == 0, done.stderr


# --- job logs with real daemons ---------------------------------------------------------


def test_logs_tail_follow_and_the_exit_status_of_a_failed_job(
    daemons: Callable[..., Daemon], scripts: str, tmp_path: Path
) -> None:
    _, consumer = _pair(daemons)
    www = tmp_path / "www"  # where the scripts fixture serves from
    (www / "lines.py").write_text(SCRIPT_LINES)

    ok = consumer.cli(
        "job",
        "submit",
        "--url",
        f"{scripts}/lines.py",
        "--framework",
        "sklearn",
        "--expected-minutes",
        "1",
    )["job_id"]
    wait_for(lambda: _state(consumer, ok) == "completed", "the job never completed", 60)
    assert consumer.cli("job", "show", ok)["spec"]["framework"] == "scikit-learn"

    whole = run_cli_fresh("job", "logs", ok, "--json", home=consumer.home)
    every = [json.loads(line) for line in whole.stdout.splitlines()]  # NDJSON
    assert [r["text"] for r in every if r["text"].startswith("line ")] == [
        f"line {i}" for i in range(30)
    ]
    tail = run_cli_fresh("job", "logs", ok, "--tail", "3", "--json", home=consumer.home)
    assert tail.returncode == 0
    assert [json.loads(line) for line in tail.stdout.splitlines()] == every[-3:]
    followed = run_cli_fresh("job", "logs", ok, "-f", "--tail", "2", "--json", home=consumer.home)
    assert followed.returncode == 0
    assert [json.loads(line) for line in followed.stdout.splitlines()] == every[-2:]

    failing = consumer.cli(
        "job",
        "submit",
        "--url",
        f"{scripts}/failing.py",
        "--framework",
        "torch",
        "--expected-minutes",
        "1",
    )["job_id"]
    wait_for(lambda: _state(consumer, failing) == "failed", "the job never failed", 60)
    done = run_cli_fresh("job", "logs", failing, "-f", home=consumer.home)
    assert done.returncode == 1
    assert "about to fail" in done.stdout
    assert (
        done.stderr.strip()
        .splitlines()[-1]
        .startswith(f"nunet-tui: error: job {failing} ended failed: ")
    )
    # Without -f it is a plain read: the log was printed, so it succeeded.
    assert run_cli_fresh("job", "logs", failing, home=consumer.home).returncode == 0


@pytest.mark.parametrize(
    "argv",
    [
        ["demo"],
        ["demo", "--no-tui"],
        ["--home", "/tmp/h", "demo", "--root", "/tmp/r"],
        ["--attach", "demo", "--no-tui", "--root=/tmp/r"],
    ],
)
def test_a_plain_demo_skips_the_full_parser_and_reads_the_same(argv: list[str]) -> None:
    from nunet_tui.cli.main import _demo_only

    quick = _demo_only(argv)
    assert quick is not None
    full = build_parser().parse_args(argv)
    for name in ("command", "home", "attach", "listen", "bootstrap", "no_tui", "root"):
        assert getattr(quick, name) == getattr(full, name), name


@pytest.mark.parametrize(
    "argv", [["demo", "--bogus"], ["demo", "-h"], ["demo", "x"], ["job", "list"], ["demo", "--"]]
)
def test_anything_more_than_a_plain_demo_goes_to_the_full_parser(argv: list[str]) -> None:
    from nunet_tui.cli.main import _demo_only

    assert _demo_only(argv) is None


@pytest.mark.parametrize(
    "argv",
    [
        ["peer", "list", "--json"],
        ["--home", "job", "peer", "self"],  # an option's value that is a command's name
        ["--json", "job", "submit", "--url", "http://x/a.py", "--framework", "torch"],
        ["--home", "/tmp/h", "job", "logs", "abc", "--tail", "5"],
        ["--attach", "reward", "list"],
        ["wallet", "show"],
        ["resource", "list", "--json"],
        ["onboard-ml"],
        ["onboard", "-m", "100", "-c", "200", "-a", "addr"],
        ["chat", "send", "p", "job"],
        ["log", "-o", "/tmp/x.tar.gz"],
        ["--home", "/tmp/h", "daemon", "--executor", "docker"],
    ],
)
def test_a_command_parsed_by_its_own_parser_reads_as_the_whole_one_reads_it(
    argv: list[str],
) -> None:
    from nunet_tui.cli.main import _parse

    parser, args = _parse(argv)
    assert args == build_parser().parse_args(argv)
    assert parser.prog == "nunet-tui"


@pytest.mark.parametrize(
    ("argv", "word"),
    [
        (["peer", "list"], "peer"),
        (["--home", "job", "peer", "self"], "peer"),
        (["--listen", "/ip4/1.2.3.4/tcp/1", "job", "list"], "job"),
        (["job", "-h"], None),  # help: the whole parser
        (["--version"], None),
        (["completion", "bash"], None),
        (["daemon", "--executor", "process"], "daemon"),
        (["demo"], None),  # its own quick path (_demo_only)
        (["jbo", "list"], None),
        (["--", "job"], None),
        ([], None),
    ],
)
def test_the_command_word_is_found_past_the_apps_options(argv: list[str], word: str | None) -> None:
    from nunet_tui.cli.main import _command_word

    assert _command_word(argv) == word


def test_a_mistake_in_a_command_is_worded_by_the_whole_parser() -> None:
    bad = run_cli_fresh("peer", "lst")
    assert bad.returncode == 2
    assert bad.stderr.startswith("nunet-tui peer: error: argument PEER_COMMAND: invalid choice")
    assert "'self', 'list'" in bad.stderr
    unknown = run_cli_fresh("jbo", "list")
    assert unknown.returncode == 2 and "'job', 'wallet'" in unknown.stderr


def test_a_mistyped_home_is_an_error_not_a_new_node(tmp_path: Path) -> None:
    """Only onboard, wallet new/import and daemon --init make a node in a --home that does not
    exist; anything else said nothing and made a new node with a new identity there."""
    typo = tmp_path / "hmoe"
    for args in (("info",), ("peer", "list"), ("job", "list"), ("log",), ("daemon",)):
        done = run_cli("--home", str(typo), *args)
        assert done.returncode == 1, (args, done.stderr)
        assert done.stderr.strip() == (
            f"nunet-tui: error: there is no node at {typo} (a mistyped --home?): "
            f"`nunet-tui --home {typo} onboard`, `wallet new` or `daemon --init` make one there"
        ), args
        assert not typo.exists(), args
    made = run_cli(
        "--home", str(typo), "wallet", "new", "--json", env={PASSPHRASE_ENV: "pass phrase 1"}
    )
    assert typo.exists(), made.stderr
    assert run_cli("--home", str(typo), "info", "--json").returncode == 0
