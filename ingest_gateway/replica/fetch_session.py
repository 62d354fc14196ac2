"""Fetch sessions (KIP-227): Kafka's FetchSessionCache and FetchManager, server side.

A fetcher that reads many partitions need not name them all in every Fetch. Its first
request (a full one, session epoch 0) creates a session, which remembers each partition's
request data (fetch offset, max bytes, epochs) and what the last response told the
fetcher (high watermark, log start offset). Later requests (incremental, epoch 1, 2, ...)
name only the partitions that changed, and `forgotten_topics_data` removes some; the
answer holds only partitions with something new: records, a moved high watermark or log
start offset, or an error. Epoch -1 means no session (a sessionless full fetch).

Sessions live in memory, per broker, in a cache of `max.incremental.fetch.session.cache.slots`
entries. When it is full, a new session may evict an existing one, as Kafka's do: one unused
for `min.incremental.fetch.session.eviction.ms`, else the least valuable one (a consumer's
before a follower's, a smaller before a larger, but never one younger than the eviction
time, except that a follower's new session may evict a young consumer's).

Everything here runs on the broker's event loop: no locks. The handler (apis/fetch_apis.py) asks
`FetchManager.new_context` for a context, reads the partitions the context lists, and hands
the per-partition answers to `context.respond`, which keeps only what the session must see.
"""

from __future__ import annotations

import functools
import logging
import random
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from loglake.cluster.partition import monotonic_ms
from loglake.errors import ErrorCode
from loglake.protocol.bodies import FetchResponsePartitionData
from loglake.protocol.types import records_size

log = logging.getLogger(__name__)

INVALID_SESSION_ID = 0
INITIAL_EPOCH = 0  # a full request that creates a session
FINAL_EPOCH = -1  # a full request without a session (or closing one)
ZERO_UUID = uuid.UUID(int=0)
MAX_SESSION_ID = 0x7FFFFFFF

DEFAULT_CACHE_SLOTS = 1000  # max.incremental.fetch.session.cache.slots
DEFAULT_EVICTION_MS = 120_000  # min.incremental.fetch.session.eviction.ms

# The wire body of one partition of a Fetch response.
PartitionResponse = FetchResponsePartitionData


# Topic ids are kept as strings; fetches (both ways) compare and send them as UUIDs.
parse_topic_id = functools.lru_cache(maxsize=65536)(uuid.UUID)


def next_epoch(epoch: int) -> int:
    """The session epoch after `epoch` (Kafka's FetchMetadata.nextEpoch)."""
    if epoch < 0:
        return FINAL_EPOCH
    return 1 if epoch == 0x7FFFFFFF else epoch + 1


class TopicIdPartition(NamedTuple):
    """A partition as a Fetch names it: by id from v13 (name None while the id is unknown),
    by name before (id zero)."""

    topic_id: uuid.UUID
    topic: str | None
    partition: int


@dataclass(slots=True)
class PartitionRequest:
    """One partition's request data, from the request or from the session."""

    fetch_offset: int
    max_bytes: int
    current_leader_epoch: int = -1
    last_fetched_epoch: int = -1
    log_start_offset: int = -1


def response_records_size(response: PartitionResponse) -> int:
    records = response.get("records")
    return 0 if records is None else records_size(records)


@dataclass(slots=True)
class CachedPartition:
    """A partition of a session: its last request data and what the fetcher was last told."""

    tp: TopicIdPartition
    request: PartitionRequest
    high_watermark: int = -1
    log_start_offset: int = -1

    def must_respond(self, response: PartitionResponse) -> bool:
        """Whether an incremental answer includes this partition; remembers what it says
        (Kafka's CachedPartition.maybeUpdateResponseData)."""
        must = response_records_size(response) > 0
        if self.high_watermark != response["high_watermark"]:
            must = True
            self.high_watermark = response["high_watermark"]
        if self.log_start_offset != response["log_start_offset"]:
            must = True
            self.log_start_offset = response["log_start_offset"]
        if response.get("preferred_read_replica", -1) >= 0:
            must = True
        if response["error_code"]:
            # Forget the HW so that the partition is sent again once the error is gone.
            self.high_watermark = -1
            must = True
        return must


SessionKey = tuple[Any, int]  # (topic id or topic name, partition)


@dataclass(eq=False)
class FetchSession:
    id: int
    privileged: bool  # created by a follower
    uses_topic_ids: bool
    creation_ms: int
    last_used_ms: int
    epoch: int
    # In fetch order; a partition that returned records moves to the end (fairness under max_bytes).
    partitions: dict[SessionKey, CachedPartition] = field(default_factory=dict)
    # The size and evictability as of the last touch (Kafka's EvictableKey, taken at touch time).
    cached_size: int = -1
    evictable_by_all: bool = False
    evictable_by_privileged: bool = False

    def key(self, tp: TopicIdPartition) -> SessionKey:
        return (tp.topic_id if self.uses_topic_ids else tp.topic, tp.partition)

    def update(
        self, fetch_data: Iterable[tuple[TopicIdPartition, PartitionRequest]], to_forget: Iterable[TopicIdPartition]
    ) -> tuple[int, int, int]:
        """Apply an incremental request: (added, updated, removed) partition counts."""
        added = updated = removed = 0
        for tp, request in fetch_data:
            cached = self.partitions.get(self.key(tp))
            if cached is None:
                self.partitions[self.key(tp)] = CachedPartition(tp, request)
                added += 1
            else:
                cached.request = request
                updated += 1
        for tp in to_forget:
            if self.partitions.pop(self.key(tp), None) is not None:
                removed += 1
        return added, updated, removed

    def evictable_key(self, size: int | None = None) -> tuple[bool, int, int]:
        return (self.privileged, self.cached_size if size is None else size, self.id)


