"""The overlay's device inside a job's container (issue 25 §2; docs/cluster-overlay.md): a TUN
device ``nunet0`` created in the container's network namespace, its address in the job's /24,
up, with the /24's route (the kernel adds it with the address); the engine keeps the file
descriptor, which stays bound to that namespace, and pumps its packets.

How: on a thread of its own (``setns`` moves only the calling thread, and a thread from trio's
pool would go back to the pool in another namespace if the move back failed), open the
container's ``/proc/<pid>/ns/net``, ``setns`` into it, open ``/dev/net/tun`` (TUNSETIFF,
IFF_TUN | IFF_NO_PI: bare IP packets), and configure the device with the classic ioctls on a
socket made in that namespace (SIOCSIFADDR, SIOCSIFNETMASK, SIOCSIFMTU, SIOCSIFFLAGS): no
iproute2 and no netlink library, four fixed-size calls that every Linux since 2.2 answers.
The thread then ends (its namespace with it). Needs CAP_NET_ADMIN and CAP_SYS_ADMIN over the
container's namespace: the provider's daemon as root (or with those capabilities); the
container itself keeps every capability dropped, so the job cannot change its address,
create devices or leave its /24."""

from __future__ import annotations

import ctypes
import errno
import fcntl
import ipaddress
import os
import socket
import struct
import threading

import trio

from engine.errors import EngineError

DEVICE = "nunet0"
CLONE_NEWNET = 0x40000000
TUNSETIFF = 0x400454CA
IFF_TUN = 0x0001
IFF_NO_PI = 0x1000
IFF_UP = 0x1
IFF_RUNNING = 0x40
SIOCGIFFLAGS = 0x8913
SIOCSIFFLAGS = 0x8914
SIOCSIFADDR = 0x8916
SIOCSIFNETMASK = 0x891C
SIOCSIFMTU = 0x8922
READ_SIZE = 65535


def _ifreq(name: str, payload: bytes = b"") -> bytes:
    """struct ifreq: a 16-byte name, then a 24-byte union."""
    return struct.pack("16s24s", name.encode(), payload)


def _sockaddr(address: ipaddress.IPv4Address) -> bytes:
    return struct.pack("HH4s8x", socket.AF_INET, 0, address.packed)


def _no_ipv6(name: str) -> None:
    """IPv6 off on the device before it goes up: the overlay carries IPv4 only, and the
    kernel's router solicitations would only be dropped (and counted) at the engine."""
    try:
        with open(f"/proc/sys/net/ipv6/conf/{name}/disable_ipv6", "w") as knob:
            knob.write("1")
    except OSError:
        pass  # no IPv6 in this kernel, or /proc/sys read-only: the engine drops it anyway


def _configure(
    name: str, address: ipaddress.IPv4Address, net: ipaddress.IPv4Network, mtu: int
) -> int:
    """In the current thread's namespace: the TUN device, configured and up; its fd."""
    fd = os.open("/dev/net/tun", os.O_RDWR | os.O_CLOEXEC)
    try:
        fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH22x", name.encode(), IFF_TUN | IFF_NO_PI))
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            fcntl.ioctl(sock, SIOCSIFADDR, _ifreq(name, _sockaddr(address)))
            fcntl.ioctl(sock, SIOCSIFNETMASK, _ifreq(name, _sockaddr(net.netmask)))
            fcntl.ioctl(sock, SIOCSIFMTU, _ifreq(name, struct.pack("i", mtu)))
            _no_ipv6(name)
            flags = struct.unpack_from("H", fcntl.ioctl(sock, SIOCGIFFLAGS, _ifreq(name)), 16)[0]
            flags |= IFF_UP | IFF_RUNNING
            fcntl.ioctl(sock, SIOCSIFFLAGS, _ifreq(name, struct.pack("H", flags)))
        os.set_blocking(fd, False)
        return fd
    except BaseException:
        os.close(fd)
        raise


def _in_namespace(
    pid: int, name: str, address: ipaddress.IPv4Address, net: ipaddress.IPv4Network, mtu: int
) -> int:
    """On a thread that ends afterwards: enter ``pid``'s network namespace, make the device."""
    libc = ctypes.CDLL(None, use_errno=True)
    result: list[int] = []
    failure: list[BaseException] = []

    def work() -> None:
        try:
            ns = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY | os.O_CLOEXEC)
            try:
                if libc.setns(ns, CLONE_NEWNET) != 0:
                    code = ctypes.get_errno()
                    raise OSError(code, f"setns: {os.strerror(code)}")
            finally:
                os.close(ns)
            result.append(_configure(name, address, net, mtu))
        except BaseException as exc:
            failure.append(exc)

    thread = threading.Thread(target=work, name=f"overlay-netns-{pid}", daemon=True)
    thread.start()
    thread.join()
    if failure:
        raise failure[0]
    return result[0]


async def open_tun(
    pid: int,
    address: ipaddress.IPv4Address,
    net: ipaddress.IPv4Network,
    mtu: int,
    name: str = DEVICE,
) -> TunDevice:
    """``nunet0`` in the network namespace of process ``pid`` (a container's), configured."""
    try:
        fd = await trio.to_thread.run_sync(_in_namespace, pid, name, address, net, mtu)
    except OSError as exc:
        hint = (
            "the provider's daemon needs root (CAP_NET_ADMIN, CAP_SYS_ADMIN) for the overlay"
            if exc.errno in (errno.EPERM, errno.EACCES)
            else "is the container running, and does this kernel have /dev/net/tun?"
        )
        raise EngineError(
            "overlay", f"cannot make {name} in the container: {exc.strerror or exc}; {hint}"
        ) from exc
    return TunDevice(fd, name)


class TunDevice:
    """The engine's end of a container's ``nunet0``: whole IP packets in and out."""

    def __init__(self, fd: int, name: str = DEVICE) -> None:
        self.fd = fd
        self.name = name

    async def read(self) -> bytes:
        """The next packet the container sent (OSError once the device is gone)."""
        while True:
            try:
                return os.read(self.fd, READ_SIZE)
            except BlockingIOError:
                await trio.lowlevel.wait_readable(self.fd)

    def write(self, packet: bytes) -> bool:
        """Hand ``packet`` to the container; False when its queue is full (dropped, as a
        router drops): the sender's TCP retransmits."""
        try:
            os.write(self.fd, packet)
        except BlockingIOError:
            return False
        except OSError as exc:
            if exc.errno in (errno.EINVAL, errno.EIO, errno.ENOBUFS):
                return False
            raise
        return True

    def close(self) -> None:
        if self.fd >= 0:
            fd, self.fd = self.fd, -1
            trio.lowlevel.notify_closing(fd)
            os.close(fd)
