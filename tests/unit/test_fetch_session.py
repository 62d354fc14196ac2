"""Fetch sessions (KIP-227): the broker's session cache and contexts, and the fetcher's
session handler, without sockets (a fake clock drives eviction)."""

from __future__ import annotations

import uuid

import pytest

from ingest_gateway.replica.fetch_session import (
    FINAL_EPOCH,
    INITIAL_EPOCH,
    INVALID_SESSION_ID,
    ZERO_UUID,
    FetchManager,
    FetchSessionCache,
    FullContext,
    IncrementalContext,
    PartitionRequest,
    SessionErrorContext,
    SessionlessContext,
    TopicIdPartition,
    next_epoch,
)
from ingest_gateway.replica.fetch_session_handler import FetchSessionHandler
from loglake.errors import ErrorCode

EVICTION_MS = 1000


class Clock:
    def __init__(self) -> None:
        self.now = 10_000

    def __call__(self) -> int:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


def manager(clock: Clock, slots: int = 10) -> FetchManager:
    return FetchManager(FetchSessionCache(slots, EVICTION_MS, clock))


def tp(topic: str, p: int) -> TopicIdPartition:
    return TopicIdPartition(ZERO_UUID, topic, p)


def req(offset: int = 0) -> PartitionRequest:
    return PartitionRequest(offset, 1 << 20)


def answer(hw: int = 10, records: bytes = b"", error: int = 0, log_start: int = 0) -> dict:
    return {"error_code": error, "high_watermark": hw, "log_start_offset": log_start, "records": records}


def no_names(topic_id: uuid.UUID) -> None:
    return None


def open_session(m: FetchManager, partitions: list[TopicIdPartition], version: int = 12, follower: bool = False) -> int:
    ctx = m.new_context(version, 0, INITIAL_EPOCH, follower, [(p, req()) for p in partitions], [], no_names)
    assert isinstance(ctx, FullContext)
    result = ctx.respond([(p, answer()) for p in partitions])
    assert result.error == ErrorCode.NONE and result.session_id != INVALID_SESSION_ID
    return result.session_id


def incremental(m: FetchManager, session_id: int, epoch: int, data=(), forget=(), version: int = 12):
    return m.new_context(version, session_id, epoch, False, list(data), list(forget), no_names)


# The broker's side ---------------------------------------------------------------------------


def test_full_fetch_with_epoch_0_creates_a_session_and_epoch_minus_1_does_not(clock):
    m = manager(clock)
    a0, a1 = tp("a", 0), tp("a", 1)
    session_id = open_session(m, [a0, a1])
    session = m.cache.get(session_id)
    assert session is not None and session.epoch == 1 and list(session.partitions) == [("a", 0), ("a", 1)]

    ctx = m.new_context(12, 0, FINAL_EPOCH, False, [(a0, req())], [], no_names)
    assert isinstance(ctx, SessionlessContext) and not isinstance(ctx, FullContext)
    result = ctx.respond([(a0, answer())])
    assert result.session_id == INVALID_SESSION_ID and len(result.partitions) == 1
    assert len(m.cache) == 1


def test_incremental_fetch_reads_the_whole_session_and_answers_only_changes(clock):
    m = manager(clock)
    a0, a1, a2 = tp("a", 0), tp("a", 1), tp("a", 2)
    session_id = open_session(m, [a0, a1, a2])  # each answered HW 10, log start 0

    ctx = incremental(m, session_id, 1, data=[(a1, req(5))])
    assert isinstance(ctx, IncrementalContext)
    assert [(p, r.fetch_offset) for p, r in ctx.partitions()] == [(a0, 0), (a1, 5), (a2, 0)]
    result = ctx.respond([(a0, answer()), (a1, answer(records=b"xx")), (a2, answer(hw=11))])
    assert result.error == ErrorCode.NONE and result.session_id == session_id
    # a0 unchanged is left out; new records and a moved HW are news.
    assert [p for p, _ in result.partitions] == [a1, a2]
    # A partition that returned records goes to the end (fairness under max_bytes).
    assert list(m.cache.get(session_id).partitions) == [("a", 0), ("a", 2), ("a", 1)]

    ctx = incremental(m, session_id, 2)
    result = ctx.respond([(p, answer(hw=11 if p == a2 else 10)) for p, _ in ctx.partitions()])
    assert result.partitions == []
    ctx = incremental(m, session_id, 3)
    assert [p for p, _ in ctx.respond([(a0, answer(log_start=3)), (a1, answer()), (a2, answer(hw=11))]).partitions] == [
        a0
    ]


