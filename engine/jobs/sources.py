"""Getting a job's code from a git repository (blocking: executors call it in a thread).

A branch or a tag is cloned shallow; a commit, given by its full id, is fetched alone (``git
clone --branch`` takes names only; servers hand out any commit their branches reach). The
whole of it is bounded in time, in size on disk and in files (a 200 KB repository checked out
to 1,111,156 files: git packs repeated content into almost nothing), so that a huge repository
or a server that stalls ends as a clear error instead of a provider stuck in a clone or out of
disk or inodes.

The host is the consumer's choice, so it goes through the provider's FetchPolicy first (no
loopback, LAN or metadata services unless allowed) and git is then held to the address that
was checked: curl gets it as its only answer for the host (http.curloptResolve), ssh connects
to it (HostName), git:// is given it in place of the name. Git follows no redirects itself: a
first request of our own follows them, each hop checked, and git is handed the final URL.
"""

from __future__ import annotations

import contextlib
import functools
import ipaddress
import os
import re
import shlex
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import SplitResult, urlsplit

from engine.domain.fetch_policy import DEFAULT_PORTS, FetchPolicy, IPAddress
from engine.domain.spec import GitSource
from engine.errors import EngineError
from engine.jobs.executors.disk_quota import MAX_DEPTH, workspace_use

CLONE_TIMEOUT_S = 300.0
MAX_REPO_BYTES = 2 << 30  # the checkout and its .git together
MAX_REPO_FILES = 100_000  # files and folders, the same; the job's own cap when it has one
POLL_S = 0.25
SIZE_EVERY_S = 2.0  # walking a big checkout costs: its size is looked at less often
_COMMIT = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")  # sha1 or sha256 object names
NETWORK_SCHEMES = ("http", "https", "ssh", "git")
MIN_PINNING_GIT = (2, 37)  # the first git with http.curloptResolve
_INFO_REFS = "/info/refs?service=git-upload-pack"


def clone_git(
    source: GitSource,
    dest: Path,
    policy: FetchPolicy | None = None,
    *,
    max_files: int | None = MAX_REPO_FILES,
) -> Path:
    """The repository at ``source.ref`` in ``dest`` (replaced); returns the entry point.
    ``policy``: the hosts the provider fetches from (default: public addresses only);
    ``max_files``: the files and folders the clone may make (the job's jobs.max_files)."""
    if shutil.which("git") is None:
        raise EngineError("git", "git is not installed on this provider")
    if dest.exists():
        shutil.rmtree(dest)
    deadline = time.monotonic() + CLONE_TIMEOUT_S
    url, pins = _vetted_url(source, policy or FetchPolicy(), deadline)
    env = _environment(url, dest.parent, pins)
    bounds = _Bounds(source, dest, max_files)
    try:
        _fetch(source, dest, url, pins, env, bounds, deadline)
    except BaseException:
        # Nothing of a refused clone stays: past the file cap that is up to two seconds of
        # git's writing (SIZE_EVERY_S), in files the job will never use.
        shutil.rmtree(dest, ignore_errors=True)
        raise
    return _entry_point(source, dest)


def _fetch(
    source: GitSource,
    dest: Path,
    url: str,
    pins: _Pins,
    env: dict[str, str],
    bounds: _Bounds,
    deadline: float,
) -> None:
    if _COMMIT.fullmatch(source.ref):
        dest.mkdir(parents=True)
        _git(["init", "--quiet", str(dest)], env, bounds, deadline)
        fetch = ["fetch", "--quiet", "--depth", "1", "--", url, source.ref]
        _git(["-C", str(dest), *pins.config, *fetch], env, bounds, deadline)
        checkout = ["-c", "advice.detachedHead=false", "checkout", "--quiet", "FETCH_HEAD"]
        _git(["-C", str(dest), *checkout], env, bounds, deadline)
    else:
        clone = ["clone", "--quiet", "--depth", "1", "--branch", source.ref, "--", url]
        _git([*pins.config, *clone, str(dest)], env, bounds, deadline)
    bounds.check()  # one that came in between two looks


@dataclass(frozen=True)
class _Pins:
    """How git is held to the checked addresses: ``-c`` options and ssh's command."""

    config: list[str]
    ssh_command: str


def _vetted_url(source: GitSource, policy: FetchPolicy, deadline: float) -> tuple[str, _Pins]:
    """The URL to give git (after redirects) and the pins that keep it to checked addresses."""
    try:
        return _vet(source, policy, deadline)
    except EngineError as exc:
        ours = exc.code in ("fetch_refused", "fetch_unresolved", "fetch_timeout")
        if ours and not exc.message.startswith("cannot clone"):
            raise EngineError(exc.code, f"cannot clone {source.url}: {exc.message}") from exc
        raise


