"""A job's dependency is code too: an sdist's build (its setup.py) runs when pip installs it,
as whoever runs pip. Before, that was the provider's own user (root on a root provider): a
package on the index could read the provider's identity key. Now pip runs in a sandbox like
the job's (sandbox.py ``wrap_install``): the network for the index, its venv writable, nothing
of the provider's. Here a local sdist (the provider's admission refuses dependencies that
name a URL, so this goes to the executor directly) tries the key and a write to the host's
/tmp at build time, and records what it got in the venv it is installed into.
"""

from __future__ import annotations

import json
import tarfile
import uuid
from pathlib import Path

import pytest

from engine.jobs.executors import sandbox
from engine.jobs.executors.process import ProcessExecutor
from tests.engine.test_jobs_process import new_run, run_job, spec, texts

pytestmark = pytest.mark.skipif(
    not sandbox.probe().usable, reason=f"no job sandbox here: {sandbox.probe().detail}"
)

SETUP = """
import json, os, sys
from setuptools import setup

def attempt(action):
    try:
        action()
        return "reached"
    except Exception as exc:
        return f"denied ({type(exc).__name__})"

def write(path):
    with open(path, "w") as f:
        f.write("pwned")

got = {
    "secret": attempt(lambda: open(SECRET).read()),
    "host /tmp": attempt(lambda: write(MARK)),
}
os.makedirs(os.path.join(sys.prefix, "probe"), exist_ok=True)
with open(os.path.join(sys.prefix, "probe", "build.json"), "w") as f:
    json.dump(got, f)
setup(name="nunetbuild", version="1.0", py_modules=["nunetbuild"])
"""


def _sdist(folder: Path, secret: Path, mark: Path) -> Path:
    source = folder / "nunetbuild-1.0"
    source.mkdir(parents=True)
    (source / "setup.py").write_text(f"SECRET = {str(secret)!r}\nMARK = {str(mark)!r}\n{SETUP}")
    (source / "nunetbuild.py").write_text("ANSWER = 42\n")
    (source / "PKG-INFO").write_text("Metadata-Version: 2.1\nName: nunetbuild\nVersion: 1.0\n")
    archive = folder / "nunetbuild-1.0.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(source, arcname=source.name)
    return archive


def test_a_dependencys_build_reaches_nothing_of_the_provider(tmp_path: Path) -> None:
    secret = tmp_path / "provider" / "keys" / "identity.key"
    secret.parent.mkdir(parents=True)
    secret.write_text("the provider's key")
    mark = Path("/tmp") / f"nunet-build-probe-{uuid.uuid4().hex}"
    archive = _sdist(tmp_path / "dist", secret, mark)
    # No build isolation: setuptools from the provider's Python (no index in the tests).
    # With sandbox_mode="off" both probes reach their targets (the test fails).
    executor = ProcessExecutor(pip_args=("--no-build-isolation",))
    run = new_run(tmp_path, spec(deps=(f"nunetbuild @ {archive.as_uri()}",)))
    status, lines = run_job(executor, run, "import nunetbuild\nprint(nunetbuild.ANSWER)\n")
    assert status.outcome == "completed", (status, texts(lines))
    assert texts(lines)[-1:] == ["42"]  # the honest part of the dependency still works
    got = json.loads((executor.venv_dir(run) / "probe" / "build.json").read_text())
    assert got["secret"].startswith("denied"), got
    assert not mark.exists()
