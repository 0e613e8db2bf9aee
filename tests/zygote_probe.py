"""Run by tests/daemons/test_demo_start.py in a child forked from a zygote: prints what the
child is."""

import json
import os
import random
import sys
import time
from pathlib import Path

print(
    json.dumps(
        {
            "argv": sys.argv[1:],
            "pid": os.getpid(),
            "pgid": os.getpgid(0),
            "ppid": os.getppid(),
            "env": os.environ.get("PROBE"),
            "leaked": os.environ.get("NUNET_PROBE_PARENT"),
            "random": random.random(),
            "comm": Path("/proc/self/comm").read_text().strip(),
            "cwd": os.getcwd(),
            "stdin": sys.stdin.read() if "--stdin" in sys.argv else None,
        }
    ),
    flush=True,
)
if "--wait" in sys.argv:
    time.sleep(60)
if "--exit" in sys.argv:
    raise SystemExit(int(sys.argv[sys.argv.index("--exit") + 1]))
