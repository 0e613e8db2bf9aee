"""The one place where threads meet: a trio loop in a background thread.

py-libp2p is trio-based and Textual is asyncio-based, so the engine lives in its own thread.
Calls cross with the loop's ``TrioToken`` (``run_sync_soon`` starts the coroutine in the
engine's nursery) and come back through a ``concurrent.futures.Future``, which asyncio awaits
via ``wrap_future`` (``call_soon_threadsafe`` underneath) and plain code awaits with
``result()``. No worker thread is held per call. Events travel the other way through
callbacks that the app turns into ``post_message``. Nothing else crosses threads.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import threading
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import trio

T = TypeVar("T")

# The root task receives a ``task_status`` and calls ``task_status.started()`` once ready.
RootTask = Callable[..., Awaitable[None]]

log = logging.getLogger("nunet.engine")


class TrioThread:
    def __init__(self, root: RootTask, name: str = "nunet-engine") -> None:
        self._root = root
        self._name = name
        self._thread: threading.Thread | None = None
        self._token: trio.lowlevel.TrioToken | None = None
        self._nursery: trio.Nursery | None = None
        self._stop: trio.Event | None = None
        self._ready = threading.Event()
        self._startup_error: BaseException | None = None

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive() and self._ready.is_set()

    def start(self, timeout: float = 30.0) -> None:
        self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout):
            raise TimeoutError(f"the engine did not start within {timeout:.0f} s")
        if self._startup_error is not None:
            self._thread.join()
            raise self._startup_error

    def _run(self) -> None:
        try:
            trio.run(self._main)
        except BaseException as exc:
            if not self._ready.is_set():
                self._startup_error = _unwrap(exc)
            else:
                # A crash after start would otherwise leave a live process with a dead engine
                # and nothing in the log to say why.
                log.critical("the engine stopped on an error", exc_info=_unwrap(exc))
        finally:
            self._ready.set()

    async def _main(self) -> None:
        self._token = trio.lowlevel.current_trio_token()
        self._stop = trio.Event()
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            await nursery.start(self._root)
            self._ready.set()
            await self._stop.wait()
            nursery.cancel_scope.cancel()

    def submit(self, fn: Callable[..., Awaitable[T]], *args: Any) -> concurrent.futures.Future[T]:
        """Run ``fn(*args)`` in the engine's nursery; cancelling the future cancels the task."""
        future: concurrent.futures.Future[T] = concurrent.futures.Future()
        if not self.running or self._token is None or self._nursery is None:
            future.set_exception(RuntimeError("the engine is not running"))
            return future
        scope = trio.CancelScope()

        async def task() -> None:
            # The future is never marked running, so an abandoned await (asyncio task
            # cancelled) can still cancel it, and the done-callback cancels the trio scope.
            if future.cancelled():
                return
            try:
                with scope:
                    result = await fn(*args)
            except Exception as exc:
                _settle(future, exc=exc)
                return
            except BaseException:
                _settle(future, exc=RuntimeError("the engine stopped before answering"))
                raise
            if scope.cancelled_caught:
                _settle(future, exc=RuntimeError("the call was cancelled"))
            else:
                _settle(future, result=result)

        token, nursery = self._token, self._nursery

        def cancel_on_abandon(f: concurrent.futures.Future[T]) -> None:
            if f.cancelled():
                with contextlib.suppress(trio.RunFinishedError):
                    token.run_sync_soon(scope.cancel)

        future.add_done_callback(cancel_on_abandon)
        try:
            token.run_sync_soon(nursery.start_soon, task)
        except trio.RunFinishedError:
            future.set_exception(RuntimeError("the engine is not running"))
        return future

    async def call(self, fn: Callable[..., Awaitable[T]], *args: Any) -> T:
        """From asyncio: await ``fn(*args)`` running on the trio loop."""
        return await asyncio.wrap_future(self.submit(fn, *args))

    def call_blocking(
        self, fn: Callable[..., Awaitable[T]], *args: Any, timeout: float = 30.0
    ) -> T:
        future = self.submit(fn, *args)
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise TimeoutError(f"the engine did not answer within {timeout:.0f} s") from None

    def run_sync_soon(self, fn: Callable[[], object]) -> None:
        """Schedule a plain callable on the trio thread (no result)."""
        if self._token is not None:
            with contextlib.suppress(trio.RunFinishedError):
                self._token.run_sync_soon(fn)

    def stop(self, timeout: float = 5.0) -> None:
        thread = self._thread
        if thread is None:
            return
        stop = self._stop
        if stop is not None:
            self.run_sync_soon(stop.set)
        thread.join(timeout)
        if thread.is_alive():
            raise TimeoutError(f"the engine thread did not stop within {timeout:.0f} s")
        self._thread = None


def _settle(
    future: concurrent.futures.Future[Any],
    result: Any = None,
    exc: BaseException | None = None,
) -> None:
    if future.done():
        return
    try:
        if exc is not None:
            future.set_exception(exc)
        else:
            future.set_result(result)
    except concurrent.futures.InvalidStateError:
        pass  # cancelled by the caller in the meantime


def _unwrap(exc: BaseException) -> BaseException:
    """trio wraps a failing startup in ExceptionGroups; surface the single real error."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc
