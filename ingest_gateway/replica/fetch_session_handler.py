"""The fetcher's side of a fetch session (KIP-227), as Kafka's FetchSessionHandler.

A follower keeps one session with each leader it fetches from. The handler remembers
what the leader's session holds (each partition's last request data) and turns the
partitions the fetcher wants now into the next request: all of them in a full request
(epoch 0, which opens a session), else only those added or changed, plus the ones to
forget (epoch 1, 2, ...). The leader then answers only partitions with news.

Any doubt about the leader's view (a session error, a failed or lost request) sends the
next request full again; with the old session id it also closes that session.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from typing import Generic, TypeVar

from loglake.errors import ErrorCode

from ingest_gateway.replica.fetch_session import INITIAL_EPOCH, INVALID_SESSION_ID, PartitionRequest, next_epoch

# The caller's partition key (the replica fetcher's (topic, partition)).
K = TypeVar("K", bound=Hashable)


@dataclass(frozen=True)
class SessionFetchRequest(Generic[K]):
    """What the next Fetch request carries: session id and epoch, the partitions to send
    and the partitions to forget."""

    session_id: int
    epoch: int
    to_send: dict[K, PartitionRequest]
    to_forget: list[K]

    @property
    def full(self) -> bool:
        return self.epoch == INITIAL_EPOCH


class FetchSessionHandler(Generic[K]):
    def __init__(self) -> None:
        self.session_id = INVALID_SESSION_ID
        self.epoch = INITIAL_EPOCH
        self.uses_topic_ids = False
        # What the leader's session holds, as of the last answered request.
        self.session_partitions: dict[K, PartitionRequest] = {}

    def build(self, wanted: Mapping[K, PartitionRequest], uses_topic_ids: bool) -> SessionFetchRequest[K]:
        """The request for the partitions wanted now (keys are the caller's)."""
        if uses_topic_ids != self.uses_topic_ids:
            # A session lives with or without topic ids: a new one is needed.
            self.uses_topic_ids = uses_topic_ids
            self.reset()
        if self.epoch == INITIAL_EPOCH:
            return SessionFetchRequest(self.session_id, INITIAL_EPOCH, dict(wanted), [])
        held = self.session_partitions
        # The fetcher hands the same object back for an unchanged partition: `is` settles most.
        to_send = {
            key: request
            for key, request in wanted.items()
            if (before := held.get(key)) is not request and before != request
        }
        to_forget = [key for key in held if key not in wanted]
        return SessionFetchRequest(self.session_id, self.epoch, to_send, to_forget)

    def handle_response(self, request: SessionFetchRequest[K], error: int, session_id: int) -> bool:
        """Take the answer's top-level error and session id; False on a session error
        (the answer holds no partitions and the next request is full)."""
        if error:
            # An unknown session is gone; for other errors, close it with the next request.
            self.reset(close=error != ErrorCode.FETCH_SESSION_ID_NOT_FOUND)
            return False
        if session_id == INVALID_SESSION_ID:
            # No session (the cache was full, or everything was forgotten): full requests.
            self.session_id, self.epoch = INVALID_SESSION_ID, INITIAL_EPOCH
            self.session_partitions = {}
            return True
        if request.full:
            self.session_partitions = dict(request.to_send)
        else:
            self.session_partitions.update(request.to_send)
            for key in request.to_forget:
                self.session_partitions.pop(key, None)
        self.session_id, self.epoch = session_id, next_epoch(request.epoch)
        return True

    def reset(self, close: bool = True) -> None:
        """Send the next request full (closing the current session if `close`)."""
        if not close:
            self.session_id = INVALID_SESSION_ID
        self.epoch = INITIAL_EPOCH
        self.session_partitions = {}
