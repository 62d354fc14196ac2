"""The replica manager's waits (long polls, acks=all): a wait ends when one of its partitions
is woken, on its timeout, or when its task is cancelled, and in every case leaves no waiter
behind on any of its partitions."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from pathlib import Path

import pytest
from loglake.config import LogConfig
from loglake.storage.log_manager import LogManager

from ingest_gateway.replica.replica_manager import ReplicaManager

KEYS = [("a", 0), ("b", 0), ("c", 1)]


@pytest.mark.parametrize("how", ["woken by the high watermark", "woken by a change of hands", "timeout", "cancelled"])
def test_a_wait_ends_and_leaves_nothing_behind(tmp_path: Path, how: str) -> None:
    async def main() -> None:
        rm = ReplicaManager(1, LogManager([tmp_path], LogConfig()), LogConfig())
        waiting = asyncio.create_task(rm.wait_for_change(KEYS, 0.05 if how == "timeout" else 60))
        while not rm._waiters:  # registered once the task has run
            await asyncio.sleep(0)
        assert all(len(rm._waiters[key]) == 1 for key in KEYS)
        if how == "woken by the high watermark":
            rm._on_high_watermark_change(SimpleNamespace(topic="b", partition=0, high_watermark=4))  # type: ignore[arg-type]
        elif how == "woken by a change of hands":
            rm._wake(KEYS[2])
        elif how == "cancelled":
            waiting.cancel()
        if how == "cancelled":
            with pytest.raises(asyncio.CancelledError):
                await waiting
        else:
            await asyncio.wait_for(waiting, 30)  # a wait woken or timed out returns
        assert dict(rm._waiters) == {}

    asyncio.run(main())


@pytest.mark.parametrize("how", ["woken", "timeout", "cancelled"])
def test_a_follower_wait_is_one_entry_whatever_it_follows_and_says_whether_it_was_woken(
    tmp_path: Path, how: str
) -> None:
    """A follower's long poll registers once, by replica id; a change of a partition wakes
    the waits of its replicas only; the wait says whether it was woken (else the leader
    answers with the pass it made before waiting)."""

    async def main() -> None:
        rm = ReplicaManager(1, LogManager([tmp_path], LogConfig()), LogConfig())
        waiting = asyncio.create_task(rm._wait_for_follower_change(2, 0.05 if how == "timeout" else 60))
        while not rm._follower_waiters:
            await asyncio.sleep(0)
        assert list(rm._follower_waiters) == [2] and len(rm._follower_waiters[2]) == 1
        rm._wake_followers_of(SimpleNamespace(replicas=(1, 3)))  # type: ignore[arg-type]
        await asyncio.sleep(0)
        assert not waiting.done(), "not a partition broker 2 follows"
        if how == "woken":
            rm._wake_followers_of(SimpleNamespace(replicas=(1, 2, 3)))  # type: ignore[arg-type]
            assert await asyncio.wait_for(waiting, 30) is True
        elif how == "timeout":
            assert await asyncio.wait_for(waiting, 30) is False
        else:
            waiting.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiting
        assert rm._follower_waiters == {}

    asyncio.run(main())


def test_a_high_watermark_move_wakes_only_the_produces_it_completes(tmp_path: Path) -> None:
    """acks=all produces pipelined on one partition wait for increasing offsets: a HW move
    wakes those it reached and no other (each woken one would re-check and wait again); any
    other change of the partition wakes them all."""

    async def main() -> None:
        rm = ReplicaManager(1, LogManager([tmp_path], LogConfig()), LogConfig())
        key = ("a", 0)
        waits = [asyncio.create_task(rm._wait_for_replication({key: (offset, 0)}, 60)) for offset in range(1, 11)]
        while len(rm._replication_waiters.get(key, ())) < 10:
            await asyncio.sleep(0)
        # The HW of a partition view at 4: the produces waiting for offsets 1-4 are done.
        rm._on_high_watermark_change(SimpleNamespace(topic="a", partition=0, high_watermark=4))  # type: ignore[arg-type]
        await asyncio.sleep(0)
        assert [w.done() for w in waits] == [True] * 4 + [False] * 6
        assert sorted(required for required, _, _ in rm._replication_waiters[key]) == list(range(5, 11))
        rm._wake(key)  # e.g. the ISR shrank: every one re-checks
        await asyncio.wait_for(asyncio.gather(*waits), 30)
        assert key not in rm._replication_waiters

    asyncio.run(main())


def test_timed_out_produces_on_a_stalled_partition_do_not_pile_up(tmp_path: Path) -> None:
    """acks=all produces that time out on a partition whose HW does not move leave their
    entries behind (only a HW move or a change of the partition pops them), but a heap that
    reaches a power of two drops those of finished waits: its size stays near the live ones."""

    async def main() -> None:
        rm = ReplicaManager(1, LogManager([tmp_path], LogConfig()), LogConfig())
        key = ("a", 0)
        live = asyncio.create_task(rm._wait_for_replication({key: (1_000_000, 0)}, 60))
        for offset in range(1, 1_001):  # retries, each timing out at once
            await rm._wait_for_replication({key: (offset, 0)}, 0.0001)
        assert len(rm._replication_waiters[key]) <= 128
        rm._on_high_watermark_change(SimpleNamespace(topic="a", partition=0, high_watermark=1_000))  # type: ignore[arg-type]
        assert [entry[0] for entry in rm._replication_waiters[key]] == [1_000_000]  # the live wait is kept
        assert not live.done()
        rm._wake(key)
        await asyncio.wait_for(live, 30)

    asyncio.run(main())
