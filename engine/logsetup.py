"""Engine logging: a rotating file in the home's log dir, and stderr for the daemon.

The TUI owns the terminal, so an embedded engine logs only to the file. Libraries (py-libp2p
above all) log to the file only, at WARNING and above, and never above WARNING: their error
blocks about a peer without our protocols, a departed peer or a rejected DHT record are a
stranger's doing, not the node's failure.
"""

from __future__ import annotations

import logging
import logging.handlers
import sys
from typing import Any

from engine.config import Paths
from engine.domain.safe_text import safe

_FORMAT = "%(asctime)s %(levelname)-7s %(name)s: %(message)s"
_MARK = "_nunet_handler"
# py-libp2p logs at ERROR what peers do to us (a vanished peer, a bad record); the file keeps
# those records, capped at this level, and only ours are shown on the daemon's stderr.
LIBRARY_LEVEL = logging.WARNING


class _LibrariesCapped(logging.Filter):
    """Our records pass as they are; a library's pass from WARNING up, shown as WARNING."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name == "nunet" or record.name.startswith("nunet."):
            return True
        if record.levelno < LIBRARY_LEVEL:
            return False
        if record.levelno > LIBRARY_LEVEL:
            record.levelno = LIBRARY_LEVEL
            record.levelname = logging.getLevelName(LIBRARY_LEVEL)
        return True


class _SafeFormatter(logging.Formatter):
    """Messages quote peers (job ids, reasons, exception text): each record is one line, its
    control and bidi characters escaped, on the daemon's terminal and in the file alike; a
    traceback keeps its lines, each escaped."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        return safe(super().formatMessage(record))

    def formatException(self, ei: Any) -> str:
        return "\n".join(safe(line) for line in super().formatException(ei).split("\n"))


def configure(paths: Paths, level: str = "info", stderr: bool = False) -> None:
    root = logging.getLogger("nunet")
    root.setLevel(level.upper())
    root.propagate = False
    libraries = logging.getLogger()
    for logger in (root, libraries):
        for handler in [h for h in logger.handlers if getattr(h, _MARK, False)]:
            logger.removeHandler(handler)
            handler.close()
    paths.log_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    file_handler = logging.handlers.RotatingFileHandler(
        paths.log_file, maxBytes=5 << 20, backupCount=3, encoding="utf-8"
    )
    file_handler.addFilter(_LibrariesCapped())
    handlers: list[logging.Handler] = [file_handler]
    if stderr:
        handlers.append(logging.StreamHandler(sys.stderr))
    for handler in handlers:
        handler.setFormatter(_SafeFormatter(_FORMAT))
        setattr(handler, _MARK, True)
        root.addHandler(handler)
    _route_libraries(libraries, file_handler)
    # pycardano dumps whole builder states (and so addresses) at WARNING on any error.
    logging.getLogger("PyCardano").setLevel(logging.CRITICAL)


def _route_libraries(libraries: logging.Logger, file_handler: logging.Handler) -> None:
    """Every other logger reaches the file only (the same handler: one file, one rotation).

    The root logger gets a handler of ours, so the ``basicConfig`` that a module-level
    ``logging.debug`` call runs on a handler-less root (py-libp2p 0.8.1's swarm_connection.py
    makes such calls) never installs one on stderr. And py-libp2p 0.8.1, when imported without
    LIBP2P_DEBUG (``libp2p.utils.logging.setup_logging``), leaves its "libp2p" logger without
    handlers and with ``propagate = False``: its records then went to Python's last-resort
    handler, raw onto stderr. That is ours now too, so it does not matter when libp2p loads.
    """
    for other in list(libraries.handlers):
        stream = getattr(other, "stream", None)
        if isinstance(other, logging.StreamHandler) and stream in (sys.stderr, sys.__stderr__):
            libraries.removeHandler(other)  # basicConfig's, or anyone's, onto our terminal
    libraries.addHandler(file_handler)
    libraries.setLevel(LIBRARY_LEVEL)
    logging.lastResort = file_handler
