"""What the cleaner knows of transactions as it walks a log in offset order (the role of
Kafka's CleanedTransactionMetadata).

It is fed the aborted transactions of the range walked (from the `.txnindex` files) and
every batch header in offset order, and tells:

- whether a data batch belongs to an aborted transaction (its records are removed, and
  never enter the offset map, so an aborted value never shadows a committed one);
- whether a marker may go: an ABORT marker once no batch of its transaction was met in
  this walk, a COMMIT marker likewise (Kafka's rule: a marker stays while any data of its
  transaction may remain, so a reader never meets a transactional batch without its end);
  an emptied marker always. The cleaner then still keeps it until its delete horizon.
- the `.txnindex` entries the cleaned segment keeps: those of ABORT markers whose
  transactions still have data in the log, appended to `cleaned_index` as they are met.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from loglake.record.control import EndTransactionMarker
from loglake.record.header import RecordBatchHeader
from loglake.storage.transaction_index import AbortedTxn, TransactionIndex


@dataclass
class _OngoingAbort:
    txn: AbortedTxn
    observed: bool = False  # a batch of the transaction was met in this walk


class CleanedTransactionMetadata:
    def __init__(self, aborted: Iterable[AbortedTxn] = ()) -> None:
        self._pending: list[AbortedTxn] = []  # by first offset, the next to start last
        self._known: set[tuple[int, int]] = set()
        self._ongoing_committed: set[int] = set()
        self._ongoing_aborted: dict[int, _OngoingAbort] = {}
        # Where the entries of retained ABORT markers go (the cleaned segment's index).
        self.cleaned_index: TransactionIndex | None = None
        self.add_aborted_transactions(aborted)

    def add_aborted_transactions(self, aborted: Iterable[AbortedTxn]) -> None:
        fresh = [t for t in aborted if (t.producer_id, t.first_offset) not in self._known]
        if fresh:
            self._known.update((t.producer_id, t.first_offset) for t in fresh)
            self._pending = sorted(self._pending + fresh, key=lambda t: t.first_offset, reverse=True)

    def _start_aborted_up_to(self, offset: int) -> None:
        pending = self._pending
        while pending and pending[-1].first_offset <= offset:
            txn = pending.pop()
            self._ongoing_aborted.setdefault(txn.producer_id, _OngoingAbort(txn))

    def on_batch_read(self, header: RecordBatchHeader) -> bool:
        """A data batch met in offset order; True when it belongs to an aborted transaction."""
        self._start_aborted_up_to(header.last_offset)
        if not header.is_transactional:
            return False
        ongoing = self._ongoing_aborted.get(header.producer_id)
        if ongoing is None:
            self._ongoing_committed.add(header.producer_id)
            return False
        ongoing.observed = True
        return True

    def on_control_batch_read(self, header: RecordBatchHeader, marker: EndTransactionMarker | None) -> bool:
        """A control batch met in offset order (`marker` None: emptied by an earlier
        cleaning); True when it may be discarded (no data of its transaction remains)."""
        self._start_aborted_up_to(header.last_offset)
        if marker is None:
            return True
        producer_id = header.producer_id
        if marker.commit:
            if producer_id in self._ongoing_committed:
                self._ongoing_committed.discard(producer_id)
                return False
            return True
        ongoing = self._ongoing_aborted.pop(producer_id, None)
        if ongoing is not None and ongoing.observed:
            if self.cleaned_index is not None:
                self.cleaned_index.append(ongoing.txn)
            return False
        return True