class FetchSessionCache:
    """The sessions of this broker, bounded as Kafka's FetchSessionCache."""

    def __init__(
        self,
        max_entries: int = DEFAULT_CACHE_SLOTS,
        eviction_ms: int = DEFAULT_EVICTION_MS,
        clock: Callable[[], int] = monotonic_ms,
    ) -> None:
        self.max_entries = max_entries
        self.eviction_ms = eviction_ms
        self.clock = clock
        self.sessions: dict[int, FetchSession] = {}
        self.evictions = 0

    def __len__(self) -> int:
        return len(self.sessions)

    def get(self, session_id: int) -> FetchSession | None:
        return self.sessions.get(session_id)

    @property
    def total_partitions(self) -> int:
        return sum(max(s.cached_size, 0) for s in self.sessions.values())

    def maybe_create_session(
        self,
        privileged: bool,
        uses_topic_ids: bool,
        partitions: list[CachedPartition],
    ) -> int:
        """A new session holding `partitions`, if there is room (maybe after an eviction):
        its id, else INVALID_SESSION_ID."""
        now = self.clock()
        if len(self.sessions) >= self.max_entries and not self._try_evict(privileged, len(partitions), now):
            log.debug("no fetch session created (privileged=%s, %d partitions)", privileged, len(partitions))
            return INVALID_SESSION_ID
        session = FetchSession(self._new_session_id(), privileged, uses_topic_ids, now, now, next_epoch(INITIAL_EPOCH))
        session.partitions = {session.key(c.tp): c for c in partitions}
        self.sessions[session.id] = session
        self.touch(session, now)
        log.debug("created fetch session %d (privileged=%s, %d partitions)", session.id, privileged, len(partitions))
        return session.id

    def _new_session_id(self) -> int:
        while True:
            session_id = random.randint(1, MAX_SESSION_ID)
            if session_id not in self.sessions:
                return session_id

    def _try_evict(self, privileged: bool, size: int, now: int) -> bool:
        """Kafka's tryEvict: a new entry A may evict B if B is stale (unused for the
        eviction time), or else if B is the least valuable evictable entry and A is worth
        more (privileged over not, then more partitions; a tie keeps B)."""
        if not self.sessions:
            return False
        stale = min(self.sessions.values(), key=lambda s: (s.last_used_ms, s.id))
        if now - stale.last_used_ms > self.eviction_ms:
            self._evict(stale)
            return True
        candidates = [
            s for s in self.sessions.values() if (s.evictable_by_privileged if privileged else s.evictable_by_all)
        ]
        if not candidates:
            return False
        victim = min(candidates, key=FetchSession.evictable_key)
        if (privileged, size, 0) < victim.evictable_key():
            return False
        self._evict(victim)
        return True

    def _evict(self, session: FetchSession) -> None:
        log.debug(
            "evicting fetch session %d (privileged=%s, %d partitions)",
            session.id,
            session.privileged,
            session.cached_size,
        )
        self.remove(session.id)
        self.evictions += 1

    def remove(self, session_id: int) -> FetchSession | None:
        return self.sessions.pop(session_id, None)

    def touch(self, session: FetchSession, now: int) -> None:
        """Record a use: the last-used time, size and evictability the eviction rules see."""
        session.last_used_ms = now
        session.cached_size = len(session.partitions)
        old_enough = now - session.creation_ms > self.eviction_ms
        session.evictable_by_privileged = not session.privileged or old_enough
        session.evictable_by_all = old_enough


@dataclass(frozen=True)
class FetchResult:
    """What a Fetch response says at the top: error, session id, and the partitions."""

    error: ErrorCode
    session_id: int
    partitions: list[tuple[TopicIdPartition, PartitionResponse]]


class FetchContext:
    """How one Fetch request relates to sessions. `partitions()` lists what to read,
    `respond()` turns the answers into the response (and updates the session)."""

    def partitions(self) -> Iterable[tuple[TopicIdPartition, PartitionRequest]]:
        return ()

    def respond(self, answers: list[tuple[TopicIdPartition, PartitionResponse]]) -> FetchResult:
        raise NotImplementedError

    def omits(self, tp: TopicIdPartition, high_watermark: int, log_start_offset: int) -> bool:
        """Whether `respond` would leave out an answer for `tp` without records or error that
        says these offsets (nothing new for the session), so the handler need not build it."""
        return False