def _vet(source: GitSource, policy: FetchPolicy, deadline: float) -> tuple[str, _Pins]:
    parts = urlsplit(source.url)
    scheme = parts.scheme.lower()
    if scheme not in NETWORK_SCHEMES:
        raise EngineError(
            "fetch_refused",
            f"cannot clone {source.url}: providers fetch git repositories over "
            f"{', '.join(NETWORK_SCHEMES)} only, not {scheme or 'no scheme'!r}",
        )
    url = source.url
    if scheme in ("http", "https"):
        # Its first connection checks the host: refused, nothing is sent to it.
        url = _follow_redirects(source, policy, deadline)
        parts = urlsplit(url)
        scheme = parts.scheme.lower()
    host, port = _host_port(parts, source)
    addresses = policy.check_host(host, port)
    # No redirects from git itself (the probe above followed them, each hop checked) and,
    # whatever the server says, none of its own config: the URL's scheme only.
    config = ["-c", "http.followRedirects=false"]
    ssh = "ssh -o BatchMode=yes"
    if scheme in ("http", "https"):
        _require_pinning_git()
        # curl's only answer for this host:port, so its own lookup cannot differ from ours.
        listed = ",".join(f"[{a}]" if a.version == 6 else str(a) for a in addresses)
        config += ["-c", f"http.curloptResolve={host}:{port}:{listed}"]
    elif scheme == "ssh":
        # ssh connects to the checked address; the host key is still looked up by name.
        ssh += f" -o HostName={addresses[0]} -o HostKeyAlias={shlex.quote(host)}"
        ssh += " -o CheckHostIP=no"
    else:  # git:// has no resolve option: the URL names the checked address itself
        url = parts._replace(netloc=_netloc(parts, addresses[0], port)).geturl()
    return url, _Pins(config, ssh)


def _host_port(parts: SplitResult, source: GitSource) -> tuple[str, int]:
    try:
        port = parts.port or DEFAULT_PORTS[parts.scheme.lower()]
    except ValueError:
        raise EngineError("git", f"cannot clone {source.url}: the port is not a number") from None
    if not parts.hostname:
        raise EngineError("git", f"cannot clone {source.url}: the URL names no host")
    return parts.hostname, port


def _netloc(parts: SplitResult, address: IPAddress, port: int) -> str:
    user = f"{parts.username}@" if parts.username else ""
    shown = f"[{address}]" if isinstance(address, ipaddress.IPv6Address) else str(address)
    return f"{user}{shown}:{port}"


def _follow_redirects(source: GitSource, policy: FetchPolicy, deadline: float) -> str:
    """The repository's URL after the redirects its first request gets, each hop checked.

    Git itself asks ``URL/info/refs`` first and takes a redirect there as the repository's
    new base (hosts redirect renamed repositories so); this request does the same with the
    vetted client, so git can be told to follow nothing."""
    import httpx

    from engine.jobs.vetted_http import get, vetted_client

    base = source.url.rstrip("/")
    remaining = max(0.1, deadline - time.monotonic())
    try:
        with (
            vetted_client(policy, timeout=min(15.0, remaining)) as client,
            get(client, base + _INFO_REFS, deadline=deadline) as response,
        ):
            final = str(response.url)
    except httpx.TimeoutException as exc:
        raise EngineError("git", _too_slow(source)) from exc
    except httpx.HTTPError:
        return source.url  # unreachable or not HTTP: git says so in its own words
    if final == base + _INFO_REFS:
        return source.url
    if not final.endswith(_INFO_REFS):
        raise EngineError(
            "git",
            f"cannot clone {source.url}: it redirects to {final}, which is not a git repository",
        )
    return final[: -len(_INFO_REFS)]


@functools.cache
def _git_version() -> tuple[int, ...]:
    out = subprocess.run(
        ["git", "--version"], capture_output=True, text=True, timeout=30, check=False
    ).stdout
    found = re.search(r"(\d+)\.(\d+)", out)
    return (int(found[1]), int(found[2])) if found else (0, 0)


def _require_pinning_git() -> None:
    if _git_version() < MIN_PINNING_GIT:
        have = ".".join(map(str, _git_version()))
        need = ".".join(map(str, MIN_PINNING_GIT))
        raise EngineError(
            "git",
            f"git {have} on this provider cannot be held to a checked address: "
            f"git over http(s) needs git {need} or newer",
        )


