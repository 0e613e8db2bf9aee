"""``nunet-tui notebook create | list | open | stop | delete``: JupyterLab on a provider.

A notebook is a service job (engine/api/notebooks.py): ``create`` submits it with a token
made here, ``open`` forwards its JupyterLab port through the node's tunnel (until the job
ends) and prints the local URL with the token, waiting until JupyterLab answers; ``stop``
ends it (its notebooks/ come back as results: ``job results ID -o DIR``); ``delete`` removes
its files on the provider.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from engine import api
from engine.api import notebooks as nb
from engine.client import EngineClient
from engine.errors import EngineError
from nunet_tui.cli.job_output import UsageError, framework
from nunet_tui.cli.job_tunnel import TUNNEL_WAIT_S
from nunet_tui.cli.output import show, show_json

READY_S = 120.0  # for JupyterLab to answer once the job runs (a first start compiles a bit)
POLL_S = 0.5


def add_parsers(sub: Any, common: argparse.ArgumentParser) -> None:
    notebook = sub.add_parser("notebook", help="JupyterLab notebooks on a provider")
    notebook_sub = notebook.add_subparsers(
        dest="notebook_command", metavar="NOTEBOOK_COMMAND", required=True
    )
    create = notebook_sub.add_parser("create", parents=[common], help="start a notebook")
    create.add_argument(
        "--spec", metavar="FILE", help="a job file to start from (examples/jobs/notebook)"
    )
    create.add_argument(
        "--script-url", metavar="URL", help="the launcher (examples/jobs/notebook/notebook.py)"
    )
    create.add_argument(
        "--base-url",
        metavar="URL",
        help=f"where the examples are served: the launcher is URL/{nb.SCRIPT} (the demo's)",
    )
    create.add_argument(
        "--image",
        type=framework,
        metavar="FRAMEWORK",
        help="the provider's image for this framework: pytorch, tensorflow or scikit-learn",
    )
    create.add_argument("--device", choices=("cpu", "gpu"))
    create.add_argument("--tier", choices=("low", "moderate", "high"))
    create.add_argument("--minutes", type=float, metavar="N", help="its maximum time")
    create.add_argument("--dep", action="append", default=[], metavar="PKG")
    create.add_argument("--name")
    create.add_argument("--peer", metavar="ID", help="pick the provider by hand")
    notebook_sub.add_parser("list", parents=[common], help="your notebooks")
    opened = notebook_sub.add_parser(
        "open", parents=[common], help="forward it to 127.0.0.1 and print its URL"
    )
    opened.add_argument("job_id", metavar="ID")
    opened.add_argument("--local-port", type=int, default=0, metavar="PORT")
    opened.add_argument("--browser", action="store_true", help="open the URL in a browser")
    for name, text in (
        ("stop", "end it; its notebooks come back as results"),
        ("delete", "remove its files on the provider"),
    ):
        notebook_sub.add_parser(name, parents=[common], help=text).add_argument(
            "job_id", metavar="ID"
        )


def _script_url(args: argparse.Namespace, base: Any) -> str:
    if args.script_url:
        return str(args.script_url)
    if base is not None and base.script_url:
        return str(base.script_url)
    if args.base_url:
        return f"{args.base_url.rstrip('/')}/{nb.SCRIPT}"
    raise UsageError(
        "give --script-url URL (examples/jobs/notebook/notebook.py served over http) or "
        "--base-url URL (the demo prints it)",
        "notebook create",
    )


def _create(args: argparse.Namespace, client: EngineClient) -> None:
    from engine.domain.spec import load_job_file

    base = load_job_file(args.spec, base_url=args.base_url) if args.spec else None
    spec = nb.notebook_spec(
        _script_url(args, base),
        base=base,
        name=args.name,
        framework=args.image,
        tier=args.tier,
        device=args.device,
        expected_minutes=args.minutes,
        deps=args.dep,
    )
    job: api.JobInfo = client.call_blocking(
        api.SubmitJob(spec=spec, peer_id=args.peer), timeout=api.SUBMIT_WAIT_S
    )
    (made,) = nb.notebooks([job])
    if getattr(args, "json", False):
        show_json(api.to_builtins(made))
    else:
        show(
            f"notebook {made.job_id} {made.state} on {made.provider[:16]}…\n"
            f"open it: nunet-tui notebook open {made.job_id}"
        )


def _list(args: argparse.Namespace, client: EngineClient) -> None:
    jobs: api.JobList = client.call_blocking(api.ListJobs())
    forwards: api.ForwardList = client.call_blocking(api.ListForwards())
    found = nb.notebooks(jobs.jobs, forwards.forwards)
    if getattr(args, "json", False):
        show_json({"notebooks": [api.to_builtins(n) for n in found]})
        return
    if not found:
        show("no notebooks yet: nunet-tui notebook create --base-url URL")
        return
    lines = [f"{'ID':<12}  {'STATE':<11}  {'NAME':<20}  LOCAL URL"]
    for n in found:
        url = n.local_url or ("-" if n.state != "running" else "(notebook open)")
        lines.append(f"{n.job_id:<12}  {n.state:<11}  {n.name[:20]:<20}  {url}")
    show("\n".join(lines))


def wait_ready(port: int, token: str, seconds: float = READY_S) -> None:
    """Until JupyterLab answers its status with the token through the forward."""
    import http.client  # 15 ms (ssl) that the other commands, loading this module, skip

    deadline = time.monotonic() + seconds
    last = "no answer"
    while time.monotonic() < deadline:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        try:
            conn.request("GET", f"/api/status?token={token}")
            status = conn.getresponse().status
            if status == 200:
                return
            last = f"HTTP {status}"
        except (OSError, http.client.HTTPException) as exc:
            last = str(exc) or type(exc).__name__
        finally:
            conn.close()
        time.sleep(POLL_S)
    raise EngineError("not_ready", f"JupyterLab did not answer in {seconds:g} s ({last[:200]})")


def _forward(client: EngineClient, job: api.JobInfo, local_port: int) -> api.TunnelForward:
    """The notebook's forward: the one open already, or a new one that lasts as long as the
    job. A job that has just started has no JupyterLab listening yet and its provider refuses
    the tunnel: asked again while the job runs (its own declared port: any other refusal
    would be the same each time, and is said when the wait ends)."""
    listed: api.ForwardList = client.call_blocking(api.ListForwards(job_id=job.job_id))
    if (forward := nb.forward_of(job, listed.forwards)) is not None:
        return forward
    deadline = time.monotonic() + READY_S
    while True:
        try:
            made: api.TunnelForward = client.call_blocking(
                api.JobForward(
                    job_id=job.job_id, remote_port=nb.port_of(job), local_port=local_port
                ),
                timeout=TUNNEL_WAIT_S,
            )
            return made
        except EngineError as exc:
            if exc.code != "refused" or time.monotonic() > deadline:
                raise
            current: api.JobInfo = client.call_blocking(api.GetJob(job_id=job.job_id))
            if current.state != "running":
                raise EngineError(
                    "not_running", f"notebook {job.job_id} is {current.state}"
                ) from None
        time.sleep(POLL_S)


def _open(args: argparse.Namespace, client: EngineClient) -> None:
    from nunet_tui.cli.job_tunnel import _wait_running

    as_json = getattr(args, "json", False)
    first: api.JobInfo = client.call_blocking(api.GetJob(job_id=args.job_id))
    nb.own_notebook(first)
    job = _wait_running(client, first.job_id, as_json)
    if not as_json:
        show(f"waiting for JupyterLab in job {job.job_id} …", file=sys.stderr, flush=True)
    forward = _forward(client, job, args.local_port)
    token = nb.token_of(job)
    wait_ready(forward.local_port, token)
    url = nb.lab_url(forward.url, token)
    if as_json:
        show_json(
            {
                "job_id": job.job_id,
                "local_url": forward.url,
                "url": url,
                "token": token,
                "forward_id": forward.forward_id,
            }
        )
    else:
        show(f"{url}\n(forwarded until the notebook stops: nunet-tui notebook stop {job.job_id})")
    if args.browser:
        import webbrowser

        webbrowser.open(url)


def _own(client: EngineClient, job_id: str) -> api.JobInfo:
    job: api.JobInfo = client.call_blocking(api.GetJob(job_id=job_id))
    return nb.own_notebook(job)


def _stop(args: argparse.Namespace, client: EngineClient) -> None:
    job = _own(client, args.job_id)
    ended: api.JobInfo = client.call_blocking(
        api.StopJob(job_id=job.job_id), timeout=api.CANCEL_WAIT_S
    )
    if getattr(args, "json", False):
        show_json(api.to_builtins(ended))
    else:
        show(
            f"notebook {ended.job_id} is {ended.state}; its files: "
            f"nunet-tui job results {ended.job_id} -o DIR"
        )


def _delete(args: argparse.Namespace, client: EngineClient) -> None:
    job = _own(client, args.job_id)
    done: api.Done = client.call_blocking(api.DeleteJobResults(job_id=job.job_id), timeout=60)
    if getattr(args, "json", False):
        show_json(api.to_builtins(done))
    else:
        show(done.message)


RUNNERS = {
    "notebook create": _create,
    "notebook list": _list,
    "notebook open": _open,
    "notebook stop": _stop,
    "notebook delete": _delete,
}