@dataclass
class SessionErrorContext(FetchContext):
    """A request with a session error: no partition is read, the error goes back alone."""

    error: ErrorCode

    def respond(self, answers: list[tuple[TopicIdPartition, PartitionResponse]]) -> FetchResult:
        return FetchResult(self.error, INVALID_SESSION_ID, [])


@dataclass
class SessionlessContext(FetchContext):
    """A full request that creates no session (epoch -1)."""

    fetch_data: list[tuple[TopicIdPartition, PartitionRequest]]

    def partitions(self) -> Iterable[tuple[TopicIdPartition, PartitionRequest]]:
        return self.fetch_data

    def respond(self, answers: list[tuple[TopicIdPartition, PartitionResponse]]) -> FetchResult:
        return FetchResult(ErrorCode.NONE, INVALID_SESSION_ID, answers)


@dataclass
class FullContext(SessionlessContext):
    """A full request with epoch 0: the answer creates a session if the cache has room."""

    cache: FetchSessionCache
    uses_topic_ids: bool
    privileged: bool  # a follower's

    def respond(self, answers: list[tuple[TopicIdPartition, PartitionResponse]]) -> FetchResult:
        requests = dict(self.fetch_data)
        cached = [
            CachedPartition(tp, requests[tp], response["high_watermark"], response["log_start_offset"])
            for tp, response in answers
        ]
        session_id = self.cache.maybe_create_session(self.privileged, self.uses_topic_ids, cached)
        return FetchResult(ErrorCode.NONE, session_id, answers)


@dataclass
class IncrementalContext(FetchContext):
    """An incremental request in a session (already updated and moved to the next epoch)."""

    session: FetchSession
    request_epoch: int
    topic_name: Callable[[uuid.UUID], str | None]

    def partitions(self) -> Iterable[tuple[TopicIdPartition, PartitionRequest]]:
        out = []
        for cached in self.session.partitions.values():
            if cached.tp.topic is None and self.session.uses_topic_ids:
                # An id unknown when it was added may be known now.
                name = self.topic_name(cached.tp.topic_id)
                if name is not None:
                    cached.tp = cached.tp._replace(topic=name)
            out.append((cached.tp, cached.request))
        return out

    def omits(self, tp: TopicIdPartition, high_watermark: int, log_start_offset: int) -> bool:
        # What CachedPartition.must_respond says of such an answer (it would change nothing).
        cached = self.session.partitions.get(self.session.key(tp))
        return (
            cached is not None
            and cached.high_watermark == high_watermark
            and cached.log_start_offset == log_start_offset
        )

    def respond(self, answers: list[tuple[TopicIdPartition, PartitionResponse]]) -> FetchResult:
        session = self.session
        if session.epoch != next_epoch(self.request_epoch):
            # Another request of this session came in while this one waited.
            log.info(
                "fetch session %d: expected epoch %d, now %d", session.id, next_epoch(self.request_epoch), session.epoch
            )
            return FetchResult(ErrorCode.INVALID_FETCH_SESSION_EPOCH, session.id, [])
        kept = []
        for tp, response in answers:
            key = session.key(tp)
            cached = session.partitions.get(key)
            if cached is None or not cached.must_respond(response):
                continue
            kept.append((tp, response))
            if response_records_size(response) > 0:
                session.partitions[key] = session.partitions.pop(key)
        return FetchResult(ErrorCode.NONE, session.id, kept)


class FetchManager:
    """Kafka's FetchManager: picks the context of each Fetch request."""

    def __init__(self, cache: FetchSessionCache) -> None:
        self.cache = cache

    def new_context(
        self,
        version: int,
        session_id: int,
        epoch: int,
        is_follower: bool,
        fetch_data: list[tuple[TopicIdPartition, PartitionRequest]],
        to_forget: list[TopicIdPartition],
        topic_name: Callable[[uuid.UUID], str | None],
    ) -> FetchContext:
        uses_topic_ids = version >= 13
        if epoch in (INITIAL_EPOCH, FINAL_EPOCH):
            # A full request closes the session it names.
            if session_id != INVALID_SESSION_ID:
                self.cache.remove(session_id)
            if epoch == FINAL_EPOCH:
                return SessionlessContext(fetch_data)
            return FullContext(fetch_data, self.cache, uses_topic_ids, is_follower)
        session = self.cache.get(session_id)
        if session is None:
            return SessionErrorContext(ErrorCode.FETCH_SESSION_ID_NOT_FOUND)
        if session.epoch != epoch:
            return SessionErrorContext(ErrorCode.INVALID_FETCH_SESSION_EPOCH)
        if session.uses_topic_ids != uses_topic_ids:
            return SessionErrorContext(ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR)
        session.update(fetch_data, to_forget)
        if not session.partitions:
            # Everything forgotten: the session ends, and this answer is sessionless.
            self.cache.remove(session.id)
            return SessionlessContext(fetch_data)
        self.cache.touch(session, self.cache.clock())
        session.epoch = next_epoch(session.epoch)
        return IncrementalContext(session, epoch, topic_name)
