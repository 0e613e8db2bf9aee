"""Connect to a sandboxed job's listener from inside its network namespace (sandbox.py).

Run by path under ``nsenter --net`` (``python -I sandbox_connect.py ADDRESS PORT FD``: the
standard library only): it connects to ADDRESS:PORT, which in that namespace is the job's
own loopback and nothing else, sends the connected socket over FD (a Unix socket the
provider holds the other end of) and exits. A socket keeps the namespace it was made in, so
the provider then relays through it as through any local connection.

Why not setns(2) in a thread of the provider: entering a network namespace needs
CAP_SYS_ADMIN in the caller's own user namespace, so only a root provider could; nsenter
enters the job's user namespace first (its owner may), which a multi-threaded process cannot.
And why not a relay inside the sandbox: a process there is the job's to kill or replace.
"""

from __future__ import annotations

import socket
import sys

TIMEOUT_S = 10.0


def main(argv: list[str]) -> int:
    if len(argv) != 4 or not argv[2].isdigit() or not argv[3].isdigit():
        print("usage: sandbox_connect.py ADDRESS PORT FD", file=sys.stderr)
        return 2
    address, port, fd = argv[1], int(argv[2]), int(argv[3])
    back = socket.socket(fileno=fd)
    try:
        conn = socket.create_connection((address, port), timeout=TIMEOUT_S)
    except OSError as exc:
        back.sendall(f"{exc.strerror or exc}".encode()[:200])
        return 1
    conn.setblocking(True)
    socket.send_fds(back, [b"+"], [conn.fileno()])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
