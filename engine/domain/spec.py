"""What a consumer asks for: the job spec, its TOML form, validation, and fetching the script.

A job's code comes either from a script URL (http/https, as NuNet's service-provider dashboard
takes it) or from a git repository (url, ref, entry point). Validation collects every problem
with its field name, so a form can show each under its field and the CLI can print them all.
"""

from __future__ import annotations

import math
import re
import tomllib
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import urljoin, urlsplit

import msgspec

from engine.domain.safe_paths import relative_problem, shown
from engine.errors import EngineError, FieldProblem, ValidationReport
from oracle_client.billing import MAX_REPLICAS

FRAMEWORKS = ("pytorch", "tensorflow", "scikit-learn")
DEVICES = ("cpu", "gpu")
TIERS = ("low", "moderate", "high")
GPU_VENDORS = ("nvidia", "amd", "intel")
# NuNet runs GPU jobs for PyTorch and TensorFlow only; scikit-learn has no GPU backend.
GPU_FRAMEWORKS = ("pytorch", "tensorflow")
CPU_ONLY_FRAMEWORKS = ("scikit-learn",)
SCRIPT_SCHEMES = ("http", "https")
GIT_SCHEMES = ("http", "https", "ssh", "git")
MAX_SCRIPT_BYTES = 1 << 20
FETCH_TOTAL_S = 60.0  # the most one script download takes, redirects included
MAX_DEPS = 100
MAX_ENV = 64
MAX_ENV_VALUE = 4096
MAX_EXPECTED_MINUTES = 7 * 24 * 60
KINDS = ("batch", "service")
MAX_INPUTS = 16
# Ports a job may declare for tunnels (engine/jobs/tunnel_provider.py): a notebook, a web UI,
# an API.
MAX_PORTS = 8
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
# Names the executors set themselves, or that would let a job reach into the provider's
# process (loader and interpreter hooks) or our own state (NUNET_*).
_RESERVED_ENV = {
    "HOME",
    "PATH",
    "PYTHONPATH",
    "PYTHONHOME",
    "PYTHONUNBUFFERED",
    "WORKSPACE",
    "REPLICA_INDEX",  # each replica of a step: its index (0..REPLICAS-1) and the count
    "REPLICAS",
    # A distributed step's replica (issue 25 §2, engine/domain/gang.py): torchrun's names.
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
    "GLOO_SOCKET_IFNAME",
    "NCCL_SOCKET_IFNAME",
}
_RESERVED_ENV_PREFIXES = ("NUNET_", "LD_", "DOCKER_", "VIRTUAL_ENV", "KEYRING")
# Names GPU runtimes read to choose a container's or a process's cards: with NVIDIA's as
# Docker's default runtime, NVIDIA_VISIBLE_DEVICES=all in a CPU job's env would hand it every
# GPU of the machine. Cards come only from `device: gpu` and the provider's onboarded list.
_GPU_ENV_PREFIXES = ("NVIDIA_", "CUDA_", "HIP_", "ROCR_", "GPU_")


class GitSource(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    url: str
    entry: str  # the script to run, relative to the repository root
    ref: str = "main"  # branch or tag (cloned shallow)


# Steps (issue 25 §1): run in order in the job's one workspace, each step's replicas at once.
MAX_STEPS = 16
_STEP_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,39}$")


