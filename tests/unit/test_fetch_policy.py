"""The provider's fetch policy: which addresses job code may come from, checked after DNS,
and the HTTP client and git held to the address that was checked.

Addresses are judged one by one (every range the policy names, in every spelling a URL can
give it); names go through a resolver, faked here only to make a name answer what a hostile
DNS server would (several addresses, a different one on the second lookup). The HTTP and git
parts run against real servers on 127.0.0.1 and 127.0.0.2, one allowed and one not, and check
which of them saw a request.
"""

from __future__ import annotations

import datetime
import http.server
import ipaddress
import socket
import ssl
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from engine.config import Paths, load_settings
from engine.domain.fetch_policy import FetchPolicy, IPAddress, parse_networks
from engine.domain.spec import GitSource
from engine.errors import EngineError
from engine.jobs import sources
from engine.jobs.script_fetch import fetch_script
from tests.git_server import _Backend, git

LOOPBACK_ONLY_2 = FetchPolicy.from_settings(["127.0.0.2/32"])


# --- real servers that remember who asked -----------------------------------------------------


@dataclass
class Served:
    """What a server answers per path, and every request it got (path, Host header)."""

    routes: dict[str, tuple[int, dict[str, str], bytes]] = field(default_factory=dict)
    seen: list[tuple[str, str]] = field(default_factory=list)
    url: str = ""
    port: int = 0


def _handler(served: Served) -> type[http.server.BaseHTTPRequestHandler]:
    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            served.seen.append((self.path, self.headers.get("Host", "")))
            status, headers, body = served.routes.get(
                self.path.split("?")[0], (404, {}, b"not here")
            )
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    return Handler


class _V6Server(http.server.ThreadingHTTPServer):
    address_family = socket.AF_INET6


@contextmanager
def serving(host: str, port: int = 0, served: Served | None = None) -> Iterator[Served]:
    """A real HTTP server on ``host:port`` (0: any free port)."""
    served = served or Served()
    server_class = _V6Server if ":" in host else http.server.ThreadingHTTPServer
    server = server_class((host, port), _handler(served))
    server.daemon_threads = True
    served.port = server.server_address[1]
    shown = f"[{host}]" if ":" in host else host
    served.url = f"http://{shown}:{served.port}"
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield served
    finally:
        server.shutdown()
        server.server_close()


@contextmanager
def twin_servers() -> Iterator[tuple[Served, Served]]:
    """Servers on 127.0.0.2 and 127.0.0.1 on the same port: a name's two possible answers."""
    with serving("127.0.0.2") as allowed, serving("127.0.0.1", allowed.port) as secret:
        yield allowed, secret


def fake_resolver(answers: dict[str, list[list[str]]]) -> Callable[[str, int], list[IPAddress]]:
    """A hostile DNS server: each lookup of a name gets its next answer (the last repeats)."""
    calls: dict[str, int] = {}

    def resolve(host: str, port: int) -> list[IPAddress]:
        n = calls.get(host, 0)
        calls[host] = n + 1
        answer = answers[host][min(n, len(answers[host]) - 1)]
        return [ipaddress.ip_address(a) for a in answer]

    return resolve


# --- the addresses ------------------------------------------------------------------------------

