"""An internal topic (`__consumer_offsets`, `__transaction_state`) as its coordinator sees
it: append (key, value) records with acks=all, and replay a partition from its log start
when this broker becomes its leader."""

from __future__ import annotations

import time
from collections.abc import Iterator

from ingest_gateway.replica_manager import ReplicaManager
from loglake.record.batch import decode_batches, encode_batch

_READ_BYTES = 1024 * 1024
_APPEND_TIMEOUT_MS = 5000


class ReplicatedTopicLog:
    """A coordinator's `InternalTopicLog` over this broker's replica manager."""

    def __init__(self, replica_manager: ReplicaManager, topic: str) -> None:
        self._replica_manager = replica_manager
        self.topic = topic

    async def append(self, partition: int, records: list[tuple[bytes, bytes | None]]) -> None:
        batch = encode_batch([(key, value, (), None) for key, value in records], int(time.time() * 1000))
        key = (self.topic, partition)
        results = await self._replica_manager.append_records({key: batch}, -1, _APPEND_TIMEOUT_MS)
        error = results[key].error
        if error is not None:
            raise error

    def read(self, partition: int) -> Iterator[tuple[bytes, bytes | None]]:
        log = self._replica_manager.leader_partition(self.topic, partition).log
        offset = log.log_start_offset
        while offset < log.log_end_offset:
            piece = log.read(offset, _READ_BYTES)
            if not piece.size:
                break
            for _, records in decode_batches(piece.read_bytes()):
                for record in records:
                    if record.offset >= offset and record.key is not None:
                        yield record.key, record.value
            offset = piece.next_offset
