"""The one thread on which a broker talks to its metadata store (ZooKeeper, or the embedded file).

A store call blocks (a network round trip to ZooKeeper, an fsync of the embedded file; for
as long as ZooKeeper is unreachable). On the event loop it would stall every client of the
broker, so the controller's work, metadata refreshes and admin writes run here instead:
the loop awaits them (`run`), the store's watches hand their events over (`submit`), and
what the loop must do with the result (apply a LeaderAndIsr, install a new metadata image,
enqueue a request to another broker) hops back with `on_loop`. One thread keeps the
store's calls in the order they were made, as they were on the loop.
"""

from __future__ import annotations

import asyncio
import logging
import math
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

from loglake.errors import ErrorCode, KafkaError

log = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass(frozen=True)
class Deadline:
    """When a request's store calls must all have answered: each waits for what remains
    (`run(..., timeout_ms=deadline.remaining_ms())`), so a request of many calls to a slow
    store is answered after its timeout, not after one timeout per call."""

    at: float  # time.monotonic()

    @classmethod
    def after_ms(cls, timeout_ms: int) -> Deadline:
        return cls(time.monotonic() + timeout_ms / 1000)

    def remaining_ms(self) -> int:
        return max(0, math.ceil((self.at - time.monotonic()) * 1000))


class MetadataThread:
    def __init__(self) -> None:
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="loglake-metadata")
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: int | None = None

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        """The event loop `on_loop` hands work to (the broker's, once it runs)."""
        self._loop = loop
        self._loop_thread = threading.get_ident()

    def submit(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run `fn(*args)` here, after everything submitted before; its failure is logged."""
        self._executor.submit(fn, *args).add_done_callback(_log_failure)

    async def run(self, fn: Callable[..., T], *args: Any, timeout_ms: int | None = None) -> T:
        """Await `fn(*args)` run here. Past `timeout_ms` the caller gets REQUEST_TIMED_OUT (as
        Kafka answers an admin request it could not complete in time); the call itself still
        completes, in order, once the store answers. With no time left (`timeout_ms` <= 0: a
        request's deadline passed) it is not made at all."""
        if timeout_ms is not None and timeout_ms <= 0:
            raise KafkaError(ErrorCode.REQUEST_TIMED_OUT, "the metadata store did not answer in time")
        loop = asyncio.get_running_loop()
        if loop is not self._loop:
            # A broker driven by a loop other than the one it started on (a test's client).
            self.bind(loop)
        future = asyncio.wrap_future(self._executor.submit(fn, *args))
        if timeout_ms is None:
            return await future
        try:
            return await asyncio.wait_for(asyncio.shield(future), timeout_ms / 1000)
        except TimeoutError:
            future.add_done_callback(_log_late_failure)
            raise KafkaError(
                ErrorCode.REQUEST_TIMED_OUT, f"the metadata store did not answer within {timeout_ms} ms"
            ) from None

    def on_loop(self, fn: Callable[..., Any], *args: Any) -> None:
        """Call `fn(*args)` on the event loop, in the order of these calls: at once when already
        on it (or when no loop runs yet: a broker starting up, a test driving it directly)."""
        if self._loop is None or self._loop_thread == threading.get_ident() or self._loop.is_closed():
            fn(*args)
        else:
            self._loop.call_soon_threadsafe(fn, *args)

    def shutdown(self) -> None:
        """Let the queued calls finish (they are the store's and end when it closes)."""
        self._executor.shutdown(wait=False, cancel_futures=True)


def _log_failure(future: Future[Any]) -> None:
    if not future.cancelled() and future.exception() is not None:
        log.error("metadata work failed", exc_info=future.exception())


def _log_late_failure(future: asyncio.Future[Any]) -> None:
    if not future.cancelled() and future.exception() is not None:
        log.warning("metadata work that timed out failed too: %s", future.exception())
