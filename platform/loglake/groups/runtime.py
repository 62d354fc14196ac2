"""What the group coordinator's components share: the `__consumer_offsets` log as they
write it, the background tasks they start, and small helpers for timers and waiting
requests (futures)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Coroutine, TypeVar

from loglake.errors import ErrorCode
from loglake.internal_topics import InternalTopicLog, map_append_error, partition_for_key

log = logging.getLogger(__name__)
_T = TypeVar("_T")

# The group coordinator's name for its InternalTopicLog over __consumer_offsets.
OffsetsLog = InternalTopicLog


def offsets_partition_for(group_id: str, num_partitions: int) -> int:
    """The `__consumer_offsets` partition holding a group: abs(hashCode) % partitions, as Kafka."""
    return partition_for_key(group_id, num_partitions)


class GroupLog:
    """`__consumer_offsets` as the coordinator's components write it: which partition holds a
    group, and appends that answer the client's error code instead of raising."""

    def __init__(self, log: InternalTopicLog, num_partitions: int) -> None:
        self.log = log
        self._num_partitions = num_partitions

    def partition_for(self, group_id: str) -> int:
        return offsets_partition_for(group_id, self._num_partitions)

    async def append(
        self,
        partition: int,
        records: list[tuple[bytes, bytes | None]],
        for_offsets: bool,
        producer: tuple[int, int] | None = None,
    ) -> ErrorCode:
        try:
            await self.log.append(partition, records, producer)
        except Exception as exc:  # noqa: BLE001 - every failure becomes the client's error code
            log.warning("append to __consumer_offsets-%d failed: %r", partition, exc)
            return map_append_error(
                exc, ErrorCode.INVALID_COMMIT_OFFSET_SIZE if for_offsets else ErrorCode.UNKNOWN_SERVER_ERROR
            )
        return ErrorCode.NONE


class BackgroundTasks:
    """Writes nobody waits on (stored assignments, fenced members): cancelled on stop."""

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[None]] = set()

    def spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def cancel_all(self) -> None:
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def resolve(future: asyncio.Future[_T] | None, result: _T) -> None:
    # A caller that stopped waiting (cancelled) leaves a done future behind: skip it.
    if future is not None and not future.done():
        future.set_result(result)


def cancel(timer: asyncio.TimerHandle | None) -> None:
    if timer is not None:
        timer.cancel()
