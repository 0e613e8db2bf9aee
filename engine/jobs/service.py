"""The node's jobs: both roles, their commands, and the job protocol's stream handler.

Reading commands (list, show, logs, results of a finished job) work from the store alone, so
they answer even in a one-shot CLI engine; submitting and cancelling need the running node.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import trio

from engine import api
from engine.errors import EngineError
from engine.jobs.consumer import ConsumerJobs
from engine.jobs.executors.base import Executor
from engine.jobs.provider import ProviderJobs
from engine.jobs.tunnel import ConsumerTunnels

if TYPE_CHECKING:
    from engine.network.service import NetworkService
    from engine.node import Node

log = logging.getLogger("nunet.jobs")


def build_executors(node: Node) -> dict[str, Executor]:
    executors: dict[str, Executor] = {}
    for name in node.settings.jobs.executors:
        if name == "process":
            from engine.jobs.executors.process import ProcessExecutor

            log.warning(
                "the process executor runs jobs as local processes: use it only on trusted "
                "local networks and for the demo (jobs.executors in config)"
            )
            executors[name] = ProcessExecutor()
        elif name == "docker":
            from engine.jobs.executors.docker import DockerExecutor, images_from_settings

            # The images onboard-ml pulled ([ml_images]), not the built-in defaults.
            images = images_from_settings(node.settings.ml_images.as_map())
            executors[name] = DockerExecutor(node_id=node.identity.peer_id, images=images)
        else:
            raise EngineError(
                "config", f"jobs.executors: unknown executor {name!r} (docker or process)"
            )
    return executors


class NodeJobs:
    def __init__(self, node: Node) -> None:
        self.node = node
        self.provider = ProviderJobs(node, build_executors(node))
        self.consumer = ConsumerJobs(node)
        self.tunnels = ConsumerTunnels(node)  # job forward / job shell (the provider's: .provider)

    async def serve(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            await nursery.start(self.provider.serve)
            await nursery.start(self.consumer.serve)
            await nursery.start(self.tunnels.serve)
            task_status.started()

    def attach(self, service: NetworkService) -> None:
        """Called each time the network (re)starts: serve the job protocol on its host."""
        from libp2p.custom_types import TProtocol

        from engine.jobs.protocol import JOB_PROTOCOL
        from engine.jobs.tunnel import TUNNEL_PROTOCOL

        service.host.set_stream_handler(TProtocol(JOB_PROTOCOL), self.provider.handle)
        service.host.set_stream_handler(TProtocol(TUNNEL_PROTOCOL), self.provider.tunnels.handle)

    def handlers(self) -> dict[type[api.Command], Callable[[Any], Awaitable[Any]]]:
        return {
            api.SubmitJob: self.consumer.submit,
            api.ListJobs: self._list,
            api.GetJob: self._show,
            api.GetJobLogs: self._logs,
            api.CancelJob: self.consumer.cancel,
            api.FetchJobResults: self.consumer.results,
            api.JobForward: self.tunnels.forward,
            api.JobForwardClose: self.tunnels.close_forward,
            api.ListForwards: self.tunnels.list_forwards,
            api.JobShell: self.tunnels.shell,
            api.StopJob: self.consumer.stop,
        }

    async def _list(self, command: api.ListJobs) -> api.JobList:
        return api.JobList(jobs=tuple(self.node.store.list_jobs()))

    def _job(self, job_id: str) -> api.JobInfo:
        job = self.node.store.get_job(job_id.strip())
        if job is None:
            raise EngineError("not_found", f"no job {job_id!r} here; `nunet-tui job list`")
        return job

    async def _show(self, command: api.GetJob) -> api.JobInfo:
        return self._job(command.job_id)

    async def _logs(self, command: api.GetJobLogs) -> api.JobLogs:
        job = self._job(command.job_id)
        joblog = (
            self.consumer.job_log(job.job_id)
            if job.role == "consumer"
            else self.provider.job_log(job.job_id)
        )
        lines = joblog.read(
            command.after_seq, max(1, min(command.limit, 50_000)), newest=command.newest
        )
        next_seq = lines[-1].seq if lines else command.after_seq
        done = job.state in api.TERMINAL_STATES and not joblog.read(next_seq, 1)
        return api.JobLogs(job_id=job.job_id, lines=tuple(lines), next_seq=next_seq, done=done)
