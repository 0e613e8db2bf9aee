"""``nunet-tui job …``: submit, list, show, logs (-f), results, cancel."""

from __future__ import annotations

import argparse
import itertools
import secrets
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine import api
from engine.client import EngineClient
from engine.domain.safe_text import safe
from engine.identity import short_peer_id
from nunet_tui.cli.output import bounded_int, show, show_json
from nunet_tui.viewmodels.money import job_figures, price_text, summary
from nunet_tui.viewmodels.refund import refund_now
from nunet_tui.viewmodels.steps import replica_rows, steps_summary
from nunet_tui.viewmodels.usage import usage_line

if TYPE_CHECKING:
    from engine.domain.spec import JobSpec

FOLLOW_POLL_S = 0.2
MAX_TAIL = 50_000  # what the engine hands out in one reply
# Names users type (and the TUI shows) for the frameworks a spec names.
FRAMEWORK_ALIASES = {
    "pytorch": "pytorch",
    "torch": "pytorch",
    "tensorflow": "tensorflow",
    "tf": "tensorflow",
    "keras": "tensorflow",
    "scikit-learn": "scikit-learn",
    "sklearn": "scikit-learn",
    "scikit_learn": "scikit-learn",
    "scikitlearn": "scikit-learn",
}


class UsageError(Exception):
    """The command line itself was wrong: one line, exit status 2 (as argparse's own)."""


def framework(text: str) -> str:
    """An argparse type: a framework by any common name (sklearn, torch, tf, …)."""
    name = FRAMEWORK_ALIASES.get(text.strip().lower().replace(" ", "-"))
    if name is None:
        known = ", ".join(sorted(FRAMEWORK_ALIASES))
        raise argparse.ArgumentTypeError(f"unknown framework {text[:40]!r}: one of {known}")
    return name