def test_errors_are_always_answered_and_the_partition_is_resent_once_they_clear(clock):
    m = manager(clock)
    a0 = tp("a", 0)
    session_id = open_session(m, [a0])
    error = answer(hw=-1, error=ErrorCode.NOT_LEADER_OR_FOLLOWER, log_start=-1)
    assert len(incremental(m, session_id, 1).respond([(a0, error)]).partitions) == 1
    assert len(incremental(m, session_id, 2).respond([(a0, error)]).partitions) == 1
    assert len(incremental(m, session_id, 3).respond([(a0, answer())]).partitions) == 1
    assert incremental(m, session_id, 4).respond([(a0, answer())]).partitions == []


def test_incremental_requests_add_update_and_forget_partitions(clock):
    m = manager(clock)
    a0, a1, b0 = tp("a", 0), tp("a", 1), tp("b", 0)
    session_id = open_session(m, [a0, a1])
    ctx = incremental(m, session_id, 1, data=[(b0, req(7)), (a0, req(3))], forget=[a1])
    assert [(p, r.fetch_offset) for p, r in ctx.partitions()] == [(a0, 3), (b0, 7)]
    # A new partition is news on its first answer even with nothing in it.
    assert [p for p, _ in ctx.respond([(a0, answer()), (b0, answer())]).partitions] == [b0]
    assert m.cache.get(session_id).epoch == 2
    assert m.cache.total_partitions == 2

    # Forgetting everything ends the session; the answer is sessionless.
    ctx = incremental(m, session_id, 2, forget=[a0, b0])
    assert isinstance(ctx, SessionlessContext)
    assert ctx.respond([]).session_id == INVALID_SESSION_ID
    assert m.cache.get(session_id) is None


def test_session_errors(clock):
    m = manager(clock)
    a0 = tp("a", 0)
    session_id = open_session(m, [a0])

    ctx = incremental(m, session_id + 1, 1)
    assert isinstance(ctx, SessionErrorContext) and ctx.error == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    result = ctx.respond([])
    assert (result.error, result.session_id, result.partitions) == (ErrorCode.FETCH_SESSION_ID_NOT_FOUND, 0, [])
    assert incremental(m, session_id, 2).respond([]).error == ErrorCode.INVALID_FETCH_SESSION_EPOCH
    # A session created without topic ids cannot continue with them (v13+), nor the reverse.
    assert incremental(m, session_id, 1, version=13).respond([]).error == ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR
    by_id = open_session(m, [TopicIdPartition(uuid.uuid4(), "b", 0)], version=17)
    assert incremental(m, by_id, 1, version=12).respond([]).error == ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR
    # The session survives those errors.
    assert incremental(m, session_id, 1).respond([(a0, answer())]).error == ErrorCode.NONE


def test_a_request_overtaken_by_another_of_its_session_gets_invalid_epoch(clock):
    m = manager(clock)
    a0 = tp("a", 0)
    session_id = open_session(m, [a0])
    slow = incremental(m, session_id, 1)  # e.g. long-polling
    fast = incremental(m, session_id, 2)
    assert fast.respond([(a0, answer())]).error == ErrorCode.NONE
    result = slow.respond([(a0, answer(records=b"x"))])
    assert result.error == ErrorCode.INVALID_FETCH_SESSION_EPOCH and result.partitions == []


def test_a_full_request_closes_the_session_it_names(clock):
    m = manager(clock)
    a0 = tp("a", 0)
    session_id = open_session(m, [a0])
    ctx = m.new_context(12, session_id, INITIAL_EPOCH, False, [(a0, req())], [], no_names)
    new_id = ctx.respond([(a0, answer())]).session_id
    assert m.cache.get(session_id) is None and m.cache.get(new_id) is not None
    m.new_context(12, new_id, FINAL_EPOCH, False, [(a0, req())], [], no_names)
    assert len(m.cache) == 0


def test_epochs_wrap_to_1():
    assert next_epoch(0) == 1 and next_epoch(41) == 42
    assert next_epoch(0x7FFFFFFF) == 1
    assert next_epoch(FINAL_EPOCH) == FINAL_EPOCH


def test_unknown_topic_ids_stay_in_the_session_and_resolve_later(clock):
    m = manager(clock)
    topic_id = uuid.uuid4()
    unknown = TopicIdPartition(topic_id, None, 0)
    session_id = open_session(m, [unknown], version=13)
    names = {}
    ctx = m.new_context(13, session_id, 1, False, [], [], names.get)
    assert [p for p, _ in ctx.partitions()] == [unknown]
    names[topic_id] = "late"
    ctx = m.new_context(13, session_id, 2, False, [], [], names.get)
    assert [p for p, _ in ctx.partitions()] == [TopicIdPartition(topic_id, "late", 0)]


# Eviction ----------------------------------------------------------------------------------