REFUSED = [
    ("127.0.0.1", "loopback"),
    ("127.255.255.254", "loopback"),
    ("::1", "loopback"),
    ("10.1.2.3", "private (RFC 1918)"),
    ("172.16.0.1", "private (RFC 1918)"),
    ("172.31.255.255", "private (RFC 1918)"),
    ("192.168.1.20", "private (RFC 1918)"),
    ("100.64.0.1", "carrier-grade NAT"),
    ("100.127.255.254", "carrier-grade NAT"),
    ("169.254.10.1", "link-local"),
    ("fe80::1", "link-local"),
    ("fc00::1", "unique local"),
    ("fd12:3456::1", "unique local"),
    ("fec0::1", "site-local"),
    ("224.0.0.251", "multicast"),
    ("239.255.255.250", "multicast"),
    ("ff02::1", "multicast"),
    ("0.0.0.0", "unspecified"),
    ("0.1.2.3", "unspecified"),
    ("::", "unspecified"),
    ("240.0.0.1", "reserved"),
    ("255.255.255.255", "broadcast"),
    ("192.0.2.5", "documentation"),
    ("2001:db8::5", "documentation"),
    ("198.18.0.1", "benchmarking"),
    ("192.0.0.8", "IETF protocol assignment"),
    ("169.254.169.254", "cloud metadata"),
    ("169.254.170.2", "cloud metadata"),
    ("100.100.100.200", "cloud metadata"),
    ("fd00:ec2::254", "cloud metadata"),
    ("::ffff:127.0.0.1", "loopback address, written as IPv4-mapped IPv6"),
    ("::ffff:10.0.0.1", "private (RFC 1918) address, written as IPv4-mapped"),
    ("::ffff:169.254.169.254", "cloud metadata"),
    ("::127.0.0.1", "IPv4-compatible"),
    ("2002:7f00:1::", "leads to 127.0.0.1, a loopback"),
    ("2002:a9fe:a9fe::", "leads to 169.254.169.254, a cloud metadata"),
    ("64:ff9b::a00:1", "leads to 10.0.0.1, a private"),
    ("64:ff9b:1::1", "local-use NAT64"),
    ("100::1", "discard-only"),
    ("2001::1", "not a public address"),  # Teredo
]
PUBLIC = ["8.8.8.8", "1.1.1.1", "93.184.215.14", "2606:4700:4700::1111", "::ffff:8.8.8.8"]


@pytest.mark.parametrize(("address", "kind"), REFUSED)
def test_every_address_that_is_not_public_is_refused(address: str, kind: str) -> None:
    why = FetchPolicy().refusal(ipaddress.ip_address(address))
    assert why is not None and kind in why


@pytest.mark.parametrize("address", PUBLIC)
def test_public_addresses_are_fetched_from(address: str) -> None:
    assert FetchPolicy().refusal(ipaddress.ip_address(address)) is None


def test_allowed_networks_open_exactly_themselves() -> None:
    lan = FetchPolicy.from_settings(["127.0.0.0/8", "192.168.1.0/24", "fd00:1::/32"])
    for address in ("127.0.0.1", "127.3.2.1", "::ffff:127.0.0.1", "192.168.1.9", "fd00:1::5"):
        assert lan.refusal(ipaddress.ip_address(address)) is None, address
    for address in ("::1", "10.0.0.1", "192.168.2.1", "fd00:2::5", "169.254.1.1"):
        assert lan.refusal(ipaddress.ip_address(address)) is not None, address


@pytest.mark.parametrize("allowed", ["0.0.0.0/0", "::/0", "169.254.0.0/16", "fd00::/8"])
def test_metadata_unspecified_and_multicast_are_never_allowed(allowed: str) -> None:
    everything = FetchPolicy.from_settings([allowed])
    for address in (
        "169.254.169.254",
        "fd00:ec2::254",
        "0.0.0.0",
        "::",
        "224.0.0.1",
        "ff02::1",
        "::ffff:169.254.169.254",
    ):
        why = everything.refusal(ipaddress.ip_address(address))
        assert why is not None and "never" in why, (allowed, address)


# --- names --------------------------------------------------------------------------------------


def test_a_name_with_one_private_address_among_public_ones_is_refused() -> None:
    resolver = fake_resolver({"mixed.example": [["8.8.8.8", "10.0.0.7", "1.1.1.1"]]})
    policy = FetchPolicy(resolver=resolver)
    with pytest.raises(EngineError) as info:
        policy.check_host("mixed.example", 80)
    assert info.value.code == "fetch_refused"
    message = info.value.message
    assert "'mixed.example'" in message and "10.0.0.7" in message
    assert 'jobs.fetch_allow_networks = ["10.0.0.7/32"]' in message
    assert "\n" not in message


def test_the_hint_names_a_setting_that_would_allow_the_address() -> None:
    resolver = fake_resolver(
        {"mapped.example": [["::ffff:192.168.1.4"]], "meta.example": [["169.254.169.254"]]}
    )
    policy = FetchPolicy(resolver=resolver)
    with pytest.raises(EngineError) as info:
        policy.check_host("mapped.example", 80)
    hint = 'jobs.fetch_allow_networks = ["192.168.1.4/32"]'
    assert hint in info.value.message
    allowed = FetchPolicy(parse_networks(["192.168.1.4/32"]), resolver=resolver)
    assert allowed.check_host("mapped.example", 80)  # the hint's setting does allow it
    with pytest.raises(EngineError) as info:
        policy.check_host("meta.example", 80)
    assert "never fetched from" in info.value.message
    assert "fetch_allow_networks" not in info.value.message


