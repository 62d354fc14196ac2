"""One transactional id's state (Kafka's TransactionMetadata and TransactionState).

A transition is prepared (the target state is recorded as `pending`), written to
`__transaction_state`, and only then applied; while one is pending, requests for the id
answer CONCURRENT_TRANSACTIONS.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from loglake.groups.api import TopicPartition

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
MAX_PRODUCER_EPOCH = 32767  # Short.MAX_VALUE: past it the coordinator takes a new producer id


class TransactionState(enum.IntEnum):
    """Kafka's states with their ids (the TransactionStatus byte of the log value)."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def display_name(self) -> str:
        """The name DescribeTransactions / ListTransactions report (Kafka's stateName)."""
        return "".join(part.capitalize() for part in self.name.split("_"))


# Kafka's TransactionState.validPreviousStates.
VALID_PREVIOUS_STATES: dict[TransactionState, frozenset[TransactionState]] = {
    TransactionState.EMPTY: frozenset(
        {TransactionState.EMPTY, TransactionState.COMPLETE_COMMIT, TransactionState.COMPLETE_ABORT}
    ),
    TransactionState.ONGOING: frozenset(
        {
            TransactionState.ONGOING,
            TransactionState.EMPTY,
            TransactionState.COMPLETE_COMMIT,
            TransactionState.COMPLETE_ABORT,
        }
    ),
    TransactionState.PREPARE_COMMIT: frozenset({TransactionState.ONGOING}),
    TransactionState.PREPARE_ABORT: frozenset({TransactionState.ONGOING, TransactionState.PREPARE_EPOCH_FENCE}),
    TransactionState.COMPLETE_COMMIT: frozenset({TransactionState.PREPARE_COMMIT}),
    TransactionState.COMPLETE_ABORT: frozenset({TransactionState.PREPARE_ABORT}),
    TransactionState.DEAD: frozenset(
        {TransactionState.EMPTY, TransactionState.COMPLETE_COMMIT, TransactionState.COMPLETE_ABORT}
    ),
    TransactionState.PREPARE_EPOCH_FENCE: frozenset({TransactionState.ONGOING}),
}


class IllegalStateTransition(Exception):
    """A transition Kafka's state machine does not allow (a coordinator bug, not bad input)."""


@dataclass
class TransactionMetadata:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    txn_timeout_ms: int
    state: TransactionState
    partitions: set[TopicPartition] = field(default_factory=set)
    txn_start_timestamp: int = -1
    txn_last_update_timestamp: int = -1
    # The epoch before the last bump: a retried InitProducerId (KIP-360) carrying it is answered.
    last_producer_epoch: int = NO_PRODUCER_EPOCH
    pending: TransactionState | None = None

    def prepare(self, target: TransactionState) -> None:
        if self.pending is not None:
            raise IllegalStateTransition(f"{self.transactional_id}: {self.pending.name} is already pending")
        if self.state not in VALID_PREVIOUS_STATES[target]:
            raise IllegalStateTransition(f"{self.transactional_id}: {self.state.name} -> {target.name}")
        self.pending = target

    def complete(self, target: TransactionState) -> None:
        """The write of the pending `target` succeeded: it is the state now."""
        if self.pending is not target:
            raise IllegalStateTransition(f"{self.transactional_id}: completing {target.name}, pending {self.pending}")
        self.state, self.pending = target, None

    def abandon(self) -> None:
        """The write failed: stay in the current state."""
        self.pending = None
