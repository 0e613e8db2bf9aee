"""Engine logging: a rotating file in the home's log dir, and stderr for the daemon.

The TUI owns the terminal, so an embedded engine logs only to the file.
"""

from __future__ import annotations

import logging
import logging.handlers
import sys

from engine.config import Paths

_FORMAT = "%(asctime)s %(levelname)-7s %(name)s: %(message)s"
_MARK = "_nunet_handler"


def configure(paths: Paths, level: str = "info", stderr: bool = False) -> None:
    root = logging.getLogger("nunet")
    root.setLevel(level.upper())
    root.propagate = False
    for handler in [h for h in root.handlers if getattr(h, _MARK, False)]:
        root.removeHandler(handler)
        handler.close()
    paths.log_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    file_handler = logging.handlers.RotatingFileHandler(
        paths.log_file, maxBytes=5 << 20, backupCount=3, encoding="utf-8"
    )
    handlers: list[logging.Handler] = [file_handler]
    if stderr:
        handlers.append(logging.StreamHandler(sys.stderr))
    for handler in handlers:
        handler.setFormatter(logging.Formatter(_FORMAT))
        setattr(handler, _MARK, True)
        root.addHandler(handler)
    # pycardano dumps whole builder states (and so addresses) at WARNING on any error.
    logging.getLogger("PyCardano").setLevel(logging.CRITICAL)