def test_a_public_name_gives_the_addresses_to_connect_to() -> None:
    resolver = fake_resolver({"pub.example": [["8.8.8.8", "2606:4700:4700::1111"]]})
    got = FetchPolicy(resolver=resolver).check_host("pub.example", 443)
    assert [str(a) for a in got] == ["8.8.8.8", "2606:4700:4700::1111"]


@pytest.mark.parametrize(
    "name", ["metadata.google.internal", "METADATA.google.internal.", "metadata.goog", "metadata"]
)
def test_metadata_names_are_refused_before_any_lookup(name: str) -> None:
    def resolver(host: str, port: int) -> list[IPAddress]:
        raise AssertionError(f"looked up {host}")

    with pytest.raises(EngineError, match="cloud metadata service") as info:
        FetchPolicy.from_settings(["0.0.0.0/0"]).check_host(name, 80)
    assert info.value.code == "fetch_refused"
    with pytest.raises(EngineError, match="cloud metadata service"):
        FetchPolicy(resolver=resolver).check_host(name, 80)


@pytest.mark.parametrize(
    "host", ["localhost", "127.1", "0x7f000001", "2130706433", "017700000001", "::1", "[::1]"]
)
def test_every_spelling_of_loopback_is_resolved_then_refused(host: str) -> None:
    with pytest.raises(EngineError, match="loopback") as info:
        FetchPolicy().check_host(host, 80)
    assert info.value.code == "fetch_refused"


def test_a_name_that_does_not_resolve_says_so() -> None:
    with pytest.raises(EngineError, match=r"cannot resolve host 'no-such-host\.invalid'") as info:
        FetchPolicy().check_host("no-such-host.invalid", 80)
    assert info.value.code == "fetch_unresolved"


# --- the setting --------------------------------------------------------------------------------


def test_the_setting_takes_cidrs_and_names_a_bad_one(tmp_path: Path) -> None:
    assert [str(n) for n in parse_networks(["192.168.1.7/24", " 127.0.0.1 "])] == [
        "192.168.1.0/24",
        "127.0.0.1/32",
    ]
    paths = Paths.for_home(tmp_path)
    paths.ensure()
    paths.config_file.write_text('[jobs]\nfetch_allow_networks = ["10.0.0.0/8"]\n')
    assert load_settings(paths, {}).jobs.fetch_allow_networks == ["10.0.0.0/8"]
    assert (
        load_settings(paths, {"NUNET_JOBS_FETCH_ALLOW_NETWORKS": ""}).jobs
        == load_settings(Paths.for_home(tmp_path / "other"), {}).jobs
    )
    for bad in ('["lan"]', '["10.0.0.0/33"]', '["192.168.1.0/24", "fe80::/129"]'):
        paths.config_file.write_text(f"[jobs]\nfetch_allow_networks = {bad}\n")
        with pytest.raises(EngineError, match=r"jobs\.fetch_allow_networks: '.*' is not a network"):
            load_settings(paths, {})
    with pytest.raises(EngineError, match="'everything' is not a network"):
        load_settings(paths, {"NUNET_JOBS_FETCH_ALLOW_NETWORKS": "everything"})


def test_the_default_allows_nothing_but_public_addresses(tmp_path: Path) -> None:
    assert load_settings(Paths.for_home(tmp_path), {}).jobs.fetch_allow_networks == []


# --- HTTP: the checked address is the one connected to -------------------------------------------


