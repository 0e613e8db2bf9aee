"""``nunet-tui job …``: submit, list, show, logs (-f), results, cancel."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from engine import api
from engine.client import EngineClient
from engine.safe_text import safe
from nunet_tui.cli.output import show, show_json

FOLLOW_POLL_S = 0.2


def add_parsers(sub: Any, common: argparse.ArgumentParser) -> None:
    job = sub.add_parser("job", help="ML jobs: submit, follow, fetch results")
    job_sub = job.add_subparsers(dest="job_command", metavar="JOB_COMMAND", required=True)
    submit = job_sub.add_parser("submit", parents=[common], help="run a job on a matching peer")
    submit.add_argument("-f", "--file", help="job.toml describing the job")
    submit.add_argument(
        "--base-url", metavar="URL", help="resolve a relative script_url in the file against URL"
    )
    submit.add_argument("--url", help="the Python script (http/https)")
    submit.add_argument("--framework", choices=("pytorch", "tensorflow", "scikit-learn"))
    submit.add_argument("--device", choices=("cpu", "gpu"), default="cpu")
    submit.add_argument("--tier", choices=("low", "moderate", "high"), default="low")
    submit.add_argument("--dep", action="append", default=[], metavar="PKG")
    submit.add_argument("--expected-minutes", type=float, default=10.0, metavar="N")
    submit.add_argument("--budget", type=float, metavar="NTX")
    submit.add_argument("--name", default="")
    submit.add_argument("--peer", metavar="ID", help="pick the provider by hand")
    job_sub.add_parser("list", parents=[common], help="jobs, both roles")
    job_sub.add_parser("show", parents=[common], help="one job").add_argument("job_id")
    logs = job_sub.add_parser("logs", parents=[common], help="a job's output")
    logs.add_argument("job_id")
    logs.add_argument("-f", "--follow", action="store_true", help="keep printing new lines")
    results = job_sub.add_parser("results", parents=[common], help="unpack a job's results")
    results.add_argument("job_id")
    results.add_argument("-o", "--out", required=True, metavar="DIR")
    job_sub.add_parser("cancel", parents=[common], help="stop a job").add_argument("job_id")
    from nunet_tui.cli import job_tunnel  # forward, shell, stop

    job_tunnel.add_parsers(job_sub, common)


def _spec(args: argparse.Namespace) -> dict[str, Any]:
    if args.file:
        from engine.jobs.spec import load_job_file

        return api.to_builtins(load_job_file(args.file, base_url=args.base_url))
    if not args.url or not args.framework:
        raise SystemExit("nunet-tui job submit: give -f FILE, or --url and --framework")
    spec: dict[str, Any] = {
        "script_url": args.url,
        "framework": args.framework,
        "device": args.device,
        "tier": args.tier,
        "deps": args.dep,
        "expected_minutes": args.expected_minutes,
        "name": args.name,
    }
    if args.budget is not None:
        spec["budget_ntx"] = args.budget
    _check_spec(spec)
    return spec


def _check_spec(spec: dict[str, Any]) -> None:
    """Refuse a bad spec here, naming its field: a daemon would refuse it too, but a huge one
    (a 10 MB name) would not even fit in a control-socket line."""
    import msgspec

    from engine.errors import EngineError
    from engine.jobs.spec import JobSpec, validate_spec

    try:
        parsed = msgspec.convert(spec, JobSpec)
    except msgspec.ValidationError as exc:
        raise EngineError("invalid_job", f"bad job: {str(exc)[:300]}") from None
    validate_spec(parsed).raise_if_failed("invalid_job")


def _submit(args: argparse.Namespace, client: EngineClient) -> api.JobInfo:
    command = api.SubmitJob(spec=_spec(args), peer_id=args.peer)
    return client.call_blocking(command, timeout=120)


def _results(args: argparse.Namespace, client: EngineClient) -> api.JobResults:
    # The daemon has its own working directory: a relative -o means the caller's.
    out_dir = Path(args.out).expanduser().resolve()
    return client.call_blocking(
        api.FetchJobResults(job_id=args.job_id, out_dir=str(out_dir)), timeout=300
    )


def _logs(args: argparse.Namespace, client: EngineClient) -> None:
    after = -1
    while True:
        chunk: api.JobLogs = client.call_blocking(
            api.GetJobLogs(job_id=args.job_id, after_seq=after)
        )
        for line in chunk.lines:
            if getattr(args, "json", False):
                show_json(api.to_builtins(line), indent=None)
            else:
                show(safe(line.text), file=sys.stderr if line.stream == "stderr" else sys.stdout)
        sys.stdout.flush()
        after = chunk.next_seq
        if not args.follow or (chunk.done and not chunk.lines):
            return None
        if not chunk.lines:
            time.sleep(FOLLOW_POLL_S)


RUNNERS = {
    "job submit": _submit,
    "job list": lambda a, c: c.call_blocking(api.ListJobs()),
    "job show": lambda a, c: c.call_blocking(api.GetJob(job_id=a.job_id)),
    "job logs": _logs,
    "job results": _results,
    "job cancel": lambda a, c: c.call_blocking(api.CancelJob(job_id=a.job_id), timeout=60),
}


def _tunnel_runners() -> dict[str, Any]:
    from nunet_tui.cli.job_tunnel import RUNNERS as TUNNEL_RUNNERS

    return TUNNEL_RUNNERS


RUNNERS.update(_tunnel_runners())


def to_text(result: Any) -> str | None:
    if isinstance(result, api.JobList):
        if not result.jobs:
            return "no jobs yet: `nunet-tui job submit -f job.toml`"
        return "\n".join(_row(job) for job in result.jobs)
    if isinstance(result, api.JobInfo):
        return _detail(result)
    if isinstance(result, api.JobResults):
        lines = [f"results of {result.job_id} in {result.directory} (sha256 {result.sha256[:16]}…)"]
        lines += [f"  {safe(name)}" for name in result.files]
        return "\n".join(lines)
    return None


def _row(job: api.JobInfo) -> str:
    name = safe(str(job.spec.get("name") or job.spec.get("script_url") or ""))[:40]
    other = job.provider if job.role == "consumer" else job.consumer
    return f"{job.job_id}  {job.role:<8}  {job.state:<11}  {other[-8:]}  {name}"


def _detail(job: api.JobInfo) -> str:
    lines = [
        f"job {job.job_id} ({job.role}): {job.state}"
        + (f" · resumed from checkpoint {job.resumed_from}" if job.resumed_from else ""),
        f"  provider  {job.provider}",
        f"  consumer  {job.consumer}",
        f"  script    {safe(str(job.spec.get('script_url') or job.spec.get('git')))}",
        f"  runs as   {job.spec.get('framework')} · {job.spec.get('device')} · "
        f"{job.spec.get('tier')} tier · {job.executor or '?'} executor",
    ]
    if job.quoted_ntx is not None:
        lines.append(f"  price     {job.quoted_ntx:.2f} NTX quoted ({job.price_ntx_hour} NTX/h)")
    if job.reason:
        lines.append(f"  reason    {safe(job.reason)}")
    if job.exit_code is not None:
        lines.append(f"  exit code {job.exit_code}")
    if job.metering is not None:
        m = job.metering
        lines.append(
            f"  metering  {m.wall_s:.1f} s wall, {m.cpu_s:.1f} s CPU ({m.mticks:.0f} MTicks), "
            f"{m.ram_mb_s:.0f} MB·s, peak {m.peak_ram_mb:.0f} MB, cost {m.cost_ntx:.4f} NTX"
        )
    lines.append(f"  log       {job.log_lines} lines (`nunet-tui job logs {job.job_id} -f`)")
    if job.results_sha256:
        lines.append(f"  results   {job.results_size:,} bytes, sha256 {job.results_sha256[:16]}…")
    return "\n".join(lines)