def _too_slow(source: GitSource) -> str:
    return (
        f"cloning {source.url} took over {CLONE_TIMEOUT_S:g} s: stopped "
        "(a slow server, or a repository too big to fetch in that time)"
    )


def _environment(url: str, home: Path, pins: _Pins) -> dict[str, str]:
    # No prompts (a private repo must fail, not hang), no user or system git config, and no
    # transport but the URL's own: neither a redirect nor the repository's own settings
    # (submodules, alternates) can move git to file:// or another protocol.
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_SSH_COMMAND": pins.ssh_command,
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_ALLOW_PROTOCOL": urlsplit(url).scheme.lower(),
        "HOME": str(home),
    }


def _git(argv: list[str], env: dict[str, str], bounds: _Bounds, deadline: float) -> None:
    """One git command, stopped (its helpers too) past the deadline, the size or file limit."""
    source = bounds.source
    with tempfile.TemporaryFile() as stderr:
        # Its own process group: git leaves the transfer to helpers (git-remote-http,
        # index-pack) that killing git alone would leave downloading.
        process = subprocess.Popen(
            ["git", *argv],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            env=env,
            start_new_session=True,
        )
        next_size = time.monotonic() + SIZE_EVERY_S
        try:
            while True:
                try:
                    process.wait(timeout=POLL_S)
                    break
                except subprocess.TimeoutExpired:
                    pass
                now = time.monotonic()
                if now > deadline:
                    raise EngineError("git", _too_slow(source))
                if now < next_size:
                    continue
                next_size = now + SIZE_EVERY_S
                bounds.check()
        finally:
            if process.returncode is None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        if process.returncode != 0:
            stderr.seek(0)
            raise EngineError("git", _failure(source, stderr.read().decode("utf-8", "replace")))


def _failure(source: GitSource, stderr: str) -> str:
    """What went wrong, in the consumer's terms rather than git's last line."""
    lines = [line.strip() for line in stderr.strip().splitlines() if line.strip()]
    detail = lines[-1] if lines else "git failed"
    text = stderr.lower()
    where = f"{source.url} at {source.ref}"
    if "not found in upstream" in text or ("remote branch" in text and "not found" in text):
        hint = ""
        if re.fullmatch(r"[0-9a-f]{4,39}", source.ref):
            hint = " (give a commit by its full 40-character id)"
        return f"cannot clone {where}: the repository has no branch or tag {source.ref!r}{hint}"
    if "couldn't find remote ref" in text or "not our ref" in text:
        return f"cannot clone {where}: no such commit in the repository"
    if "repository not found" in text or ("fatal: repository" in text and "not found" in text):
        return f"cannot clone {where}: no git repository at {source.url}"
    return f"cannot clone {where}: {detail}"


def _entry_point(source: GitSource, dest: Path) -> Path:
    entry = (dest / source.entry).resolve()
    if not entry.is_relative_to(dest.resolve()):
        # '..' never passes validation; a symlink in the repository still can point anywhere.
        raise EngineError(
            "git", f"entry point {source.entry} leads out of the repository {source.url}"
        )
    if not entry.is_file():
        raise EngineError(
            "git", f"entry point {source.entry} is not a file in {source.url} at {source.ref}"
        )
    return entry


@dataclass(frozen=True)
class _Bounds:
    """What a clone may take: ``MAX_REPO_BYTES`` and ``max_files`` files and folders."""

    source: GitSource
    dest: Path
    max_files: int | None

    def check(self) -> None:
        """Raise once the clone holds too much; the walk stops past the file cap, so a
        checkout of a million files costs no more to look at than the cap's worth."""
        try:
            used = workspace_use(self.dest, max_entries=self.max_files, with_bytes=True)
        except OSError:  # not made yet (git creates it)
            return
        url = self.source.url
        if used.too_deep:
            raise EngineError(
                "git", f"{url} nests folders over {MAX_DEPTH} deep: this provider takes none"
            )
        if self.max_files is not None and used.entries > self.max_files:
            raise EngineError(
                "git",
                f"{url} has too many files: its checkout passed {self.max_files:,} files and "
                "folders, this provider's cap per job (jobs.max_files); stopped",
            )
        if used.bytes > MAX_REPO_BYTES:
            raise EngineError(
                "git",
                f"{url} is too big: over {_mb(MAX_REPO_BYTES)} on disk ({_mb(used.bytes)} fetched)",
            )


def _mb(size: int) -> str:
    return f"{size / (1 << 20):,.0f} MB"