def test_the_connection_goes_to_the_address_checked_not_a_second_lookup() -> None:
    # "localhost" is 127.0.0.1 to the system; the policy's lookup says 127.0.0.2 (allowed).
    # Connecting by name again would reach 127.0.0.1, which holds the secret.
    with twin_servers() as (allowed, secret):
        allowed.routes["/train.py"] = (200, {}, b"print('honest')\n")
        secret.routes["/train.py"] = (200, {}, b"SECRET = 'provider-local'\n")
        resolver = fake_resolver({"localhost": [["127.0.0.2"], ["127.0.0.1"]]})
        policy = FetchPolicy(LOOPBACK_ONLY_2.allow_networks, resolver=resolver)
        url = f"http://localhost:{allowed.port}/train.py"
        assert fetch_script(url, policy=policy) == b"print('honest')\n"
        assert secret.seen == []
        assert allowed.seen == [("/train.py", f"localhost:{allowed.port}")]  # Host kept


def test_tls_still_names_the_url_host(tmp_path: Path) -> None:
    """The socket goes to the checked address, but the TLS handshake asks for the URL's host
    (SNI) and the certificate is checked against it: a pinned fetch is still verified."""
    sni: list[str | None] = []
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(*_self_signed(tmp_path, "scripts.example"))
    context.sni_callback = lambda sock, name, ctx: sni.append(name)
    server = http.server.ThreadingHTTPServer(("127.0.0.2", 0), _handler(Served()))
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        resolver = fake_resolver({"scripts.example": [["127.0.0.2"]]})
        policy = FetchPolicy(LOOPBACK_ONLY_2.allow_networks, resolver=resolver)
        url = f"https://scripts.example:{server.server_address[1]}/x.py"
        with pytest.raises(EngineError, match="CERTIFICATE_VERIFY_FAILED"):
            fetch_script(url, policy=policy, timeout=5)
    finally:
        server.shutdown()
        server.server_close()
    assert sni == ["scripts.example"]


def _self_signed(folder: Path, name: str) -> tuple[str, str]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=1))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = folder / "cert.pem", folder / "key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return str(cert_file), str(key_file)


def test_refused_before_any_request_is_sent() -> None:
    with serving("127.0.0.1") as secret:
        secret.routes["/secret"] = (200, {}, b"TOKEN = 1\n")
        with pytest.raises(EngineError) as info:
            fetch_script(f"{secret.url}/secret")
        assert info.value.code == "fetch_refused"
        assert "'127.0.0.1' (127.0.0.1): a loopback address" in info.value.message
        assert secret.seen == []


def test_each_redirect_hop_is_checked() -> None:
    with twin_servers() as (allowed, secret):
        secret.routes["/secret"] = (200, {}, b"TOKEN = 1\n")
        allowed.routes["/hop"] = (302, {"Location": "/train.py"}, b"")
        allowed.routes["/train.py"] = (200, {}, b"print('ok')\n")
        allowed.routes["/leak"] = (302, {"Location": f"{secret.url}/secret"}, b"")
        allowed.routes["/leak-by-name"] = (
            307,
            {"Location": f"http://localhost:{secret.port}/secret"},
            b"",
        )
        allowed.routes["/file"] = (301, {"Location": "file:///etc/passwd"}, b"")
        allowed.routes["/loop"] = (302, {"Location": "/loop"}, b"")
        assert fetch_script(f"{allowed.url}/hop", policy=LOOPBACK_ONLY_2) == b"print('ok')\n"
        for path, expected in [
            ("/leak", f"redirected to {secret.url}/secret: refused to fetch from '127.0.0.1'"),
            ("/leak-by-name", "refused to fetch from 'localhost'"),
            ("/file", "redirected to 'file:///etc/passwd': unsupported URL scheme 'file'"),
            ("/loop", "redirected more than 5 times"),
        ]:
            with pytest.raises(EngineError) as info:
                fetch_script(f"{allowed.url}{path}", policy=LOOPBACK_ONLY_2)
            assert info.value.code == "fetch_refused", path
            assert expected in info.value.message, (path, info.value.message)
        assert secret.seen == []


def test_no_proxy_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """A proxy would do the lookup and the connection itself, out of the policy's reach."""
    with serving("127.0.0.1") as proxy, serving("127.0.0.2") as allowed:
        allowed.routes["/x.py"] = (200, {}, b"print(1)\n")
        monkeypatch.setenv("HTTP_PROXY", proxy.url)
        monkeypatch.setenv("ALL_PROXY", proxy.url)
        assert fetch_script(f"{allowed.url}/x.py", policy=LOOPBACK_ONLY_2) == b"print(1)\n"
        assert proxy.seen == []


