"""mDNS discovery (libp2p mDNS spec) on the configured interfaces only.

py-libp2p's own ``MDNSDiscovery`` opens ``Zeroconf()`` on every interface and blocks the trio
loop ~1.6 s while it registers (PLATFORM-NOTES), so this module drives zeroconf itself:

- ``Zeroconf(interfaces=[the IPv4 addresses of network.mdns_interfaces])`` ("lo" -> 127.0.0.1);
- we register ``<random>._p2p._udp.local.`` with one TXT string ``dnsaddr=<multiaddr>/p2p/<id>``
  per address reachable on those interfaces (spec: github.com/libp2p/specs discovery/mdns.md);
- we browse ``_p2p._udp.local.``, resolve what appears, and connect to it; the service's
  peer exchange and gossip then bring the peer's advert, as with a bootstrap peer.

Every zeroconf call runs as a coroutine on zeroconf's own asyncio loop thread
(``run_coroutine_threadsafe``) and is awaited from trio through the future's done callback:
the trio loop never blocks, and no worker thread is created (trio's thread cache would keep
one alive for 10 s after the last call). ``run()`` unregisters (goodbye packets) and closes
zeroconf on the way out, which ends zeroconf's loop thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import secrets
import socket
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any, TypeVar

import ifaddr
import multiaddr
import trio
from libp2p.peer.peerinfo import PeerInfo, info_from_p2p_addr
from zeroconf import IPVersion, ServiceInfo, ServiceStateChange, Zeroconf
from zeroconf.asyncio import AsyncServiceBrowser, AsyncServiceInfo

from engine.network.host import connect, is_connected

log = logging.getLogger("nunet.network.mdns")

SERVICE_TYPE = "_p2p._udp.local."
RESOLVE_TIMEOUT_MS = 3000
REGISTER_TIMEOUT_S = 5.0
UNREGISTER_TIMEOUT_S = 1.0
REDIAL_S = 10.0
MAX_TXT_ADDRS = 8  # TXT strings are <= 255 bytes each; a handful of addresses is plenty

T = TypeVar("T")


def interface_ips(names: Sequence[str]) -> list[str]:
    """IPv4 addresses of the named interfaces; entries that already are IPv4 addresses pass.

    Unknown names are logged and skipped, so a typo never widens discovery to everything.
    """
    adapters = {a.nice_name: a for a in ifaddr.get_adapters()}
    ips: list[str] = []
    for name in names:
        try:
            ips.append(str(ipaddress.IPv4Address(name)))
            continue
        except ValueError:
            pass
        adapter = adapters.get(name)
        found = [str(ip.ip) for ip in adapter.ips if ip.is_IPv4] if adapter else []
        if not found:
            log.warning("mdns: interface %r has no IPv4 address here; skipped", name)
        ips.extend(found)
    return list(dict.fromkeys(ips))


def txt_strings(text: bytes) -> list[bytes]:
    """Split a DNS TXT rdata (length-prefixed strings) into its strings."""
    out, i = [], 0
    while i < len(text):
        size = text[i]
        out.append(text[i + 1 : i + 1 + size])
        i += 1 + size
    return out


def txt_record(strings: Sequence[str]) -> bytes:
    data = b""
    for s in strings:
        raw = s.encode()
        if len(raw) <= 255:
            data += bytes([len(raw)]) + raw
    return data


def advertised_addrs(listen: Sequence[Any], ips: Sequence[str], peer_id: str) -> list[str]:
    """Our TCP listen addresses as reachable on ``ips``: 0.0.0.0 becomes each interface IP."""
    out: list[str] = []
    for addr in listen:
        text = str(addr).split("/p2p/")[0]
        parts = text.split("/")  # ['', 'ip4', A, 'tcp', PORT]
        if len(parts) != 5 or parts[1] != "ip4" or parts[3] != "tcp":
            continue
        hosts = ips if parts[2] == "0.0.0.0" else [parts[2]] if parts[2] in ips else []
        out.extend(f"/ip4/{ip}/tcp/{parts[4]}/p2p/{peer_id}" for ip in hosts)
    return out[:MAX_TXT_ADDRS]


def peer_from_txt(text: bytes, me: str) -> PeerInfo | None:
    """The peer a TXT record names (all dnsaddr entries must agree), or None."""
    found: PeerInfo | None = None
    for entry in txt_strings(text):
        if not entry.startswith(b"dnsaddr="):
            continue
        try:
            info = info_from_p2p_addr(multiaddr.Multiaddr(entry[8:].decode()))
        except Exception:
            continue
        if str(info.peer_id) == me:
            return None
        if found is None:
            found = info
        elif found.peer_id == info.peer_id:
            found.addrs.extend(info.addrs)
        else:
            return None  # a record naming two peers is not ours to trust
    return found


class LocalDiscovery:
    """Announce ourselves and connect to what we find, on ``interfaces`` only."""

    def __init__(
        self,
        host: Any,
        interfaces: Sequence[str],
        on_found: Callable[[Any], Awaitable[None]] | None = None,
    ) -> None:
        self.host = host
        self.interfaces = list(interfaces)
        self.on_found = on_found
        self.me = str(host.get_id())
        self.name = f"{secrets.token_hex(16)}.{SERVICE_TYPE}"
        self.found: dict[str, PeerInfo] = {}  # peer id -> addresses from its TXT record
        self.ips: list[str] = []
        self._zc: Zeroconf | None = None
        self._names: set[str] = set()
        self._by_name: dict[str, str] = {}  # service name -> peer id
        self._wake = trio.Event()
        self._token: trio.lowlevel.TrioToken | None = None

    async def run(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        self.ips = interface_ips(self.interfaces)
        addrs = advertised_addrs(self.host.get_transport_addrs(), self.ips, self.me)
        if not self.ips or not addrs:
            log.warning(
                "mdns: local discovery is on but nothing to announce on %s (interfaces %s, "
                "listening on %s): set network.mdns_interfaces and network.listen",
                self.ips,
                self.interfaces,
                [str(a) for a in self.host.get_transport_addrs()],
            )
            task_status.started()
            return
        self._token = trio.lowlevel.current_trio_token()
        # Opening binds sockets and starts zeroconf's loop thread: milliseconds.
        self._zc = Zeroconf(interfaces=self.ips, ip_version=IPVersion.V4Only)
        browser: AsyncServiceBrowser | None = None
        try:
            info = ServiceInfo(
                SERVICE_TYPE,
                self.name,
                port=int(addrs[0].split("/")[4]),
                properties=txt_record([f"dnsaddr={a}" for a in addrs]),
                server=f"{self.name.split('.')[0]}.local.",
                addresses=[socket.inet_aton(ip) for ip in self.ips],
            )
            browser = await self._on_loop(self._browse())
            task_status.started()
            with trio.fail_after(REGISTER_TIMEOUT_S):
                await self._on_loop(self._register(info))  # probing + announcing: ~1.6 s
            log.info("mdns: announcing %s on %s", ", ".join(addrs), ", ".join(self.ips))
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._redial_loop)
                await self._resolve_loop(nursery)
        finally:
            with trio.CancelScope(shield=True):
                await self._close(browser)

    # --- zeroconf's loop <-> trio ----------------------------------------------------------

    async def _on_loop(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on zeroconf's asyncio loop; await it from trio without blocking."""
        assert self._zc is not None and self._zc.loop is not None
        future = asyncio.run_coroutine_threadsafe(coro, self._zc.loop)
        done = trio.Event()
        token = trio.lowlevel.current_trio_token()

        def wake(_: object) -> None:
            with contextlib.suppress(trio.RunFinishedError):
                token.run_sync_soon(done.set)

        future.add_done_callback(wake)
        try:
            await done.wait()
        except BaseException:
            future.cancel()
            raise
        return future.result()

    async def _browse(self) -> AsyncServiceBrowser:
        assert self._zc is not None
        return AsyncServiceBrowser(self._zc, SERVICE_TYPE, handlers=[self._on_change])

    async def _register(self, info: ServiceInfo) -> None:
        assert self._zc is not None
        pending = await self._zc.async_register_service(info, allow_name_change=True)
        await pending

    async def _unregister(self) -> None:
        assert self._zc is not None
        await self._zc.async_unregister_all_services()

    def _on_change(
        self, zeroconf: Zeroconf, service_type: str, name: str, state_change: ServiceStateChange
    ) -> None:
        """On zeroconf's loop thread: hand the name to trio."""
        if name == self.name:
            return
        token = self._token
        if token is not None:
            removed = state_change is ServiceStateChange.Removed
            with contextlib.suppress(trio.RunFinishedError):
                token.run_sync_soon(self._forget if removed else self._queue_name, name)

    def _queue_name(self, name: str) -> None:
        self._names.add(name)
        self._wake.set()

    def _forget(self, name: str) -> None:
        """The peer said goodbye (or its record expired): stop redialling it."""
        peer_id = self._by_name.pop(name, None)
        if peer_id is not None and peer_id not in self._by_name.values():
            self.found.pop(peer_id, None)

    async def _close(self, browser: AsyncServiceBrowser | None) -> None:
        zc = self._zc
        if zc is None:
            return
        try:
            with trio.move_on_after(UNREGISTER_TIMEOUT_S):
                if browser is not None:
                    await self._on_loop(browser.async_cancel())
                await self._on_loop(self._unregister())  # goodbye packets: peers forget us
        except Exception:
            log.debug("mdns: unregister failed", exc_info=True)
        finally:
            self._zc = None
            self._token = None
            # Nothing registered any more, so this only stops and joins the loop thread.
            zc.close()

    # --- peers ---------------------------------------------------------------------------

    async def _resolve_loop(self, nursery: trio.Nursery) -> None:
        while True:
            await self._wake.wait()
            self._wake = trio.Event()
            names, self._names = self._names, set()
            for name in names:
                nursery.start_soon(self._resolve, name)

    async def _resolve(self, name: str) -> None:
        assert self._zc is not None
        info = AsyncServiceInfo(SERVICE_TYPE, name)
        zc = self._zc

        async def request() -> bool:
            return await info.async_request(zc, RESOLVE_TIMEOUT_MS)

        try:
            if not await self._on_loop(request()) or not info.text:
                return
        except Exception as exc:
            log.debug("mdns: could not resolve %s: %s", name, exc)
            return
        peer = peer_from_txt(info.text, self.me)
        if peer is None or not peer.addrs:
            return
        peer_id = str(peer.peer_id)
        new = peer_id not in self.found
        self.found[peer_id] = peer
        self._by_name[name] = peer_id
        if new:
            log.info("mdns: found %s at %s", peer_id, [str(a) for a in peer.addrs])
        await self._dial(peer)

    async def _dial(self, peer: PeerInfo) -> None:
        if is_connected(self.host, peer.peer_id):
            return
        self.host.get_peerstore().add_addrs(peer.peer_id, peer.addrs, 3600)
        try:
            await connect(self.host, peer)
        except (Exception, trio.TooSlowError) as exc:
            log.info("mdns: could not connect to %s: %s", peer.peer_id, exc)
            return
        if self.on_found is not None:
            try:
                await self.on_found(peer.peer_id)
            except Exception:
                log.exception("mdns: on_found failed")

    async def _redial_loop(self) -> None:
        """A peer we found on the LAN and lost is dialled again while its record lives."""
        while True:
            await trio.sleep(REDIAL_S)
            for peer in list(self.found.values()):
                await self._dial(peer)
