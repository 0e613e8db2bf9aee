"""``nunet-tui overlay``'s bad input (issue 25 §2): one line saying what is wrong and how to
fix it, never a traceback; the working path runs in tests/docker/test_overlay_docker.py."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import make_home, run_cli

MEMBERS = ("--member", "12D3KooWA=10.7.1.1", "--member", "12D3KooWB=10.7.1.2")


def _join(home: Path, *args: str) -> tuple[int, str]:
    done = run_cli("overlay", "join", "job-1", "--container", "c1", *args, home=make_home(home))
    assert "Traceback" not in done.stderr
    return done.returncode, done.stderr.strip()


def test_bad_overlays_are_one_line(tmp_path: Path) -> None:
    code, err = _join(tmp_path / "a", "--subnet", "8.8.8.0/24", "--address", "8.8.8.1", *MEMBERS)
    assert code != 0 and "give a private /24 like 10.7.1.0/24" in err and "\n" not in err
    code, err = _join(tmp_path / "b", "--subnet", "10.7.1.0/24", "--address", "10.7.1.9", *MEMBERS)
    assert code != 0 and "10.7.1.9 is not among the members" in err and "\n" not in err
    code, err = _join(
        tmp_path / "c", "--subnet", "10.7.1.0/24", "--address", "10.7.1.1", "--member", "oops"
    )
    assert code != 0 and "give a member as PEER_ID=ADDRESS" in err
    # Right, but no daemon runs this home: said so.
    code, err = _join(tmp_path / "d", "--subnet", "10.7.1.0/24", "--address", "10.7.1.1", *MEMBERS)
    assert code != 0 and "needs a running node" in err and "\n" not in err
