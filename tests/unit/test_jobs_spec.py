"""Job specs: validation per field, job.toml files, and fetching the script over real HTTP."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from engine.domain.spec import GitSource, JobSpec, load_job_file, validate_spec
from engine.errors import EngineError
from engine.jobs.script_fetch import fetch_script
from tests.conftest import LOOPBACK_FETCH, REPO

URL = "https://example.org/train.py"


def spec(**fields: object) -> JobSpec:
    values: dict[str, object] = {"framework": "pytorch", "script_url": URL}
    values.update(fields)
    return JobSpec(**values)  # type: ignore[arg-type]


def problems(job: JobSpec, field: str) -> list[str]:
    return validate_spec(job).for_field(field)


def test_a_plain_job_is_valid() -> None:
    assert validate_spec(spec()).ok
    assert validate_spec(spec(device="gpu", gpu_vendor="amd", tier="high", budget_ntx=50)).ok


def test_each_problem_is_named_for_its_field() -> None:
    assert problems(spec(script_url="ftp://host/x.py"), "script_url") == [
        "unsupported URL scheme 'ftp': the script URL must be http:// or https://"
    ]
    assert problems(spec(framework="scikit-learn", device="gpu"), "device") == [
        "scikit-learn runs on CPU only: GPU jobs are for pytorch and tensorflow"
    ]
    [dep] = problems(spec(deps=("numpy>=1", "not a requirement!")), "deps")
    assert dep.startswith("'not a requirement!' is not a valid pip requirement")
    assert problems(spec(framework="jax"), "framework")
    assert problems(spec(tier="huge"), "tier")
    assert problems(spec(expected_minutes=0), "expected_minutes")
    assert problems(spec(gpu_vendor="nvidia"), "gpu_vendor")  # on a CPU job
    assert problems(spec(script_url=None), "source")
    assert problems(spec(git=GitSource(url="https://h/r.git", entry="a.py")), "source")


def test_a_budget_below_the_static_estimate_is_valid() -> None:
    """Issue 20 §7: the static estimate (6-12 NTX here) is a hint; a budget is checked against
    each provider's real price (tests/unit/test_jobs_matching.py)."""
    assert problems(spec(tier="high", expected_minutes=120, budget_ntx=1), "budget_ntx") == []
    assert problems(spec(budget_ntx=0), "budget_ntx")  # still a positive number


def test_env_names_and_reserved_ones() -> None:
    assert problems(spec(env={"EPOCHS": "3"}), "env") == []
    assert problems(spec(env={"1BAD": "x"}), "env") == [
        "'1BAD' is not a valid environment variable name"
    ]
    assert problems(spec(env={"NUNET_HOME": "/"}), "env") == [
        "NUNET_HOME is reserved: the provider sets it"
    ]
    assert problems(spec(env={"LD_PRELOAD": "x"}), "env")
    assert problems(spec(env={"NVIDIA_VISIBLE_DEVICES": "all"}), "env") == [
        "NVIDIA_VISIBLE_DEVICES is reserved: GPUs are chosen by the provider for a job with "
        "device: gpu, never by its environment; remove it from env"
    ]


def test_outputs_stay_in_the_workspace() -> None:
    assert problems(spec(outputs=("/etc",)), "outputs") == [
        "output path '/etc' is absolute: give a path relative to /workspace"
    ]
    assert problems(spec(outputs=("outputs/../../x",)), "outputs") == [
        "output path 'outputs/../../x' leaves the workspace (..)"
    ]


def test_git_sources() -> None:
    good = spec(
        script_url=None, git=GitSource(url="https://h/r.git", entry="src/train.py", ref="v1")
    )
    assert validate_spec(good).ok
    local = spec(script_url=None, git=GitSource(url="file:///srv/repo", entry="t.py"))
    assert validate_spec(local).for_field("git.url")
    assert validate_spec(local, allow_local_git=True).ok
    bad = spec(
        script_url=None, git=GitSource(url="https://h/r", entry="../t.py", ref="--upload-pack=x")
    )
    assert validate_spec(bad).for_field("git.entry") and validate_spec(bad).for_field("git.ref")


def test_example_job_files_load(tmp_path: Path) -> None:
    for name in ("iris", "pytorch_checkpoint", "tensor_shape_error"):
        job = load_job_file(
            REPO / "examples" / "jobs" / name / "job.toml", base_url="http://h:1/x/"
        )
        assert job.script_url is not None and job.script_url.startswith("http://h:1/x/")
    with pytest.raises(EngineError, match="relative"):
        load_job_file(REPO / "examples" / "jobs" / "iris" / "job.toml")


def test_job_file_errors(tmp_path: Path) -> None:
    path = tmp_path / "job.toml"
    path.write_text('framework = "scikit-learn"\nscript_url = "https://h/x.py"\ndevice = "gpu"\n')
    with pytest.raises(EngineError) as info:
        load_job_file(path)
    assert info.value.code == "invalid_job"
    assert [p.field for p in info.value.problems] == ["device"]
    path.write_text("framework = [")
    with pytest.raises(EngineError, match="not valid TOML"):
        load_job_file(path)
    path.write_text('framework = "pytorch"\nscript_url = "https://h/x.py"\ncolour = 1\n')
    with pytest.raises(EngineError, match="colour"):
        load_job_file(path)


class _Handler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def server(tmp_path: Path) -> Iterator[str]:
    (tmp_path / "ok.py").write_text("print('hello')\n")
    (tmp_path / "empty.py").write_text("  \n")
    (tmp_path / "big.py").write_text("#" * 5000)
    (tmp_path / "binary.py").write_bytes(b"\x89PNG\xff\xfe\x00\x01")

    def handler(*args: object) -> _Handler:
        return _Handler(*args, directory=str(tmp_path))  # type: ignore[arg-type]

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)  # type: ignore[arg-type]
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_fetch_script(server: str) -> None:
    assert fetch_script(f"{server}/ok.py", policy=LOOPBACK_FETCH) == b"print('hello')\n"
    cases = {
        "missing.py": "(404 not found)",
        "empty.py": "is empty",
        "big.py": "too big (5000 bytes; the limit is 1000)",
        "binary.py": "not a text (UTF-8) Python script",
    }
    for name, expected in cases.items():
        with pytest.raises(EngineError) as info:
            fetch_script(f"{server}/{name}", max_bytes=1000, policy=LOOPBACK_FETCH)
        assert expected in info.value.message
        assert info.value.code == "script_fetch"


def test_fetch_script_unreachable_and_bad_scheme() -> None:
    with pytest.raises(EngineError, match=r"cannot reach http://127\.0\.0\.1:9/x\.py"):
        fetch_script("http://127.0.0.1:9/x.py", timeout=2, policy=LOOPBACK_FETCH)
    with pytest.raises(EngineError, match="unsupported URL scheme 'file'"):
        fetch_script("file:///etc/passwd")