class StepSpec(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One step of a job: a ``command`` (split into words as a shell would, run without
    one), or a Python ``script`` (a path relative to the
    job's code, like git.entry), or neither (the job's own script); ``replicas`` copies of it
    run at once, each with REPLICA_INDEX and REPLICAS in its environment. A ``distributed``
    step's replicas are one gang (issue 25 §2): one per provider, started together, each
    with RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT, joined by the job's overlay."""

    name: str
    command: str | None = None
    script: str | None = None
    replicas: int = 1
    distributed: bool = False


class GangSlot(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Which slot of a gang this job is (set by the consumer's placement, never by hand):
    the gang's id (its overlay's name and subnet), this job's rank, and the gang's size."""

    gang_id: str
    rank: int
    world_size: int


class InputSpec(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Data the job reads, by CID (issue 26): the provider fetches it (bitswap) and verifies it
    before the job starts, and mounts it read-only at ``path`` in the workspace: a folder's
    contents there; a file there, or inside it under its CID when ``path`` ends with "/"."""

    cid: str
    path: str = "data/"


class JobSpec(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One ML job. Exactly one of ``script_url`` and ``git``."""

    framework: str
    script_url: str | None = None
    git: GitSource | None = None
    name: str = ""
    device: str = "cpu"
    tier: str = "low"
    deps: tuple[str, ...] = ()
    expected_minutes: float = 10.0
    budget_ntx: float | None = None  # the most the consumer pays; None: no cap (no check)
    env: dict[str, str] = msgspec.field(default_factory=dict)
    # Relative to /workspace; collected into the results archive when the job ends.
    outputs: tuple[str, ...] = ("outputs",)
    gpu_vendor: str | None = None  # None: any vendor (GPU jobs only)
    # "service": long-running (a web UI, an API, a notebook), ended by `job stop` or at its
    # maximum time (expected_minutes); "batch": a script that ends by itself.
    kind: str = "batch"
    # Ports the job's own service listens on inside its container (127.0.0.1): the only ones
    # its consumer's tunnels may reach.
    ports: tuple[int, ...] = ()
    # Only providers that allow `job shell` (their advert says so): matching excludes others.
    shell: bool = False
    # Billing (issue 12): the provider's resource spec by name (None: the tier's cheapest
    # matching spec) and the maximum time the lock covers (None: expected_minutes).
    resource_spec: str | None = None
    max_minutes: float | None = None
    # Ordered steps sharing the workspace (issue 25 §1); none: the script runs once, as one
    # step with one replica.
    subtasks: tuple[StepSpec, ...] = ()
    # One slot of a distributed step's gang (engine/domain/gang.py); None: not a gang's.
    gang: GangSlot | None = None
    # Data by CID, mounted read-only before the job starts (issue 26); fetching it is not
    # machine time.
    inputs: tuple[InputSpec, ...] = ()
    # The results archive also published by CID (issue 26): kept by the provider, announced
    # in the DHT, fetchable by anyone given the CID (`nunet-tui data get`).
    publish_results: bool = False

    def most_replicas(self) -> int:
        """The most replicas any step runs at once on one provider: what the lock multiplies
        (1 without steps). A distributed step runs one replica a provider (each its gang's
        slot: issue 25 §2)."""
        return max((1 if step.distributed else step.replicas for step in self.subtasks), default=1)


def _problem(problems: list[FieldProblem], field: str, message: str) -> None:
    problems.append(FieldProblem(field, message))


def check_script_url(url: str) -> str | None:
    """Why ``url`` is not a script URL we can fetch, or None."""
    parts = urlsplit(url)
    if parts.scheme not in SCRIPT_SCHEMES:
        shown = parts.scheme or "none"
        return f"unsupported URL scheme {shown!r}: the script URL must be http:// or https://"
    if not parts.hostname:
        return f"{url!r} has no host"
    from engine.domain.fetch_policy import odd_ipv4_problem

    return odd_ipv4_problem(parts.hostname)


def _git_host_problem(url: str) -> str | None:
    from engine.domain.fetch_policy import odd_ipv4_problem

    try:
        host = urlsplit(url).hostname
    except ValueError:
        return f"{url!r} is not a valid URL"
    return odd_ipv4_problem(host) if host else f"{url!r} has no host"


def _check_relative(path: str) -> str | None:
    pure = PurePosixPath(path)
    if not path or path.strip() != path:
        return "must be a non-empty relative path"
    if pure.is_absolute():
        return f"{path!r} is absolute: give a path relative to /workspace"
    if ".." in pure.parts:
        return f"{path!r} leaves the workspace (..)"
    if "\x00" in path:
        return f"{path!r} contains a NUL byte"
    if why := relative_problem(path):  # the one check every path from a peer goes through
        return f"{path!r} {why}"
    return None


# The longest each free-text field may be (characters), and how many of each list. Checked
# first: a spec over them is refused on that alone, so no message ever quotes a huge value.
TEXT_LIMITS = {
    "name": 200,
    "script_url": 2048,
    "git.url": 2048,
    "git.entry": 512,
    "git.ref": 200,
    "framework": 32,
    "device": 32,
    "tier": 32,
    "gpu_vendor": 32,
    "deps": 256,
    "env": 128,  # a variable's name; values are held to MAX_ENV_VALUE
    "outputs": 512,
    "kind": 32,
    "subtasks.name": 40,
    "subtasks.command": 4096,
    "subtasks.script": 512,
}
MAX_OUTPUTS = 64
# Room for every field at its limit; a larger file is not a job description.
MAX_JOB_FILE_BYTES = 16 << 20
MAX_BUDGET_NTX = 1e9


def _size_problems(spec: JobSpec) -> list[FieldProblem]:
    texts: list[tuple[str, str | None]] = [
        ("name", spec.name),
        ("script_url", spec.script_url),
        ("framework", spec.framework),
        ("device", spec.device),
        ("tier", spec.tier),
        ("gpu_vendor", spec.gpu_vendor),
        ("kind", spec.kind),
    ]
    if spec.git is not None:
        texts += [("git.url", spec.git.url), ("git.entry", spec.git.entry)]
        texts.append(("git.ref", spec.git.ref))
    texts += [("deps", dep) for dep in spec.deps[:MAX_DEPS]]
    texts += [("env", name) for name in list(spec.env)[:MAX_ENV]]
    texts += [("outputs", path) for path in spec.outputs[:MAX_OUTPUTS]]
    steps: list[tuple[str, str, str | None]] = []
    for i, step in enumerate(spec.subtasks[:MAX_STEPS]):
        for part in ("name", "command", "script"):
            steps.append((f"subtasks[{i + 1}].{part}", f"subtasks.{part}", getattr(step, part)))
    problems = [
        FieldProblem(
            field, f"{field} is {len(text):,} characters long: at most {TEXT_LIMITS[field]:,}"
        )
        for field, text in texts
        if text is not None and len(text) > TEXT_LIMITS[field]
    ]
    problems += [
        FieldProblem(
            field, f"{field} is {len(text):,} characters long: at most {TEXT_LIMITS[key]:,}"
        )
        for field, key, text in steps
        if text is not None and len(text) > TEXT_LIMITS[key]
    ]
    if len(spec.subtasks) > MAX_STEPS:
        problems.append(
            FieldProblem("subtasks", f"{len(spec.subtasks)} steps: at most {MAX_STEPS}")
        )
    if len(spec.outputs) > MAX_OUTPUTS:
        problems.append(
            FieldProblem("outputs", f"{len(spec.outputs)} output paths: at most {MAX_OUTPUTS}")
        )
    return problems


def validate_spec(spec: JobSpec, *, allow_local_git: bool = False) -> ValidationReport:
    """Every problem with ``spec``, per field. ``allow_local_git`` admits file:// repos (tests,
    the demo on one machine)."""
    if oversized := _size_problems(spec):
        return ValidationReport(tuple(oversized))
    problems: list[FieldProblem] = []
    if (spec.script_url is None) == (spec.git is None):
        _problem(problems, "source", "give either a script URL or a git repository, not both")
    if spec.script_url is not None and (why := check_script_url(spec.script_url)):
        _problem(problems, "script_url", why)
    if spec.git is not None:
        schemes = GIT_SCHEMES + (("file",) if allow_local_git else ())
        scheme = urlsplit(spec.git.url).scheme
        if scheme not in schemes:
            _problem(
                problems,
                "git.url",
                f"unsupported URL scheme {scheme or 'none'!r} for a git repository: "
                f"use one of {', '.join(schemes)}",
            )
        elif scheme != "file" and (why := _git_host_problem(spec.git.url)):
            _problem(problems, "git.url", why)
        if why := _check_relative(spec.git.entry):
            _problem(problems, "git.entry", f"entry point {why}")
        if not re.fullmatch(r"[A-Za-z0-9._/-]{1,200}", spec.git.ref) or spec.git.ref[0] == "-":
            _problem(problems, "git.ref", f"{spec.git.ref!r} is not a branch or tag name")
    if spec.framework not in FRAMEWORKS:
        _problem(
            problems,
            "framework",
            f"unknown framework {spec.framework!r}: one of {', '.join(FRAMEWORKS)}",
        )
    if spec.device not in DEVICES:
        _problem(problems, "device", f"unknown device {spec.device!r}: cpu or gpu")
    elif spec.device == "gpu" and spec.framework in CPU_ONLY_FRAMEWORKS:
        _problem(
            problems,
            "device",
            f"{spec.framework} runs on CPU only: GPU jobs are for pytorch and tensorflow",
        )
    if spec.gpu_vendor is not None:
        if spec.device != "gpu":
            _problem(problems, "gpu_vendor", "a GPU vendor only makes sense with device = gpu")
        elif spec.gpu_vendor not in GPU_VENDORS:
            _problem(
                problems,
                "gpu_vendor",
                f"unknown GPU vendor {spec.gpu_vendor!r}: one of {', '.join(GPU_VENDORS)}",
            )
    if spec.tier not in TIERS:
        _problem(problems, "tier", f"unknown tier {spec.tier!r}: one of {', '.join(TIERS)}")
    if len(spec.deps) > MAX_DEPS:
        _problem(problems, "deps", f"{len(spec.deps)} dependencies: at most {MAX_DEPS}")
    # Imported here: engine.api imports this module (its commands carry a JobSpec), and
    # packaging costs ~50 ms at start-up that only checking a spec needs.
    from packaging.requirements import InvalidRequirement, Requirement

    for dep in spec.deps:
        try:
            requirement = Requirement(dep)
        except InvalidRequirement as exc:
            first = str(exc).splitlines()[0]
            _problem(problems, "deps", f"{dep!r} is not a valid pip requirement: {first}")
            continue
        if requirement.url:
            # pip would fetch it from wherever it points (the provider's loopback or LAN,
            # file:// on its disk), outside the fetch policy: only the package index serves.
            _problem(
                problems,
                "deps",
                f"{shown(dep)} names a URL: give a package of the index by name "
                f"(e.g. {requirement.name}>=1.0)",
            )
    if not 0 < spec.expected_minutes <= MAX_EXPECTED_MINUTES:
        _problem(
            problems,
            "expected_minutes",
            f"expected time must be above 0 and at most {MAX_EXPECTED_MINUTES} minutes "
            f"(7 days), not {spec.expected_minutes:g}",
        )
    if spec.max_minutes is not None and not (
        math.isfinite(spec.max_minutes)
        and spec.expected_minutes <= spec.max_minutes <= MAX_EXPECTED_MINUTES
    ):
        _problem(
            problems,
            "max_minutes",
            f"maximum time must be at least the expected time ({spec.expected_minutes:g} min) "
            f"and at most {MAX_EXPECTED_MINUTES} minutes, not {spec.max_minutes:g}",
        )
    if spec.resource_spec is not None and not 1 <= len(spec.resource_spec) <= 40:
        _problem(problems, "resource_spec", "a resource spec's name is 1 to 40 characters")
    if len(spec.env) > MAX_ENV:
        _problem(problems, "env", f"{len(spec.env)} environment variables: at most {MAX_ENV}")
    for name, value in spec.env.items():
        if not _ENV_NAME.match(name):
            _problem(problems, "env", f"{name!r} is not a valid environment variable name")
        elif name in _RESERVED_ENV or name.upper().startswith(_RESERVED_ENV_PREFIXES):
            _problem(problems, "env", f"{name} is reserved: the provider sets it")
        elif name.upper().startswith(_GPU_ENV_PREFIXES):
            _problem(
                problems,
                "env",
                f"{name} is reserved: GPUs are chosen by the provider for a job with "
                "device: gpu, never by its environment; remove it from env",
            )
        if "\x00" in value or len(value) > MAX_ENV_VALUE:
            _problem(problems, "env", f"the value of {name} is too long or has a NUL byte")
    if not spec.outputs:
        _problem(problems, "outputs", "declare at least one output path (default: outputs)")
    for path in spec.outputs:
        if why := _check_relative(path):
            _problem(problems, "outputs", f"output path {why}")
    if spec.kind not in KINDS:
        _problem(problems, "kind", f"unknown job kind {spec.kind!r}: batch or service")
    if len(spec.ports) > MAX_PORTS:
        _problem(problems, "ports", f"{len(spec.ports)} ports: at most {MAX_PORTS}")
    else:
        for port in spec.ports:
            if not 1 <= port <= 65535:
                _problem(problems, "ports", f"port {port} is not a TCP port (1 to 65535)")
        if len(set(spec.ports)) != len(spec.ports):
            _problem(problems, "ports", "a port is declared twice")
    problems += step_problems(spec)
    problems += input_problems(spec)
    # A budget is not checked against the static estimate (engine/domain/tiers.py static_units, a
    # hint the submit form shows): a provider at 0.01 NTX/h would charge 0.01 where the
    # estimate says 0.375. The matcher and the provider check it against each provider's real
    # price (admission.judge: "price above budget"), the one price model (issue 20 §7).
    # NaN compares false with everything: unchecked, it would remove the cap.
    budget = spec.budget_ntx
    if budget is not None and not (math.isfinite(budget) and 0 < budget <= MAX_BUDGET_NTX):
        _problem(
            problems,
            "budget_ntx",
            f"budget_ntx must be a number above 0 and at most {MAX_BUDGET_NTX:,.0f} NTX, "
            f"not {budget:g}",
        )
    return ValidationReport(tuple(problems))


def _command_problem(command: str) -> str | None:
    """Why ``command`` cannot run: it is split into words as a shell would, and run without
    a shell (no pipes, redirects or variables: a script does those)."""
    import shlex

    if "\x00" in command:
        return "the command has a NUL byte"
    try:
        words = shlex.split(command)
    except ValueError as exc:
        return f"the command cannot be split into words ({exc}): check its quotes"
    if not words:
        return "the command is empty: give one, or leave it out to run the job's script"
    return None


def step_problems(spec: JobSpec) -> list[FieldProblem]:
    """What is wrong with the spec's steps, each under its field (``subtasks[2].replicas``)."""
    problems: list[FieldProblem] = []

    def _problem(problems: list[FieldProblem], field: str, message: str) -> None:
        # Named in the text too: the CLI prints only the messages, and "step 3" is which.
        problems.append(FieldProblem(field, f"{field}: {message}"))

    seen: set[str] = set()
    for i, step in enumerate(spec.subtasks, start=1):
        field = f"subtasks[{i}]"
        if not _STEP_NAME.match(step.name):
            _problem(
                problems,
                f"{field}.name",
                f"{step.name!r} is not a step name: 1 to 40 letters, digits, '_', '.' or '-', "
                "starting with a letter or digit",
            )
        elif step.name in seen:
            _problem(problems, f"{field}.name", f"step {step.name!r} is named twice")
        seen.add(step.name)
        if step.command is not None and step.script is not None:
            _problem(problems, field, "give a step either a command or a script, not both")
        if step.command is not None and (why := _command_problem(step.command)):
            _problem(problems, f"{field}.command", why)
        if step.script is not None and (why := _check_relative(step.script)):
            _problem(problems, f"{field}.script", f"script {why}")
        if not 1 <= step.replicas <= MAX_REPLICAS:
            _problem(
                problems,
                f"{field}.replicas",
                f"replicas must be 1 to {MAX_REPLICAS}, not {step.replicas}",
            )
    if spec.subtasks and spec.kind == "service":
        _problem(problems, "subtasks", "a service runs as one process: steps are for batch jobs")
    problems.extend(gang_problems(spec))
    return problems


GANG_ID = re.compile(r"^[0-9a-f]{1,32}$")


def gang_problems(spec: JobSpec) -> list[FieldProblem]:
    """What is wrong with the spec's distributed step and its gang slot (issue 25 §2)."""
    from engine.domain.gang import MAX_GANG

    problems: list[FieldProblem] = []
    distributed = [i for i, step in enumerate(spec.subtasks, start=1) if step.distributed]
    if len(distributed) > 1:
        _problem(
            problems,
            f"subtasks[{distributed[1]}].distributed",
            f"subtasks[{distributed[1]}].distributed: one distributed step a job (step "
            f"{distributed[0]} is one already): make it a job of its own",
        )
    for i in distributed[:1]:
        replicas = spec.subtasks[i - 1].replicas
        if not 2 <= replicas <= MAX_GANG:
            field = f"subtasks[{i}].replicas"
            _problem(
                problems,
                field,
                f"{field}: a distributed step runs 2 to {MAX_GANG} replicas (one a provider), "
                f"not {replicas}",
            )
    gang = spec.gang
    if gang is None:
        return problems
    if not distributed:
        _problem(problems, "gang", "gang: only a job with a distributed step is a gang's slot")
        return problems
    if not GANG_ID.match(gang.gang_id):
        _problem(problems, "gang.gang_id", "gang.gang_id: 1 to 32 lowercase hex digits")
    world = spec.subtasks[distributed[0] - 1].replicas
    if gang.world_size != world:
        _problem(
            problems,
            "gang.world_size",
            f"gang.world_size: {gang.world_size}, but the distributed step has {world} replicas",
        )
    if not 0 <= gang.rank < min(world, gang.world_size):
        _problem(problems, "gang.rank", f"gang.rank: 0 to {world - 1}, not {gang.rank}")
    return problems


def input_problems(spec: JobSpec) -> list[FieldProblem]:
    """What is wrong with the spec's inputs, each under its field (``inputs[2].cid``)."""
    from engine.domain.cid import Cid, CidError

    problems: list[FieldProblem] = []
    if len(spec.inputs) > MAX_INPUTS:
        return [FieldProblem("inputs", f"{len(spec.inputs)} inputs: at most {MAX_INPUTS}")]
    paths: list[PurePosixPath] = []
    for i, item in enumerate(spec.inputs, start=1):
        field = f"inputs[{i}]"
        try:
            Cid.parse(item.cid)
        except CidError as exc:
            problems.append(FieldProblem(f"{field}.cid", f"{field}.cid: {exc}"))
        if why := _check_relative(item.path):
            problems.append(FieldProblem(f"{field}.path", f"{field}.path: {why}"))
            continue
        path = PurePosixPath(item.path.rstrip("/"))
        if any(path == p or path in p.parents or p in path.parents for p in paths):
            problems.append(
                FieldProblem(f"{field}.path", f"{field}.path: {item.path!r} overlaps another input")
            )
        paths.append(path)
    return problems


# Fields added after the first release: left out of an Offer at their defaults, so providers
# that predate them (JobSpec forbids unknown fields) still take the jobs they can run.
_NEWER_FIELDS = {
    "kind": "batch",
    "ports": (),
    "shell": False,
    "resource_spec": None,
    "max_minutes": None,
    "subtasks": (),
    "gang": None,
    "inputs": (),
    "publish_results": False,
}


def offer_spec(spec: JobSpec) -> dict[str, Any]:
    """The spec as an Offer carries it."""
    data: dict[str, Any] = msgspec.to_builtins(spec)
    for name, default in _NEWER_FIELDS.items():
        if getattr(spec, name) == default:
            data.pop(name, None)
    for step in data.get("subtasks", ()):
        if not step.get("distributed"):
            step.pop("distributed", None)
    return data


def load_job_file(path: str | Path, *, base_url: str | None = None) -> JobSpec:
    """A JobSpec from a TOML file (``job submit -f job.toml``), validated.

    A relative ``script_url`` ("train.py") is resolved against ``base_url`` when given: the
    demo serves examples/jobs over HTTP and loads their job.toml this way.
    """
    file = Path(path)
    try:
        with open(file, "rb") as handle:
            data = handle.read(MAX_JOB_FILE_BYTES + 1)
    except OSError as exc:
        raise EngineError("job_file", f"cannot read {file}: {exc.strerror or exc}") from exc
    if len(data) > MAX_JOB_FILE_BYTES:
        raise EngineError("job_file", f"{file} is over {MAX_JOB_FILE_BYTES >> 20} MiB: not a job")
    try:
        raw: dict[str, Any] = tomllib.loads(data.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise EngineError("job_file", f"{file} is not valid TOML: {exc}") from exc
    except RecursionError:
        raise EngineError("job_file", f"{file} is nested too deeply to be a job") from None
    url = raw.get("script_url")
    if isinstance(url, str) and not urlsplit(url).scheme:
        if base_url is None:
            raise EngineError(
                "job_file",
                f"{file}: script_url {url!r} is relative: give a full http(s) URL",
            )
        raw["script_url"] = urljoin(base_url, url)
    try:
        spec = msgspec.convert(raw, JobSpec)
    except msgspec.ValidationError as exc:
        raise EngineError("job_file", f"{file}: {exc}") from exc
    validate_spec(spec).raise_if_failed("invalid_job")
    return spec
