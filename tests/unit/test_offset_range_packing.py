"""The lake writer's tasks: offset ranges packed into as few Spark tasks as the cores and
the per-task record limit allow."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from loglake.spark.offset_ranges import OffsetRange, pack_ranges


def test_six_small_partitions_on_two_cores_make_two_tasks_of_three() -> None:
    ranges = [OffsetRange("t", p, 0, 150_000) for p in range(6)]
    tasks = pack_ranges(ranges, slots=2, max_records=2_000_000)
    assert [len(task) for task in tasks] == [3, 3]
    assert sorted(r for task in tasks for r in task) == ranges


def test_as_many_tasks_as_the_record_limit_calls_for() -> None:
    ranges = [OffsetRange("t", p, 0, 900) for p in range(6)]
    tasks = pack_ranges(ranges, slots=2, max_records=2_000)
    assert len(tasks) == 3
    assert all(sum(r.size for r in task) <= 2_000 for task in tasks)


def test_more_cores_than_ranges_keeps_one_range_a_task() -> None:
    ranges = [OffsetRange("t", p, 10, 20) for p in range(3)]
    assert pack_ranges(ranges, slots=8, max_records=100) == [(r,) for r in ranges]
    assert pack_ranges([OffsetRange("t", 0, 5, 5)], slots=2, max_records=100) == []


@given(
    sizes=st.lists(st.integers(1, 1_000), min_size=1, max_size=40),
    slots=st.integers(1, 16),
    max_records=st.integers(1_000, 5_000),
)
def test_every_range_once_and_no_task_over_the_limit(sizes: list[int], slots: int, max_records: int) -> None:
    ranges = [OffsetRange("t", p, 0, n) for p, n in enumerate(sizes)]
    tasks = pack_ranges(ranges, slots, max_records)
    assert sorted(r for task in tasks for r in task) == ranges
    assert all(sum(r.size for r in task) <= max_records for task in tasks)
    total = sum(sizes)
    assert len(tasks) >= min(len(ranges), max(slots, -(-total // max_records)))
    if len(tasks) == min(len(ranges), slots):
        # Balanced: largest first to the emptiest, so no task exceeds another by more than a range.
        loads = [sum(r.size for r in task) for task in tasks]
        assert max(loads) - min(loads) <= max(sizes)
