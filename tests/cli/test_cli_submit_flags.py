"""`job submit --spec NAME --max-minutes N`: the billing choices from the command line, with a
job file (the flags win over the file) or without one, checked as the daemon would."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.errors import EngineError
from nunet_tui.cli.job_output import _spec
from nunet_tui.cli.main import build_parser

IRIS = Path(__file__).resolve().parents[2] / "examples" / "jobs" / "iris" / "job.toml"


def _parsed(*argv: str) -> object:
    return build_parser().parse_args(["job", "submit", *argv])


def test_the_flags_name_a_spec_and_a_maximum_time() -> None:
    spec = _spec(
        _parsed(
            "--url",
            "https://example.org/train.py",
            "--framework",
            "sklearn",
            "--expected-minutes",
            "5",
            "--max-minutes",
            "12",
            "--spec",
            "rtx 3090",
        )  # type: ignore[arg-type]
    )
    assert (spec.resource_spec, spec.max_minutes, spec.expected_minutes) == ("rtx 3090", 12, 5)


def test_the_flags_win_over_the_job_file_and_leave_the_rest_of_it() -> None:
    plain = _spec(_parsed("-f", str(IRIS), "--base-url", "https://example.org/"))  # type: ignore[arg-type]
    assert plain.resource_spec is None and plain.max_minutes is None
    chosen = _spec(
        _parsed(
            "-f", str(IRIS), "--base-url", "https://example.org/", "--spec", "big",
            "--max-minutes", str(plain.expected_minutes * 3), "--budget", "2.5",
        )  # type: ignore[arg-type]
    )  # fmt: skip
    assert chosen.resource_spec == "big"
    assert chosen.max_minutes == plain.expected_minutes * 3
    assert chosen.budget_ntx == 2.5
    assert (chosen.script_url, chosen.framework) == (plain.script_url, plain.framework)


def test_a_maximum_below_the_expected_time_is_one_clear_error() -> None:
    expected = "maximum time must be at least the expected time"
    with pytest.raises(EngineError, match=expected) as refused:
        _spec(
            _parsed(
                "--url", "https://example.org/t.py", "--framework", "sklearn",
                "--expected-minutes", "10", "--max-minutes", "5",
            )  # type: ignore[arg-type]
        )  # fmt: skip
    assert "\n" not in str(refused.value)
