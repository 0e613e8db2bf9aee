"""engine/domain/safe_paths.py: every path built from a peer's name stays under its root."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

import msgspec
import pytest

from engine.domain.safe_paths import (
    JobId,
    check_job_id,
    child,
    inside,
    is_job_id,
    job_dir,
    real_dir,
    relative_problem,
)
from engine.errors import EngineError

BAD_IDS = [
    "",
    "../../../../tmp/x",
    "x/../abcdefabcdef",
    "/etc/passwd",
    "abcdefabcde\x00",
    "abcdefabcdef\n",  # "$" in a regex lets this one through
    "ABCDEFABCDEF",
    "abcdefabcde\uff10",  # a fullwidth zero: looks like a digit, is not one
    "abcdefabcde\u0430",  # Cyrillic a
    "a" * 65,
    "abcdefabcdef0",
    "..",
]


def test_generated_ids_are_job_ids() -> None:
    for _ in range(100):
        assert is_job_id(secrets.token_hex(6))


@pytest.mark.parametrize("value", BAD_IDS)
def test_bad_job_ids_are_refused_everywhere(value: str, tmp_path: Path) -> None:
    assert not is_job_id(value)
    with pytest.raises(EngineError, match="12 lowercase hex digits"):
        check_job_id(value)
    with pytest.raises(EngineError):
        job_dir(tmp_path, value)

    class Message(msgspec.Struct):
        job_id: JobId

    with pytest.raises(msgspec.ValidationError):
        msgspec.msgpack.decode(msgspec.msgpack.encode({"job_id": value}), type=Message)
    assert list(tmp_path.iterdir()) == []


def test_job_dir_is_under_the_root(tmp_path: Path) -> None:
    assert job_dir(tmp_path, "0123456789ab") == tmp_path / "0123456789ab"


@pytest.mark.parametrize(
    "name", ["", ".", "..", "../x", "a/b", "/abs", "a\x00b", ".hidden", "a\nb", "x" * 129]
)
def test_child_refuses_anything_but_one_plain_name(name: str, tmp_path: Path) -> None:
    with pytest.raises(EngineError) as info:
        child(tmp_path, name, what="name")
    assert info.value.code == "unsafe_path" and "\n" not in info.value.message


def test_child_refuses_a_link_even_one_that_points_inside(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "inner").symlink_to(tmp_path / "real")
    (tmp_path / "outer").symlink_to("/etc")
    for name in ("inner", "outer"):
        with pytest.raises(EngineError, match="symbolic link"):
            child(tmp_path, name, what="job id")


def test_a_link_in_the_root_itself_is_ours_and_followed(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    root = tmp_path / "root-link"
    root.symlink_to(real)
    assert child(root, "workspace", what="folder") == root / "workspace"
    assert inside(root, "outputs/metrics.json", what="output") == root / "outputs/metrics.json"


@pytest.mark.parametrize(
    "rel",
    [
        "",
        "/etc/passwd",
        "..",
        "../x",
        "a/../../x",
        "a//b",
        "./a",
        "a\x00",
        " a",
        "a\\..\\b",
        "a/\u202eb",
        "x" * 300,
    ],
)
def test_inside_refuses_paths_that_could_leave(rel: str, tmp_path: Path) -> None:
    assert relative_problem(rel) is not None
    with pytest.raises(EngineError):
        inside(tmp_path, rel, what="output path")


def test_inside_refuses_a_link_anywhere_on_the_way(tmp_path: Path) -> None:
    (tmp_path / "keys").mkdir()
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    (workspace / "leak").symlink_to("../keys")
    with pytest.raises(EngineError, match="leak is a symbolic link"):
        inside(workspace, "leak/identity.key", what="output path")
    (workspace / "outputs").mkdir()
    assert inside(workspace, "outputs/", what="output path") == workspace / "outputs"
    assert inside(workspace, "outputs/new/file.txt", what="x") == workspace / "outputs/new/file.txt"


def test_real_dir(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "f").write_text("x")
    (tmp_path / "l").symlink_to(tmp_path / "d")
    assert real_dir(tmp_path / "d", what="workspace") == tmp_path / "d"
    assert real_dir(tmp_path / "missing", what="workspace") == tmp_path / "missing"
    with pytest.raises(EngineError, match="symbolic link"):
        real_dir(tmp_path / "l", what="workspace")
    with pytest.raises(EngineError, match="not a folder"):
        real_dir(tmp_path / "f", what="workspace")


@pytest.mark.skipif(os.getuid() != 0, reason="the executor chowns only when the provider is root")
@pytest.mark.docker  # DockerExecutor() connects to the engine of DOCKER_HOST
def test_the_docker_executor_chowns_only_the_workspace_itself(tmp_path: Path) -> None:
    from engine.domain.spec import JobSpec
    from engine.jobs.executors.base import JobRun, limits_for
    from engine.jobs.executors.docker import DockerExecutor
    from engine.resources.container_host import ContainerFacts

    outside = tmp_path / "keys"
    outside.mkdir()
    (outside / "identity.key").write_text("secret")
    workspace = tmp_path / "job" / "workspace"
    (workspace / "outputs").mkdir(parents=True)
    (workspace / "outputs" / "m.json").write_text("{}")
    (workspace / "leak").symlink_to(outside)  # what a job may leave behind
    (workspace / "outputs" / "key").symlink_to(outside / "identity.key")
    spec = JobSpec(framework="pytorch", script_url="http://127.0.0.1/x.py")
    run = JobRun("0123456789ab", spec, workspace, limits_for(spec))
    DockerExecutor(container_host=ContainerFacts())._chown(run)
    assert workspace.stat().st_uid == 65534
    assert (workspace / "outputs" / "m.json").stat().st_uid == 65534
    assert (workspace / "leak").lstat().st_uid == 65534  # the link itself, not its target
    assert outside.stat().st_uid == 0 and (outside / "identity.key").stat().st_uid == 0

    linked = tmp_path / "linked" / "workspace"
    linked.parent.mkdir()
    linked.symlink_to(outside)  # a workspace that is itself a link is never used
    run = JobRun("0123456789ab", spec, linked, limits_for(spec))
    with pytest.raises(EngineError, match="symbolic link"):
        DockerExecutor(container_host=ContainerFacts())._chown(run)
    with pytest.raises(EngineError, match="symbolic link"):
        DockerExecutor._workspace_source(run)
    assert outside.stat().st_uid == 0
