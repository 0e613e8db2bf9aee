"""A local user attacks the control socket: the folder it lives in, and the socket itself.

A home too deep for a Unix socket path puts the socket in ``$XDG_RUNTIME_DIR/nunet-tui`` or
``$TMPDIR/nunet-tui-<uid>``: folders another local user can try to create first, with a
listening socket of theirs inside, to catch the keystore passphrase and the mnemonic that
``wallet unlock`` and ``wallet import`` send. Both the daemon (before it binds) and every
client (before it connects) refuse a folder that is not ours with mode 0700, and a client
refuses a socket file that is not ours.
"""

from __future__ import annotations

import os
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from engine.config import Paths, check_socket_dir
from engine.control_client import ControlClient
from engine.errors import EngineError
from tests.conftest import REPO, make_home, run_cli
from tests.daemon_harness import Daemon

NOBODY = 65534
# Long enough that <home>/state/control.sock overflows sun_path: the fallback folder is used.
DEEP = "home-" + "d" * 60
ATTACKS = ("other-uid", "mode-0777", "symlink")


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A folder of ours with a short path, to stand for $XDG_RUNTIME_DIR or $TMPDIR (the
    real /tmp/nunet-tui-<uid> is shared with every other test run on this machine)."""
    folder = Path(tempfile.mkdtemp(prefix="nx", dir="/tmp"))  # 0700, ours
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def _place(short: Path, where: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Point this process and every child at ``short`` as the runtime or temp folder."""
    if where == "xdg":
        monkeypatch.setenv("XDG_RUNTIME_DIR", str(short))
    else:
        monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
        monkeypatch.setenv("TMPDIR", str(short))


def _attacker_folder(sock: Path, attack: str) -> tuple[Path, socket.socket]:
    """What another user prepares: the socket folder (or a link to one of theirs) with a
    socket of theirs listening at the name the victim's clients will connect to."""
    real = sock.parent.parent / "attacker" if attack == "symlink" else sock.parent
    real.mkdir(mode=0o700)
    if attack == "symlink":
        os.chmod(real, 0o777)
        sock.parent.symlink_to(real)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(real / sock.name))
    listener.listen(8)
    listener.setblocking(False)
    if attack == "other-uid":
        os.chown(real, NOBODY, NOBODY)
    elif attack == "mode-0777":
        os.chmod(real, 0o777)
    return real, listener


def _snapshot(folder: Path) -> dict[str, tuple[int, int, int]]:
    """Each entry's inode, owner and mode, and the folder's own: what an attack would change."""
    info = os.stat(folder)
    entries = {name: os.lstat(folder / name) for name in os.listdir(folder)}
    shot = {name: (s.st_ino, s.st_uid, s.st_mode) for name, s in entries.items()}
    shot["."] = (info.st_ino, info.st_uid, info.st_mode)
    return shot


def _one_line_refusal(result: subprocess.CompletedProcess[str], needle: str) -> str:
    assert result.returncode != 0, result.stdout
    assert "Traceback" not in result.stderr, result.stderr
    line = result.stderr.strip()
    assert line.count("\n") == 0 and needle in line, line
    return line