def add_parsers(sub: Any, common: argparse.ArgumentParser) -> None:
    job = sub.add_parser("job", help="ML jobs: submit, follow, fetch results")
    job_sub = job.add_subparsers(dest="job_command", metavar="JOB_COMMAND", required=True)
    submit = job_sub.add_parser(
        "submit",
        parents=[common],
        help="run a job on a matching peer",
        epilog=FOLLOW_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    submit.add_argument("-f", "--file", help="job.toml describing the job")
    submit.add_argument(
        "--base-url", metavar="URL", help="resolve a relative script_url in the file against URL"
    )
    submit.add_argument("--url", help="the Python script (http/https)")
    submit.add_argument(
        "--framework",
        type=framework,
        metavar="NAME",
        help="pytorch (torch), tensorflow (tf, keras) or scikit-learn (sklearn)",
    )
    submit.add_argument("--device", choices=("cpu", "gpu"), default="cpu")
    submit.add_argument("--tier", choices=("low", "moderate", "high"), default="low")
    submit.add_argument("--dep", action="append", default=[], metavar="PKG")
    submit.add_argument("--expected-minutes", type=float, default=10.0, metavar="N")
    submit.add_argument(
        "--max-minutes",
        type=float,
        metavar="N",
        help="the most it may run: the lock covers it, and it is stopped then",
    )
    submit.add_argument("--budget", type=float, metavar="NTX")
    submit.add_argument(
        "--spec",
        metavar="NAME",
        help="the provider's resource spec (default: the tier's cheapest you may use)",
    )
    submit.add_argument("--name", default="")
    submit.add_argument(
        "--step",
        action="append",
        default=[],
        metavar="'NAME x N: COMMAND'",
        help="a step of the job, in order (repeat it); x N: replicas run at once, each with "
        "REPLICA_INDEX and REPLICAS set; 'x N distributed': a gang, one replica a provider "
        "with RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT (torch.distributed); no command: "
        "the job's script; '@path': a script",
    )
    submit.add_argument(
        "--input",
        action="append",
        default=[],
        metavar="CID[:PATH]",
        help="data by CID the provider fetches and mounts read-only at PATH in the workspace "
        "(default data/; repeat it); add it first with `nunet-tui data add`",
    )
    submit.add_argument(
        "--publish-results",
        action="store_true",
        default=None,
        help="the provider also publishes the results archive by CID (job show says it; "
        "anyone with it can `nunet-tui data get` it)",
    )
    submit.add_argument(
        "--min-score",
        type=_score,
        metavar="0..1",
        help="only providers whose record with you scores this much (`peer list` shows it); "
        "one with no history with you is passed over too",
    )
    submit.add_argument(
        "--no-queue",
        action="store_true",
        help="fail at once when no provider can take it now (default: it waits in the queue)",
    )
    submit.add_argument(
        "--queue-timeout",
        type=bounded_int(1, 10080),
        default=60,
        metavar="MIN",
        help="how long a queued job waits for a provider (default 60 minutes, at most 10080)",
    )
    submit.add_argument("--peer", metavar="ID", help="pick the provider by hand")
    _add_submit_flags(submit)
    resubmit = job_sub.add_parser(
        "resubmit",
        parents=[common],
        help="submit a finished job's spec again, as a new job",
        description="Submit a finished job (completed, failed, cancelled...) again with the\n"
        "same spec: a new job with its own id, quote and lock; the old one stays as it\n"
        "ended. A job still running is refused: wait for its end or cancel it first.",
        epilog=FOLLOW_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    resubmit.add_argument("job_id")
    resubmit.add_argument(
        "--provider",
        metavar="PEER",
        help="run it on this provider (default: matching chooses, as for a new job)",
    )
    _add_submit_flags(resubmit)
    job_sub.add_parser("list", parents=[common], help="jobs, both roles")
    job_sub.add_parser("show", parents=[common], help="one job").add_argument("job_id")
    logs = job_sub.add_parser("logs", parents=[common], help="a job's output")
    logs.add_argument("job_id")
    logs.add_argument(
        "-f",
        "--follow",
        action="store_true",
        help="keep printing new lines until the job ends; exits 1 if it did not complete "
        "(with --json: one JSON object per line, NDJSON)",
    )
    logs.add_argument(
        "-n",
        "--tail",
        type=_tail,
        metavar="N",
        help=f"only the last N lines so far (1 to {MAX_TAIL:,})",
    )
    results = job_sub.add_parser("results", parents=[common], help="unpack a job's results")
    results.add_argument("job_id")
    results.add_argument("-o", "--out", required=True, metavar="DIR")
    job_sub.add_parser("cancel", parents=[common], help="stop a job").add_argument("job_id")
    from nunet_tui.cli import job_tunnel  # forward, shell, stop

    job_tunnel.add_parsers(job_sub, common)


# What `job submit --follow` and `job resubmit --follow` exit with: the job's own end, so a
# script can branch on it (`nunet-tui job submit -f job.toml --follow && next-step`).
EXIT_FAILED_NO_CODE = 70  # failed before its script returned a code (EX_SOFTWARE)
EXIT_REFUSED = 69  # no provider ran it (EX_UNAVAILABLE)
EXIT_TIMEOUT = 124  # as timeout(1)
EXIT_CANCELLED = 75  # EX_TEMPFAIL: its consumer stopped it (130 stays Ctrl-C's, ours)
EXIT_OOM = 137  # 128 + SIGKILL: killed at its memory limit
EXIT_INTERRUPTED = 143  # 128 + SIGTERM: its provider went away or shut down
END_EXIT_CODES = {
    "refused": EXIT_REFUSED,
    "timeout": EXIT_TIMEOUT,
    "cancelled": EXIT_CANCELLED,
    "oom": EXIT_OOM,
    "interrupted": EXIT_INTERRUPTED,
}
FOLLOW_EPILOG = f"""\
with --follow: the job's log on stdout as it comes (--json: one JSON object per line: the
submitted job, each log line, then the ended job), its end on stderr, and its end as the
exit status:
  0      completed
  1-255  failed: the job's own exit code (its script's)
  {EXIT_FAILED_NO_CODE}     failed without an exit code (its script never returned one)
  {EXIT_REFUSED}     refused (no provider ran it)
  {EXIT_CANCELLED}     cancelled (`job cancel`, or x in the TUI's job view)
  {EXIT_TIMEOUT}    timeout (it ran past its maximum time)
  {EXIT_OOM}    oom (killed at its memory limit)
  {EXIT_INTERRUPTED}    interrupted (its provider went away or shut down)
Before the job exists the command's own statuses stand: 1 refused, 2 a wrong command line.
Ctrl-C stops following (130); the job goes on."""


def _add_submit_flags(parser: argparse.ArgumentParser) -> None:
    """What `job submit` and `job resubmit` share: how the submit is said and followed."""
    parser.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="say each step on stderr as it happens: matching, quotes, the lock, the "
        "provider's answer (default: when stderr is a terminal)",
    )
    parser.add_argument(
        "--follow",
        action="store_true",
        help="then print the job's log until it ends, and exit with its end (below)",
    )


def exit_code_of(job: api.JobInfo) -> int:
    """The status `--follow` exits with for an ended job (FOLLOW_EPILOG)."""
    if job.state == "completed":
        return 0
    if job.state == "failed":
        code = job.exit_code
        return code & 0xFF if code is not None and code & 0xFF else EXIT_FAILED_NO_CODE
    return END_EXIT_CODES.get(job.state, EXIT_FAILED_NO_CODE)


def check_usage(key: str, args: argparse.Namespace) -> None:
    """What argparse cannot say alone (one of two ways to name a job), as a usage error."""
    if key == "job submit" and not args.file and not (args.url and args.framework):
        raise UsageError("give -f FILE, or --url and --framework", "job submit")


def _tail(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text[:40]!r} is not a whole number") from None
    if not 1 <= value <= MAX_TAIL:
        raise argparse.ArgumentTypeError(f"must be from 1 to {MAX_TAIL:,}, not {text[:40]}")
    return value


def _spec(args: argparse.Namespace) -> JobSpec:
    if args.file:
        import msgspec

        from engine.domain.spec import load_job_file

        loaded = load_job_file(args.file, base_url=args.base_url)
        # What a run asks for beyond the file's own job: these flags, when given, win.
        given = {
            name: value
            for name, value in (
                ("resource_spec", args.spec),
                ("max_minutes", args.max_minutes),
                ("budget_ntx", args.budget),
                ("subtasks", _steps(args.step)),
                ("inputs", _inputs(args.input)),
                ("publish_results", args.publish_results),
            )
            if value is not None
        }
        if not given:
            return loaded
        return _check_spec({**msgspec.to_builtins(loaded), **given})
    if not args.url or not args.framework:
        raise UsageError("give -f FILE, or --url and --framework", "job submit")
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
    if args.max_minutes is not None:
        spec["max_minutes"] = args.max_minutes
    if args.spec is not None:
        spec["resource_spec"] = args.spec
    if args.step:
        spec["subtasks"] = _steps(args.step)
    if args.input:
        spec["inputs"] = _inputs(args.input)
    if args.publish_results:
        spec["publish_results"] = True
    return _check_spec(spec)


def _score(text: str) -> float:
    """An argparse type: a score from 0 to 1."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text[:40]!r} is not a number from 0 to 1") from None
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"must be from 0 to 1, not {text[:40]}")
    return value


def _inputs(values: list[str]) -> list[dict[str, str]] | None:
    """``--input CID[:PATH]`` as the spec's inputs (None: none given)."""
    if not values:
        return None
    inputs = []
    for value in values:
        cid, _, path = value.partition(":")
        inputs.append({"cid": cid, "path": path} if path else {"cid": cid})
    return inputs


def _steps(lines: list[str]) -> list[dict[str, Any]] | None:
    """``--step`` lines as the spec's subtasks (None: no --step given)."""
    if not lines:
        return None
    import msgspec

    from engine.domain.step_lines import parse_step

    return [msgspec.to_builtins(parse_step(line, i)) for i, line in enumerate(lines, start=1)]


def _check_spec(spec: dict[str, Any]) -> JobSpec:
    """The flags' spec, or a one-line error naming its field: a daemon would refuse it too,
    but a huge one (a 10 MB name) would not even fit in a control-socket line."""
    import msgspec

    from engine.domain.spec import JobSpec, validate_spec
    from engine.errors import EngineError

    try:
        parsed = msgspec.convert(spec, JobSpec)
    except msgspec.ValidationError as exc:
        raise EngineError("invalid_job", f"bad job: {str(exc)[:300]}") from None
    validate_spec(parsed).raise_if_failed("invalid_job")
    return parsed


def _submit(args: argparse.Namespace, client: EngineClient) -> api.JobInfo | None:
    spec = _spec(args)
    return _submit_and_follow(
        args,
        client,
        lambda submit_id: api.SubmitJob(
            spec=spec,
            peer_id=args.peer,
            submit_id=submit_id,
            queue=not args.no_queue,
            min_score=args.min_score,
            queue_timeout_s=args.queue_timeout * 60,
        ),
    )


def _resubmit(args: argparse.Namespace, client: EngineClient) -> api.JobInfo | None:
    return _submit_and_follow(
        args,
        client,
        lambda submit_id: api.ResubmitJob(
            job_id=args.job_id, peer_id=args.provider, submit_id=submit_id
        ),
    )


def _submit_and_follow(
    args: argparse.Namespace,
    client: EngineClient,
    command: Callable[[str], api.SubmitJob | api.ResubmitJob],
) -> api.JobInfo | None:
    """Submit (saying each step with --progress), then with --follow print the job's log
    until it ends and exit with its end (``exit_code_of``); None: printed already."""
    job = _submitted(args, client, command)
    if not getattr(args, "follow", False):
        return job
    as_json = getattr(args, "json", False)
    if as_json:
        show_json(api.to_builtins(job), indent=None, flush=True)
    show(
        f"job {job.job_id} {job.state} by provider {short_peer_id(job.provider)}: following "
        "its log (Ctrl-C stops following; the job goes on)",
        file=sys.stderr,
        flush=True,
    )
    _print_log(client, job.job_id, follow=True, as_json=as_json)
    ended: api.JobInfo = client.call_blocking(api.GetJob(job_id=job.job_id))
    if as_json:
        show_json(api.to_builtins(ended), indent=None, flush=True)
    code = exit_code_of(ended)
    show(_end_line(ended, code), file=sys.stderr, flush=True)
    raise SystemExit(code)


def _end_line(job: api.JobInfo, code: int) -> str:
    """``job 3f2a… failed: exit code 3 (exit status 3): ModuleNotFoundError …``."""
    line = f"job {job.job_id} {job.state}"
    if job.exit_code is not None and job.state != "completed":
        line += f": exit code {job.exit_code}"
    line += f" (exit status {code})"
    if job.reason and job.state != "completed":
        line += f": {safe(job.reason)}"
    return line


def _submitted(
    args: argparse.Namespace,
    client: EngineClient,
    command: Callable[[str], api.SubmitJob | api.ResubmitJob],
) -> api.JobInfo:
    progress = args.progress if args.progress is not None else sys.stderr.isatty()
    if not progress:
        return client.call_blocking(command(""), timeout=api.SUBMIT_WAIT_S)
    # A submit waits on providers and the chain for up to a minute: each step is said as it
    # happens (the engine's SubmitProgress events for this submit's id), not a silent wait.
    submit_id = secrets.token_hex(8)
    began = time.monotonic()

    def say(step: str, detail: str, elapsed_s: float) -> None:
        show(f"submit: {step}: {safe(detail)} ({elapsed_s:.1f} s)", file=sys.stderr)

    def said(event: api.Event) -> None:
        # The last step is said from the reply: its event may come after it (another
        # message on the socket), when nobody listens any more.
        if (
            isinstance(event, api.SubmitProgress)
            and event.submit_id == submit_id
            and event.step != "accepted"
        ):
            say(event.step, event.detail, event.elapsed_s)

    unsubscribe = client.subscribe(said)
    try:
        job: api.JobInfo = client.call_blocking(command(submit_id), timeout=api.SUBMIT_WAIT_S)
    finally:
        unsubscribe()
    who = f"provider {short_peer_id(job.provider)}"
    say(job.state, f"{who}: job {job.job_id} {job.state}", time.monotonic() - began)
    return job


def _results(args: argparse.Namespace, client: EngineClient) -> api.JobResults:
    # The daemon has its own working directory: a relative -o means the caller's.
    out_dir = Path(args.out).expanduser().resolve()
    return client.call_blocking(
        api.FetchJobResults(job_id=args.job_id, out_dir=str(out_dir)), timeout=300
    )


def _logs(args: argparse.Namespace, client: EngineClient) -> None:
    _print_log(
        client,
        args.job_id,
        follow=args.follow,
        as_json=getattr(args, "json", False),
        tail=getattr(args, "tail", None),
    )
    if args.follow:
        _raise_unless_completed(client, args.job_id)


def _print_log(
    client: EngineClient, job_id: str, *, follow: bool, as_json: bool, tail: int | None = None
) -> None:
    """A job's log (its last ``tail`` lines); with ``follow``, until the job ended and every
    line is out. Stdout, the stderr stream's lines on stderr (``as_json``: NDJSON)."""
    after = -1
    newest = tail
    while True:
        if newest is not None:
            command = api.GetJobLogs(job_id=job_id, after_seq=after, limit=newest, newest=True)
            newest = None
        else:
            command = api.GetJobLogs(job_id=job_id, after_seq=after)
        chunk: api.JobLogs = client.call_blocking(command)
        for line in chunk.lines:
            if as_json:
                show_json(api.to_builtins(line), indent=None)
            else:
                show(safe(line.text), file=sys.stderr if line.stream == "stderr" else sys.stdout)
        sys.stdout.flush()
        after = chunk.next_seq
        if not follow and not chunk.lines:
            return
        if not follow and tail is not None:
            return  # the tail, not everything after it
        if follow and chunk.done and not chunk.lines:
            return
        if not chunk.lines:
            time.sleep(FOLLOW_POLL_S)


def _show(args: argparse.Namespace, client: EngineClient) -> None:
    """The job and, for a paid one, its escrow's figures: the records ``account`` reads."""
    job: api.JobInfo = client.call_blocking(api.GetJob(job_id=args.job_id))
    escrow = escrow_of(client, job.job_id)
    if getattr(args, "json", False):
        show_json(json_of(job, escrow))
    else:
        show(_detail(job, escrow))
    return None


def escrow_of(client: EngineClient, job_id: str) -> api.EscrowInfo | None:
    """This node's escrow of ``job_id`` (None: an unpaid job)."""
    listed: api.EscrowList = client.call_blocking(api.RewardList())
    return next((e for e in listed.escrows if e.job_id == job_id), None)


def json_of(job: api.JobInfo, escrow: api.EscrowInfo | None) -> dict[str, Any]:
    """``job show --json``: the JobInfo, and ``money``: each figure in base units under the
    key of its kind, the escrow's (what the chain did) where the job has one."""
    data: dict[str, Any] = api.to_builtins(job)
    figures = job_figures(job, escrow)
    data["money"] = {
        "estimate_units": figures.estimate,
        "locked_units": figures.locked,
        "metered_units": figures.metered,
        "paid_units": figures.paid,
        "refunded_units": figures.refunded,
        "machine_ms": figures.machine_ms,
        "escrow_state": escrow.state if escrow is not None else None,
        "lock_tx": figures.lock_tx,
        "settle_tx": figures.settle_tx,
    }
    return data


def _raise_unless_completed(client: EngineClient, job_id: str) -> None:
    """A followed job that failed ends the command with a failure, as ``tail``-and-wait
    scripts expect: ``nunet-tui job logs -f ID && next-step``."""
    from engine.errors import EngineError

    job: api.JobInfo = client.call_blocking(api.GetJob(job_id=job_id))
    if job.state != "completed":
        reason = f": {job.reason}" if job.reason else ""
        raise EngineError("job_" + job.state, f"job {job_id} ended {job.state}{reason}")


def _cancel(args: argparse.Namespace, client: EngineClient) -> api.JobInfo:
    job: api.JobInfo = client.call_blocking(
        api.CancelJob(job_id=args.job_id), timeout=api.CANCEL_WAIT_S
    )
    if job.state not in api.TERMINAL_STATES:
        print(
            f"the provider took the cancel and is stopping job {job.job_id}; "
            f"`nunet-tui job show {job.job_id}` shows its end",
            file=sys.stderr,
        )
    return job


RUNNERS = {
    "job submit": _submit,
    "job resubmit": _resubmit,
    "job list": lambda a, c: c.call_blocking(api.ListJobs()),
    "job show": _show,
    "job logs": _logs,
    "job results": _results,
    "job cancel": _cancel,
}


def _tunnel_runners() -> dict[str, Any]:
    from nunet_tui.cli.job_tunnel import RUNNERS as TUNNEL_RUNNERS

    return TUNNEL_RUNNERS


RUNNERS.update(_tunnel_runners())


def _list_text(result: api.JobList) -> str:
    if not result.jobs:
        return "no jobs yet: `nunet-tui job submit -f job.toml`"
    return "\n".join(_row(job) for job in result.jobs)


def _results_text(result: api.JobResults) -> str:
    lines = [f"results of {result.job_id} in {result.directory} (sha256 {result.sha256[:16]}…)"]
    if result.path:  # issue 24: through a relay (in parts, each within its circuit) or direct
        parts = f", in {result.parts} parts" if result.parts > 1 else ""
        via = "directly" if result.path == "direct" else result.path
        lines.append(f"fetched from the provider {via}{parts}")
    lines += [f"  {safe(name)}" for name in result.files]
    return "\n".join(lines)


def _row(job: api.JobInfo) -> str:
    name = safe(job.spec.name or job.spec.script_url or "")[:40]
    other = job.provider if job.role == "consumer" else job.consumer
    return f"{job.job_id}  {job.role:<8}  {job.state:<11}  {other[-8:]}  {name}"


def _runs_text(job: api.JobInfo) -> str:
    """A resumed job's runs, each as billed (its span less its frozen time), and the time
    between them, which is not."""
    spans = job.run_spans_ms(job.updated_at)
    billed = ", ".join(f"{(end - start - frozen) / 1000:.1f} s" for start, end, frozen in spans)
    gaps = sum(max(0, b[0] - a[1]) for a, b in itertools.pairwise(spans))
    return f"{len(spans)} ({billed}); {gaps / 1000:.1f} s between them not billed"


def _detail(job: api.JobInfo, escrow: api.EscrowInfo | None = None) -> str:
    lines = [
        f"job {job.job_id} ({job.role}): {job.state}"
        + (f" · resumed from checkpoint {job.resumed_from}" if job.resumed_from else ""),
        f"  provider  {job.provider}",
        f"  consumer  {job.consumer}",
        *([f"  path      {job.path}"] if job.path else []),  # via a relay or direct (issue 24)
        f"  script    {safe(job.spec.script_url or str(api.to_builtins(job.spec.git)))}",
        f"  runs as   {job.spec.framework} · {job.spec.device} · "
        f"{job.spec.tier} tier · {job.executor or '?'} executor",
    ]
    if price := price_text(job):
        lines.append(f"  price     {price}")
    figures = job_figures(job, escrow)
    if money := summary(figures):
        lines.append(f"  NTX       {money}")
    if escrow is not None:
        lines.append(
            f"  escrow    {escrow.state} · lock tx {figures.lock_tx or '-'} · "
            f"settle tx {figures.settle_tx or '-'}"
        )
        if escrow.error:
            lines.append(f"  escrow    {safe(escrow.error)}")
        if (refund := refund_now(escrow, time.time())) is not None:
            lines.append(f"  refund    {refund.short}")
    if len(job.runs) > 1:
        lines.append(f"  runs      {_runs_text(job)}")
    if summary_line := steps_summary(job):  # issue 25 §1: each replica of each step
        lines.append(f"  steps     {summary_line}")
        lines += [f"    {row.line()}" for row in replica_rows(job, time.time())]
    if job.gang and job.spec.gang is not None:  # issue 25 §2: each rank, its job and provider
        lines.append(f"  gang      {job.spec.gang.gang_id}: {len(job.gang)} ranks, one job each")
        for member in job.gang:
            why = f" · {safe(member.reason)}" if member.reason else ""
            lines.append(
                f"    rank {member.rank}  {member.job_id}  provider "
                f"{short_peer_id(member.provider)}  {member.state}{why}"
            )
    if job.reason:
        lines.append(f"  reason    {safe(job.reason)}")
    if job.results_error:
        lines.append(
            f"  results   not fetched: {safe(job.results_error)} (`job results` tries again)"
        )
    if job.exit_code is not None:
        lines.append(f"  exit code {job.exit_code}")
    if job.metering is not None:
        m = job.metering
        lines.append(
            f"  metering  {m.wall_s:.1f} s wall, {m.cpu_s:.1f} s CPU ({m.mticks:.0f} MTicks), "
            f"{m.ram_mb_s:.0f} MB·s, peak {m.peak_ram_mb:.0f} MB"
        )
    if job.state == "running":  # the provider's latest live sample (issue 22 §3)
        lines.append(f"  usage     {usage_line(job.usage)}")
    lines.append(f"  log       {job.log_lines} lines (`nunet-tui job logs {job.job_id} -f`)")
    if job.results_sha256:
        lines.append(f"  results   {job.results_size:,} bytes, sha256 {job.results_sha256[:16]}…")
        if job.results_cid:
            lines.append(f"  published {job.results_cid}  (nunet-tui data get)")
    return "\n".join(lines)


# The job results this module formats (formatters.py merges every output module's TEXT).
TEXT: dict[type, Callable[[Any], str]] = {
    api.JobList: _list_text,
    api.JobInfo: _detail,
    api.JobResults: _results_text,
}
