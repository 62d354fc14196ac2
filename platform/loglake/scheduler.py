"""Background tasks on one thread, delayed or periodic (Kafka's KafkaScheduler).

The broker's housekeeping (retention, flushes, delayed file deletion) is blocking file
work, so it runs here rather than on the event loop. Tasks run one at a time in due
order; a task that raises is logged and, if periodic, runs again at its next period.
`shutdown` drops delayed tasks that have not run, as Kafka's scheduler does: what they
would have done is redone at the next start (leftover `.deleted` files are removed).
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

logger = logging.getLogger(__name__)


@dataclass(order=True)
class _Task:
    due: float
    seq: int
    name: str = field(compare=False)
    fn: Callable[[], object] = field(compare=False)
    period_s: float | None = field(compare=False)


class Scheduler:
    def __init__(self, thread_name: str = "loglake-scheduler") -> None:
        self._thread_name = thread_name
        self._tasks: list[_Task] = []
        self._seq = itertools.count()
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._stopped = False

    def schedule_once(self, name: str, fn: Callable[[], object], delay_ms: int = 0) -> None:
        self._add(name, fn, delay_ms, None)

    def schedule(self, name: str, fn: Callable[[], object], delay_ms: int, period_ms: int) -> None:
        """Run `fn` after `delay_ms`, then every `period_ms` (counted from each run's start)."""
        if period_ms <= 0:
            raise ValueError(f"period of {name} must be positive, got {period_ms}")
        self._add(name, fn, delay_ms, period_ms / 1000)

    def _add(self, name: str, fn: Callable[[], object], delay_ms: int, period_s: float | None) -> None:
        with self._cond:
            if self._stopped:
                logger.debug("scheduler is shut down; dropping %s", name)
                return
            heapq.heappush(self._tasks, _Task(time.monotonic() + delay_ms / 1000, next(self._seq), name, fn, period_s))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self._thread_name, daemon=True)
                self._thread.start()
            self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._stopped and (not self._tasks or self._tasks[0].due > time.monotonic()):
                    self._cond.wait(None if not self._tasks else self._tasks[0].due - time.monotonic())
                if self._stopped:
                    return
                task = heapq.heappop(self._tasks)
            started = time.monotonic()
            try:
                task.fn()
            except Exception:
                logger.exception("scheduled task %s failed", task.name)
            if task.period_s is not None:
                with self._cond:
                    if not self._stopped:
                        task.due = started + task.period_s
                        task.seq = next(self._seq)
                        heapq.heappush(self._tasks, task)

    def shutdown(self) -> None:
        """Stop after the running task (if any); pending tasks are dropped."""
        with self._cond:
            self._stopped = True
            self._tasks.clear()
            self._cond.notify()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()