@pytest.mark.parametrize("where", ["xdg", "tmp"])
@pytest.mark.parametrize("attack", ATTACKS)
def test_a_socket_folder_someone_else_controls_is_refused_by_daemon_and_client(
    tmp_path: Path, short_dir: Path, monkeypatch: pytest.MonkeyPatch, where: str, attack: str
) -> None:
    _place(short_dir, where, monkeypatch)
    home = make_home(tmp_path / DEEP)
    sock = home.control_socket
    assert sock.parent.parent == short_dir, sock  # the fallback folder is the one attacked
    sock.parent.rmdir()  # made by make_home: the attacker is first this time
    real, listener = _attacker_folder(sock, attack)
    before = _snapshot(real)
    try:
        # The daemon refuses to start: one line, no traceback, nothing bound or unlinked.
        started = subprocess.run(
            [sys.executable, "-m", "nunet_tui", "--home", str(home.home), "daemon"],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=REPO,
        )
        _one_line_refusal(started, "refusing the control socket folder")
        # A client with a secret to send refuses too, before a byte reaches the listener.
        for args, secret in (
            (("--attach", "wallet", "unlock"), "correct horse battery\n"),
            (("wallet", "import"), "abandon " * 11 + "about\n"),
            (("--attach", "peer", "self"), None),
        ):
            result = run_cli(*args, home=home, input=secret)
            _one_line_refusal(result, "refusing the control socket folder")
        with pytest.raises(BlockingIOError):
            listener.accept()  # nobody ever connected to the attacker's socket
        assert _snapshot(real) == before  # not chmod'ed, chown'ed, unlinked or replaced
        assert not home.database.exists()  # and the victim's state was never opened
    finally:
        listener.close()
    # Once the folder is gone the same home serves, with the socket in a private folder.
    if sock.parent.is_symlink():
        sock.parent.unlink()
    shutil.rmtree(real)
    victim = Daemon(home, {}).start()
    try:
        assert victim.cli("peer", "self")["peer_id"]
        info = os.lstat(sock.parent)
        assert (info.st_uid, stat.S_IMODE(info.st_mode)) == (os.geteuid(), 0o700)
    finally:
        victim.stop()


def test_a_socket_that_is_not_ours_is_not_talked_to(
    short_dir: Path, monkeypatch: pytest.MonkeyPatch, daemons: Callable[..., Daemon]
) -> None:
    """The folder is ours, but the socket file in it belongs to someone else (or is not a
    socket at all): the client says so in one line and sends nothing."""
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(short_dir))
    victim = daemons("victim-" + "d" * 60, 21)
    sock = victim.home.control_socket
    assert sock.parent == short_dir / "nunet-tui"
    os.chown(sock, NOBODY, NOBODY, follow_symlinks=False)
    try:
        for args in (("peer", "self"), ("--attach", "peer", "self")):
            result = run_cli(*args, home=victim.home, input="pw\n")
            _one_line_refusal(result, "not a socket of yours")
    finally:
        os.chown(sock, os.geteuid(), os.getegid(), follow_symlinks=False)
    assert victim.cli("peer", "self")["peer_id"]  # the daemon itself was never disturbed


# --- the same rules, in process: the pieces the CLI tests above go through ---------------


def test_xdg_runtime_dir_is_used_only_when_it_is_ours(
    tmp_path: Path, short_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    deep = Paths.for_home(tmp_path / DEEP)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(short_dir))
    monkeypatch.delenv("TMPDIR", raising=False)
    assert deep.control_socket.parent == short_dir / "nunet-tui"
    os.chmod(short_dir, 0o755)  # a runtime dir others can enter is no runtime dir
    assert deep.control_socket.parent == Path(f"/tmp/nunet-tui-{os.getuid()}")
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(short_dir / "missing"))
    assert deep.control_socket.parent == Path(f"/tmp/nunet-tui-{os.getuid()}")
    shallow = Paths.for_home(short_dir / "h")
    assert shallow.control_socket == shallow.state_dir / "control.sock"


@pytest.mark.parametrize("attack", ATTACKS)
def test_the_server_and_the_client_check_the_folder_themselves(
    tmp_path: Path, short_dir: Path, monkeypatch: pytest.MonkeyPatch, attack: str
) -> None:
    """Even past ``Paths.ensure`` (a caller that skipped it), ControlServer and
    ControlClient refuse the folder before they bind, unlink or connect."""
    import trio

    from engine.control import ControlServer

    _place(short_dir, "tmp", monkeypatch)
    sock = Paths.for_home(tmp_path / DEEP).control_socket
    real, listener = _attacker_folder(sock, attack)
    try:
        with pytest.raises(EngineError, match="refusing the control socket folder"):
            check_socket_dir(sock.parent)
        with pytest.raises(EngineError, match="refusing the control socket folder"):
            ControlClient(sock)
        with pytest.raises(EngineError, match="refusing the control socket folder"):
            trio.run(ControlServer(node=None, path=sock).serve)
        with pytest.raises(EngineError, match="refusing the control socket folder"):
            Paths.for_home(tmp_path / DEEP).ensure()
        assert (real / sock.name).exists()  # the attacker's socket was not unlinked
        with pytest.raises(BlockingIOError):
            listener.accept()
    finally:
        listener.close()
