"""Reading one offset range in a Spark Python worker: Fetch from the partition's leader,
decode each answer into one Arrow batch, follow leader moves, apply failOnDataLoss."""

from __future__ import annotations

import time
from collections.abc import Iterator

from loglake.errors import ErrorCode
from loglake.spark.arrow_decoder import DecodedFetch, decode_fetch, decode_fetch_flagging_aborted
from loglake.spark.offset_ranges import OffsetRange, list_offsets, report_data_loss
from loglake.spark.options import ReadOptions
from loglake.spark.protocol_client import (
    EARLIEST_TIMESTAMP,
    RETRIABLE_PARTITION_ERRORS,
    BrokerUnavailable,
)

_RETRY_BACKOFF_S = 0.1


class _RetryDeadline:
    """How long one offset may keep failing (a moving leader, a catching-up high watermark):
    the request timeout from the first failure, restarted by any progress."""

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self.until: float | None = None

    def expired(self) -> bool:
        """Start the clock or say it ran out; sleeps the retry backoff while it runs."""
        now = time.monotonic()
        if self.until is None:
            self.until = now + self.timeout_s
        elif now > self.until:
            return True
        time.sleep(_RETRY_BACKOFF_S)
        return False

    def reset(self) -> None:
        self.until = None


def read_range(options: ReadOptions, offset_range: OffsetRange, flag_aborted: bool = False) -> Iterator[DecodedFetch]:
    """The records of `offset_range`, one Arrow batch of `options.columns` per fetch answer
    that has any, with the offset the next fetch starts at. With `flag_aborted` (and
    read_committed options, so that Fetch lists the aborted transactions): every record a
    read_uncommitted reader sees, with an `aborted` column (`options.columns` must hold `offset`)."""
    decode = decode_fetch_flagging_aborted if flag_aborted else decode_fetch
    tp = offset_range.topic_partition
    where = f"{tp.topic}-{tp.partition}"
    max_bytes = options.max_partition_fetch_bytes
    offset = offset_range.start
    with options.client() as client:
        deadline = _RetryDeadline(client.timeout_s)
        while offset < offset_range.end:
            address = client.leader_address(tp)
            error = ErrorCode.LEADER_NOT_AVAILABLE
            fetched = None
            if address is not None:
                try:
                    fetched = client.fetch_from(address, tp, offset, max_bytes)
                    error = fetched.error
                except BrokerUnavailable:
                    error = ErrorCode.NOT_LEADER_OR_FOLLOWER
            if error in RETRIABLE_PARTITION_ERRORS:
                # The leader moved or is moving: ask for metadata again until the request timeout.
                if address is not None and deadline.expired():
                    raise TimeoutError(f"cannot fetch {where} at offset {offset}: {error.name}")
                client.metadata([tp.topic])
                continue
            if error == ErrorCode.OFFSET_OUT_OF_RANGE:
                (log_start,) = list_offsets(client, {tp: EARLIEST_TIMESTAMP}).values()
                if offset < log_start:
                    report_data_loss(
                        options.fail_on_data_loss,
                        f"Cannot fetch offset {offset} of {where}: the log now starts at {log_start}",
                    )
                    offset = log_start
                    continue
                report_data_loss(
                    options.fail_on_data_loss, f"Cannot fetch offset {offset} of {where}: the log ends before it"
                )
                return
            if error != ErrorCode.NONE:
                raise RuntimeError(f"Fetch of {where} at offset {offset} failed: {error.name}")
            assert fetched is not None
            decoded = decode(
                fetched.records,
                tp.topic,
                tp.partition,
                offset,
                offset_range.end,
                options.columns,
                fetched.aborted,
            )
            if decoded.batch.num_rows:
                yield decoded
            if decoded.next_offset > offset:
                offset = decoded.next_offset
                deadline.reset()
            elif len(fetched.records):
                max_bytes *= 2  # the next batch is larger than the fetch size
            elif deadline.expired():
                if fetched.visible_end > offset:
                    raise TimeoutError(f"{where}: no records at offset {offset}, below the high watermark")
                # The range was planned below the high watermark, which has gone back for
                # good: an unclean leader election truncated the log.
                report_data_loss(
                    options.fail_on_data_loss,
                    f"Cannot fetch offsets {offset}..{offset_range.end - 1} of {where}: the log now ends at "
                    f"{fetched.visible_end}",
                )
                return
            # else: a new leader's high watermark can lag the old one's for a moment; retry.
