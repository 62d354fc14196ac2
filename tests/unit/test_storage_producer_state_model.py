"""A hypothesis state machine: idempotent appends, retries, epoch bumps, fenced producers,
rolls, truncation, clean reopen and crash against a plain list of the batches in the log,
from which the expected producer state and every append's outcome are derived."""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from loglake.config import LogConfig
from loglake.errors import ErrorCode, KafkaError
from loglake.record.batch import encode_batch
from loglake.storage.log import Log
from loglake.storage.producer_state import NUM_BATCHES_TO_RETAIN
from loglake.storage.segment import now_ms

NOW = now_ms()
PRODUCERS = st.sampled_from([11, 12])


@dataclass(frozen=True)
class Appended:
    producer_id: int
    epoch: int
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int


def encode(producer_id: int, epoch: int, seq: int, count: int) -> bytes:
    rows = [(None, b"v", [], None)] * count
    return encode_batch(rows, NOW, producer_id=producer_id, producer_epoch=epoch, base_sequence=seq)


class ProducerStateMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.tmp = Path(tempfile.mkdtemp())
        self.config = LogConfig(segment_bytes=500, index_interval_bytes=80)
        self.generation = 0
        self.log = Log.open(self.tmp / "p-0", self.config)
        self.appended: list[Appended] = []  # idempotent batches in log order
        self.leo = 0

    def teardown(self) -> None:
        self.log.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    # The model ---------------------------------------------------------------------------

    def current(self, producer_id: int) -> list[Appended]:
        """The producer's batches of its latest epoch, oldest first ([] if unknown)."""
        mine = [a for a in self.appended if a.producer_id == producer_id]
        return [a for a in mine if a.epoch == mine[-1].epoch] if mine else []

    def expected_state(self) -> dict[int, tuple[int, list[tuple[int, int, int, int]]]]:
        state = {}
        for producer_id in {a.producer_id for a in self.appended}:
            batches = self.current(producer_id)[-NUM_BATCHES_TO_RETAIN:]
            state[producer_id] = (
                batches[-1].epoch,
                [(b.first_seq, b.last_seq, b.first_offset, b.last_offset) for b in batches],
            )
        return state

    def append_new(self, producer_id: int, epoch: int, seq: int, count: int) -> None:
        info = self.log.append_as_leader(encode(producer_id, epoch, seq, count), leader_epoch=0)
        assert not info.duplicate and info.first_offset == self.leo
        last_seq = (seq + count - 1) & 0x7FFFFFFF
        self.appended.append(Appended(producer_id, epoch, seq, last_seq, self.leo, self.leo + count - 1))
        self.leo += count

    def expect_error(self, code: ErrorCode, records: bytes) -> None:
        try:
            self.log.append_as_leader(records, leader_epoch=0)
        except KafkaError as exc:
            assert exc.code == code, exc
        else:
            raise AssertionError(f"expected {code.name}")

    # Appends -----------------------------------------------------------------------------

    @rule(producer_id=PRODUCERS, count=st.integers(1, 3), near_wrap=st.booleans())
    def append_next(self, producer_id: int, count: int, near_wrap: bool) -> None:
        batches = self.current(producer_id)
        if batches:
            self.append_new(producer_id, batches[-1].epoch, (batches[-1].last_seq + 1) & 0x7FFFFFFF, count)
        else:
            # An unknown producer may start anywhere, here close to the wrap at Int32.MAX.
            self.append_new(producer_id, 0, 2**31 - 2 if near_wrap else 0, count)

    @rule(count=st.integers(1, 3))
    def append_without_producer_id(self, count: int) -> None:
        info = self.log.append_as_leader(encode(-1, -1, -1, count), leader_epoch=0)
        assert info.first_offset == self.leo
        self.leo += count

    @rule(producer_id=PRODUCERS, back=st.integers(0, NUM_BATCHES_TO_RETAIN + 1))
    def retry(self, producer_id: int, back: int) -> None:
        batches = self.current(producer_id)
        if back >= len(batches):
            return
        old = batches[-1 - back]
        records = encode(producer_id, old.epoch, old.first_seq, old.last_offset - old.first_offset + 1)
        if back >= NUM_BATCHES_TO_RETAIN:
            self.expect_error(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, records)
            return
        info = self.log.append_as_leader(records, leader_epoch=0)
        assert info.duplicate and (info.first_offset, info.last_offset) == (old.first_offset, old.last_offset)

    @rule(producer_id=PRODUCERS, start_at_zero=st.booleans())
    def bump_epoch(self, producer_id: int, start_at_zero: bool) -> None:
        batches = self.current(producer_id)
        epoch = batches[-1].epoch + 1 if batches else 0
        if start_at_zero or not batches:
            self.append_new(producer_id, epoch, 0, 1)
        else:
            self.expect_error(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, encode(producer_id, epoch, 1, 1))

    @rule(producer_id=PRODUCERS)
    def fenced_or_gap(self, producer_id: int) -> None:
        batches = self.current(producer_id)
        if not batches:
            return
        last = batches[-1]
        if last.epoch > 0:
            self.expect_error(ErrorCode.INVALID_PRODUCER_EPOCH, encode(producer_id, last.epoch - 1, 0, 1))
        gap = (last.last_seq + 2) & 0x7FFFFFFF
        self.expect_error(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, encode(producer_id, last.epoch, gap, 1))

    # Log operations ----------------------------------------------------------------------

    @rule()
    def roll(self) -> None:
        self.log.roll()

    @precondition(lambda self: self.appended)
    @rule(data=st.data())
    def truncate(self, data: st.DataObject) -> None:
        target = data.draw(st.sampled_from([a.first_offset for a in self.appended]))
        self.log.truncate_to(target)
        self.appended = [a for a in self.appended if a.first_offset < target]
        self.leo = target

    @rule()
    def reopen_cleanly(self) -> None:
        self.log.flush()
        self.log.close()
        self.log = Log.open(self.log.dir, self.config, recovery_point=self.leo, had_clean_shutdown=True)

    @rule()
    def crash(self) -> None:
        """Open a copy of the files as they are, without the snapshot a close writes."""
        self.generation += 1
        copy = self.tmp / f"p{self.generation}-0"
        shutil.copytree(self.log.dir, copy)
        self.log.close()
        self.log = Log.open(copy, self.config, had_clean_shutdown=False)

    @invariant()
    def state_matches(self) -> None:
        assert self.log.log_end_offset == self.leo
        actual = {
            pid: (e.producer_epoch, [(b.first_seq, b.last_seq, b.first_offset, b.last_offset) for b in e.batches])
            for pid, e in self.log.producer_state.producers.items()
        }
        assert actual == self.expected_state()


ProducerStateMachine.TestCase.settings = settings(
    max_examples=40, stateful_step_count=25, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
test_producer_state_against_model = ProducerStateMachine.TestCase