def test_the_whole_fetch_is_bounded_in_time() -> None:
    with serving("127.0.0.2") as allowed:
        allowed.routes["/loop"] = (302, {"Location": "/loop"}, b"")
        with pytest.raises(EngineError, match="took too long"):
            fetch_script(f"{allowed.url}/loop", policy=LOOPBACK_ONLY_2, total_s=0.0)


# --- git ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GitServer:
    url: str  # the repository, on 127.0.0.2
    port: int
    requests: list[str]


@contextmanager
def git_server(
    host: str, root: Path, script: str = "print('from git')\n", empty_files: int = 0
) -> Iterator[GitServer]:
    """A real smart-HTTP git server on ``host`` with one repository, project.git, whose
    train.py is ``script`` (beside ``empty_files`` empty files in many/: one blob, a pack of
    a few KB); it records every request it gets."""
    work = root / "work"
    work.mkdir(parents=True)
    git("init", "--quiet", "--initial-branch", "main", cwd=work)
    (work / "train.py").write_text(script)
    if empty_files:
        (work / "many").mkdir()
        for number in range(empty_files):
            (work / "many" / f"f{number}").touch()
    git("add", "-A", cwd=work)
    git("commit", "--quiet", "-m", "one", cwd=work)
    served = root / "served"
    served.mkdir()
    git("clone", "--quiet", "--bare", str(work), str(served / "project.git"), cwd=root)
    requests: list[str] = []

    class Backend(_Backend):
        def _cgi(self) -> None:
            requests.append(self.path)
            super()._cgi()

    Backend.root = served
    server = http.server.ThreadingHTTPServer((host, 0), Backend)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    try:
        yield GitServer(f"http://{host}:{port}/project.git", port, requests)
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def git_on_2(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GitServer]:
    """A real git server on 127.0.0.2 (the allowed address)."""
    with git_server("127.0.0.2", tmp_path_factory.mktemp("git2")) as server:
        yield server


def test_git_is_held_to_the_checked_address(git_on_2: GitServer, tmp_path: Path) -> None:
    # localhost is 127.0.0.1 to curl's own lookup; the policy's says 127.0.0.2. A clone that
    # succeeds came from 127.0.0.2: curl used the pinned address, not its own answer.
    with serving("127.0.0.1", git_on_2.port) as secret:
        resolver = fake_resolver({"localhost": [["127.0.0.2"]]})
        policy = FetchPolicy(LOOPBACK_ONLY_2.allow_networks, resolver=resolver)
        url = f"http://localhost:{git_on_2.port}/project.git"
        entry = sources.clone_git(GitSource(url=url, entry="train.py"), tmp_path / "src", policy)
        assert entry.read_text() == "print('from git')\n"
        assert secret.seen == []


def test_git_to_a_refused_host_sends_nothing(tmp_path: Path) -> None:
    with serving("127.0.0.1") as secret:
        source = GitSource(url=f"{secret.url}/project.git", entry="train.py")
        with pytest.raises(EngineError) as info:
            sources.clone_git(source, tmp_path / "src")
        assert info.value.code == "fetch_refused"
        assert info.value.message.startswith(f"cannot clone {secret.url}/project.git: refused")
        assert secret.seen == []


