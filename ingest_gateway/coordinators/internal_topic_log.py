"""An internal topic (`__consumer_offsets`, `__transaction_state`) as its coordinator sees
it: append (key, value) records with acks=all, and replay a partition from its log start
when this broker becomes its leader."""

from __future__ import annotations

import time
from collections.abc import Iterator

from loglake.internal_topics import InternalTopicEntry, TransactionalRecord, TransactionMarker
from loglake.record.batch import decode_batches, encode_batch
from loglake.record.control import decode_marker_record, is_marker

from ingest_gateway.replica.replica_manager import ReplicaManager

_READ_BYTES = 1024 * 1024
_APPEND_TIMEOUT_MS = 5000


class ReplicatedTopicLog:
    """A coordinator's `InternalTopicLog` over this broker's replica manager."""

    def __init__(self, replica_manager: ReplicaManager, topic: str) -> None:
        self._replica_manager = replica_manager
        self.topic = topic

    async def append(
        self, partition: int, records: list[tuple[bytes, bytes | None]], producer: tuple[int, int] | None = None
    ) -> None:
        rows = [(key, value, (), None) for key, value in records]
        now_ms = int(time.time() * 1000)
        if producer is None:
            batch = encode_batch(rows, now_ms)
        else:
            # As Kafka's coordinator writes TxnOffsetCommit: the producer's batch, whose
            # sequence nobody checks (the coordinator, not the producer, appends it).
            producer_id, producer_epoch = producer
            batch = encode_batch(
                rows,
                now_ms,
                producer_id=producer_id,
                producer_epoch=producer_epoch,
                base_sequence=0,
                transactional=True,
            )
        key = (self.topic, partition)
        results = await self._replica_manager.append_records(
            {key: batch}, -1, _APPEND_TIMEOUT_MS, from_coordinator=producer is not None
        )
        error = results[key].error
        if error is not None:
            raise error

    def read(self, partition: int) -> Iterator[InternalTopicEntry]:
        log = self._replica_manager.leader_partition(self.topic, partition).log
        offset = log.log_start_offset
        while offset < log.log_end_offset:
            piece = log.read(offset, _READ_BYTES)
            if not piece.size:
                break
            for header, records in decode_batches(piece.read_bytes()):
                if header.is_control:
                    # A cleaned log may hold a producer's last marker emptied of its record.
                    if is_marker(header) and records and records[0].offset >= offset:
                        marker = decode_marker_record(records[0].key, records[0].value)
                        yield TransactionMarker(header.producer_id, marker.commit)
                    continue
                for record in records:
                    if record.offset >= offset and record.key is not None:
                        if header.is_transactional:
                            yield TransactionalRecord(header.producer_id, record.key, record.value)
                        else:
                            yield record.key, record.value
            offset = piece.next_offset
