"""Files served over real HTTP on 127.0.0.1: where test jobs fetch their scripts from."""

from __future__ import annotations

import contextlib
import functools
import http.server
import threading
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def serve_files(root: Path, files: dict[str, str] | None = None) -> Iterator[str]:
    """Serve ``root`` (``files`` written into it first); yields the base URL."""
    root.mkdir(parents=True, exist_ok=True)
    for name, text in (files or {}).items():
        (root / name).write_text(text)
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    handler.log_message = lambda *a: None  # type: ignore[attr-defined]
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