def test_git_redirects_are_followed_only_to_allowed_hosts(
    git_on_2: GitServer, tmp_path: Path
) -> None:
    with serving("127.0.0.2") as front, serving("127.0.0.1") as secret:
        moved = f"{git_on_2.url}/info/refs?service=git-upload-pack"  # as git wants it
        front.routes["/old.git/info/refs"] = (301, {"Location": moved}, b"")
        front.routes["/leak.git/info/refs"] = (302, {"Location": f"{secret.url}/x/info/refs"}, b"")
        front.routes["/elsewhere.git/info/refs"] = (302, {"Location": "/index.html"}, b"")
        renamed = GitSource(url=f"{front.url}/old.git", entry="train.py")
        entry = sources.clone_git(renamed, tmp_path / "a", LOOPBACK_ONLY_2)
        assert entry.read_text() == "print('from git')\n"
        leak = GitSource(url=f"{front.url}/leak.git", entry="train.py")
        with pytest.raises(EngineError, match=r"refused to fetch from '127\.0\.0\.1'") as info:
            sources.clone_git(leak, tmp_path / "b", LOOPBACK_ONLY_2)
        assert info.value.code == "fetch_refused"
        elsewhere = GitSource(url=f"{front.url}/elsewhere.git", entry="train.py")
        with pytest.raises(EngineError, match=r"index\.html, which is not a git repository"):
            sources.clone_git(elsewhere, tmp_path / "c", LOOPBACK_ONLY_2)
        assert secret.seen == []


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("file:///etc", "over http, https, ssh, git only, not 'file'"),
        ("ext::sh -c id", "not 'ext'"),
        ("ssh://git@127.0.0.1/x.git", "refused to fetch from '127.0.0.1'"),
        ("git://localhost/x.git", "refused to fetch from 'localhost'"),
        ("https://metadata.google.internal/x.git", "cloud metadata service"),
    ],
)
def test_git_over_other_transports(url: str, message: str, tmp_path: Path) -> None:
    with pytest.raises(EngineError, match=message):
        sources.clone_git(GitSource(url=url, entry="t.py"), tmp_path / "src")


def test_git_without_pinning_support_refuses_http(
    monkeypatch: pytest.MonkeyPatch, git_on_2: GitServer, tmp_path: Path
) -> None:
    monkeypatch.setattr(sources, "_git_version", lambda: (2, 30))
    with pytest.raises(EngineError, match=r"git 2\.30 .* needs git 2\.37 or newer"):
        sources.clone_git(
            GitSource(url=git_on_2.url, entry="train.py"), tmp_path / "src", LOOPBACK_ONLY_2
        )


@contextmanager
def listener(host: str, port: int = 0) -> Iterator[tuple[int, list[bytes]]]:
    """A TCP listener that keeps the first bytes each connection sends, then hangs up."""
    server = socket.create_server((host, port))
    server.settimeout(0.2)
    got: list[bytes] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            with conn:
                conn.settimeout(5)
                # A client may write its greeting in pieces (git sends the pkt-line's length
                # first): read until 32 bytes, its end, or the deadline.
                data = b""
                try:
                    while len(data) < 32 and (chunk := conn.recv(200)):
                        data += chunk
                except OSError:
                    pass
                got.append(data)

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1], got
    finally:
        stop.set()
        thread.join(5)
        server.close()


@pytest.mark.parametrize(
    ("scheme", "greeting"), [("ssh", b"SSH-2.0-"), ("git", b"git-upload-pack")]
)
def test_ssh_and_git_protocol_are_held_to_the_checked_address(
    scheme: str, greeting: bytes, tmp_path: Path
) -> None:
    """No resolve option for these: ssh is told the address (HostName), git:// gets it in the
    URL. A name the system resolves to 127.0.0.1 but the policy to 127.0.0.2 goes to .2."""
    with listener("127.0.0.2") as (port, pinned), listener("127.0.0.1", port) as (_, secret):
        resolver = fake_resolver({"localhost": [["127.0.0.2"]]})
        policy = FetchPolicy(LOOPBACK_ONLY_2.allow_networks, resolver=resolver)
        source = GitSource(url=f"{scheme}://localhost:{port}/x.git", entry="t.py")
        with pytest.raises(EngineError, match=r"cannot clone"):
            sources.clone_git(source, tmp_path / "src", policy)
    assert secret == []
    assert pinned and pinned[0].lstrip(b"0123456789abcdef").startswith(greeting), pinned


@pytest.mark.parametrize("host", ["0177.0.0.1", "0x7f.1", "2130706433", "127.1", "1.2.3.04"])
def test_odd_ipv4_spellings_are_refused_before_any_lookup(host: str) -> None:
    from engine.domain.fetch_policy import odd_ipv4_problem
    from engine.jobs.vetted_http import check_url

    why = odd_ipv4_problem(host)
    assert why is not None and "write it as four decimal numbers" in why
    assert check_url(f"http://{host}/x.py") == why  # a redirect's target too
    for fine in ("127.0.0.1", "8.8.8.8", "example.com", "0x7f.example.com", "::1"):
        assert odd_ipv4_problem(fine) is None