def test_a_full_cache_creates_no_session_while_all_are_young(clock):
    m = manager(clock, slots=2)
    open_session(m, [tp("a", 0)])
    open_session(m, [tp("a", 1)])
    ctx = m.new_context(12, 0, INITIAL_EPOCH, False, [(tp("b", 0), req())] * 1, [], no_names)
    assert ctx.respond([(tp("b", 0), answer())]).session_id == INVALID_SESSION_ID
    assert len(m.cache) == 2 and m.cache.evictions == 0


def test_a_stale_session_is_evicted_first(clock):
    m = manager(clock, slots=2)
    first = open_session(m, [tp("a", p) for p in range(5)])
    clock.now += 10
    second = open_session(m, [tp("b", 0)])
    clock.now += EVICTION_MS + 1 - 10
    incremental(m, second, 1).respond([])  # touched: only `first` is stale
    third = open_session(m, [tp("c", 0)])
    assert m.cache.get(first) is None and m.cache.get(second) and m.cache.get(third)
    assert m.cache.evictions == 1


def test_eviction_by_value_once_sessions_are_old_enough(clock):
    m = manager(clock, slots=2)
    small = open_session(m, [tp("a", 0)])
    big = open_session(m, [tp("b", p) for p in range(3)])
    clock.now += EVICTION_MS + 1
    # Both are touched again (not stale) after the eviction time: evictable by all.
    incremental(m, small, 1).respond([])
    incremental(m, big, 1).respond([])
    # A session smaller than every candidate evicts nothing...
    tiny = [tp("c", 0)]
    assert m.new_context(12, 0, 0, False, [(p, req()) for p in tiny], [], no_names).respond([]).session_id == 0
    # ...a larger one evicts the smallest.
    two = [tp("d", 0), tp("d", 1)]
    new_id = (
        m.new_context(12, 0, 0, False, [(p, req()) for p in two], [], no_names)
        .respond([(p, answer()) for p in two])
        .session_id
    )
    assert new_id and m.cache.get(small) is None and m.cache.get(big) is not None


def test_a_follower_evicts_a_young_consumer_session_but_not_a_young_follower_session(clock):
    m = manager(clock, slots=1)
    consumer = open_session(m, [tp("a", p) for p in range(10)])
    follower = open_session(m, [tp("b", 0)], follower=True)
    assert m.cache.get(consumer) is None and m.cache.get(follower) is not None
    # Another follower cannot evict a young follower session, a consumer even less.
    assert m.new_context(12, 0, 0, True, [(tp("c", 0), req())], [], no_names).respond([]).session_id == 0
    assert m.new_context(12, 0, 0, False, [(tp("c", 0), req())], [], no_names).respond([]).session_id == 0


# The fetcher's side ------------------------------------------------------------------------


def test_handler_sends_full_then_only_changes_and_forgets():
    h = FetchSessionHandler()
    wanted = {("a", 0): req(0), ("a", 1): req(0)}
    first = h.build(wanted, False)
    assert first.full and first.session_id == 0 and first.to_send == wanted
    assert h.handle_response(first, 0, 77)
    assert (h.session_id, h.epoch) == (77, 1)

    second = h.build({("a", 0): req(5), ("a", 1): req(0), ("b", 0): req(0)}, False)
    assert not second.full and (second.session_id, second.epoch) == (77, 1)
    assert second.to_send == {("a", 0): req(5), ("b", 0): req(0)} and second.to_forget == []
    assert h.handle_response(second, 0, 77)

    third = h.build({("a", 0): req(5)}, False)
    assert third.to_send == {} and sorted(third.to_forget) == [("a", 1), ("b", 0)] and third.epoch == 2
    assert h.handle_response(third, 0, 77)
    assert h.session_partitions == {("a", 0): req(5)} and h.epoch == 3


def test_handler_after_errors_and_failures_sends_full_requests():
    h = FetchSessionHandler()
    wanted = {("a", 0): req(0)}
    h.handle_response(h.build(wanted, False), 0, 77)
    # A wrong epoch: the next full request names the session, which closes it.
    assert not h.handle_response(h.build(wanted, False), ErrorCode.INVALID_FETCH_SESSION_EPOCH, 0)
    request = h.build(wanted, False)
    assert request.full and request.session_id == 77
    # An unknown session: start from nothing.
    h.handle_response(request, 0, 78)
    assert not h.handle_response(h.build(wanted, False), ErrorCode.FETCH_SESSION_ID_NOT_FOUND, 0)
    request = h.build(wanted, False)
    assert request.full and request.session_id == 0
    # The leader created no session (cache full): stay with full requests.
    assert h.handle_response(request, 0, 0)
    assert h.build(wanted, False).full
    # Switching to topic ids needs a new session.
    h.handle_response(h.build(wanted, False), 0, 79)
    assert not h.build(wanted, False).full
    assert h.build(wanted, True).full
