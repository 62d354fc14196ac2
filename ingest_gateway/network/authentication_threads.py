"""Where authentication's blocking work runs: PBKDF2 (milliseconds of CPU) and, for a user
the broker's credential cache does not know, reading the user's SCRAM credential from the
metadata store (a ZooKeeper round trip, or as long as ZooKeeper is unreachable).

SASL exchanges and HTTP Basic checks run it on threads of their own, not in the event loop's
default executor: the broker's own checkpoint and ISR writes use that one, and a stalled
ZooKeeper with clients (re)connecting would otherwise hold all its threads. Each call has a
deadline: past it the caller gets REQUEST_TIMED_OUT (the SASL exchange fails with that
message, HTTP answers 504), and a call that had not started by then is not made.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from loglake.errors import ErrorCode, KafkaError

T = TypeVar("T")

# As many checks at once as this: more would only queue for the store or the two cores.
DEFAULT_THREADS = 4


class AuthenticationThreads:
    def __init__(self, timeout_ms: int, threads: int = DEFAULT_THREADS) -> None:
        self.timeout_ms = timeout_ms
        self._executor = ThreadPoolExecutor(threads, thread_name_prefix="loglake-authentication")

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """`fn(*args)` on these threads, or REQUEST_TIMED_OUT after `timeout_ms`."""
        deadline = time.monotonic() + self.timeout_ms / 1000

        def within_deadline() -> T:
            if time.monotonic() > deadline:
                raise _timed_out()  # its caller has been answered already
            return fn(*args)

        future = asyncio.wrap_future(self._executor.submit(within_deadline))
        try:
            return await asyncio.wait_for(asyncio.shield(future), self.timeout_ms / 1000)
        except TimeoutError:
            future.add_done_callback(_retrieve)  # how the late call ends is nobody's to handle
            raise _timed_out() from None

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)


def _timed_out() -> KafkaError:
    return KafkaError(ErrorCode.REQUEST_TIMED_OUT, "the metadata store did not answer the credential check in time")


def _retrieve(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()
