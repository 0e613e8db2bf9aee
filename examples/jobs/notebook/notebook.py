"""A JupyterLab notebook as a service job: the launcher `nunet-tui notebook create` runs.

JupyterLab listens on 127.0.0.1:$NOTEBOOK_PORT inside the job (its container has no network:
the owner reaches it through `nunet-tui notebook open`, a tunnel). The token comes from the
consumer in $JUPYTER_TOKEN and is never printed: JupyterLab's own output passes through here
and any copy of the token in it is replaced before it reaches the job's log, which the
provider keeps too. The notebooks live in notebooks/ (the job's declared output): saved into
the job's results when it stops, fetched with `nunet-tui job results ID -o DIR`.

The image needs JupyterLab (scripts/build_notebook_image.sh builds one; otherwise create the
notebook with `--dep jupyterlab`, installed before the job starts).
"""

import json
import os
import pathlib
import signal
import socket
import subprocess
import sys
import threading
import time

PORT = int(os.environ.get("NOTEBOOK_PORT", "8888"))
TOKEN = os.environ.get("JUPYTER_TOKEN", "")
ROOT = pathlib.Path("notebooks").resolve()
WELCOME = {
    "cells": [
        {
            "cell_type": "markdown",
            "metadata": {},
            "source": ["# A notebook on a NuNet provider\n", "Files here come back as results."],
        },
        {
            "cell_type": "code",
            "execution_count": None,
            "metadata": {},
            "outputs": [],
            "source": ["import os, platform\n", "platform.platform(), os.cpu_count()"],
        },
    ],
    "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3"}},
    "nbformat": 4,
    "nbformat_minor": 5,
}


def redacted(line: str) -> str:
    return line.replace(TOKEN, "[token]") if TOKEN else line


def say_when_ready() -> None:
    while True:
        try:
            with socket.create_connection(("127.0.0.1", PORT), timeout=1):
                print(f"notebook ready on 127.0.0.1:{PORT} (files in notebooks/)", flush=True)
                return
        except OSError:
            time.sleep(0.2)


def main() -> int:
    if len(TOKEN) < 16:
        print("no JUPYTER_TOKEN: create notebooks with `nunet-tui notebook create`", flush=True)
        return 2
    try:
        import jupyterlab
    except ImportError:
        print("this image has no JupyterLab: create the notebook with --dep jupyterlab")
        return 2
    ROOT.mkdir(exist_ok=True)
    if not any(ROOT.iterdir()):
        (ROOT / "welcome.ipynb").write_text(json.dumps(WELCOME, indent=1))
    runtime = pathlib.Path(os.environ.get("TMPDIR", "/tmp")) / f"jupyter-{os.getpid()}"
    env = {**os.environ, "JUPYTER_RUNTIME_DIR": str(runtime)}
    # Installed with --dep jupyterlab (pip --target /workspace/.deps): its app and kernel
    # specs are in .deps/share/jupyter, where JupyterLab does not look by itself.
    shared = pathlib.Path(jupyterlab.__file__).resolve().parent.parent / "share" / "jupyter"
    if (shared / "lab").is_dir() and not str(shared).startswith(sys.prefix):
        env["JUPYTERLAB_DIR"] = str(shared / "lab")
        env["JUPYTER_PATH"] = os.pathsep.join(filter(None, (str(shared), env.get("JUPYTER_PATH"))))
    command = [
        sys.executable,
        "-m",
        "jupyterlab",
        "--ip=127.0.0.1",
        f"--port={PORT}",
        "--ServerApp.port_retries=0",
        "--no-browser",
        "--allow-root",  # who the job runs as is the provider's choice (a process job: maybe root)
        f"--ServerApp.root_dir={ROOT}",
    ]
    child = subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    # `job stop` sends SIGTERM: JupyterLab shuts its kernels down and exits; notebooks/ is
    # then collected as the job's results.
    signal.signal(signal.SIGTERM, lambda *_: child.terminate())
    threading.Thread(target=say_when_ready, daemon=True).start()
    assert child.stdout is not None
    for line in child.stdout:
        print(redacted(line.rstrip("\n")), flush=True)
    code = child.wait()
    print(f"JupyterLab exited ({code})", flush=True)
    return 0 if code in (0, -signal.SIGTERM) else code


if __name__ == "__main__":
    sys.exit(main())
