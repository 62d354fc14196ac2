"""Which batches a read_committed reader skips, as Kafka's consumer decides it: control
batches always, and a producer's transactional batches from the first offset of one of its
aborted transactions up to that transaction's ABORT marker. Per batch, in offset order."""

from __future__ import annotations

from collections.abc import Iterable

from loglake.record.header import RecordBatchHeader


class AbortedTransactionFilter:
    def __init__(self, aborted: Iterable[tuple[int, int]] = ()) -> None:
        """`aborted`: (producer id, first offset) of the aborted transactions in the range read
        (a Fetch answer's list, or the log's transaction index); empty for read_uncommitted."""
        self._pending = sorted(aborted, key=lambda a: a[1], reverse=True)  # next to start at the end
        self._aborting: set[int] = set()

    def skips(self, header: RecordBatchHeader) -> bool:
        while self._pending and self._pending[-1][1] <= header.last_offset:
            self._aborting.add(self._pending.pop()[0])
        if header.is_control:
            # The end of the producer's transaction: only an ABORT can end one being skipped.
            self._aborting.discard(header.producer_id)
            return True
        return header.is_transactional and header.producer_id in self._aborting
