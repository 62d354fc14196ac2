"""A Python worker's first task prepares the worker's heap: its long-lived objects frozen, so
that the `gc.collect()` PySpark's daemon runs after every task walks only what the tasks
made, and freed buffers kept for the next fetch instead of given back to the kernel."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
from clients.client_helpers import create_topic
from source_helpers import produce

from harness.process import BrokerProcess


def run_in_a_fresh_interpreter(script: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_freezing_happens_once_and_later_garbage_is_still_collected() -> None:
    out = run_in_a_fresh_interpreter(
        """
        import gc
        import sys
        from loglake.spark.worker_heap import prepare_worker_heap

        assert gc.get_freeze_count() == 0 and "pandas" not in sys.modules
        prepare_worker_heap()
        frozen = gc.get_freeze_count()
        assert "pandas" in sys.modules  # imported by pyarrow's first array, before the freeze
        prepare_worker_heap()  # a later task: nothing more is frozen
        assert gc.get_freeze_count() == frozen
        cycle = []
        cycle.append(cycle)
        del cycle
        print(frozen, gc.collect())
        """
    )
    frozen, collected = map(int, out.split())
    assert frozen > 10_000  # pyarrow's and pandas' modules
    assert collected >= 1


@pytest.mark.parametrize("prepared", [False, True])
def test_freed_fetch_sized_buffers_stay_with_the_worker(prepared: bool) -> None:
    """Three answers' worth of buffers freed at once: glibc's default (its threshold follows
    the largest block freed, 16 MiB here, and the heap is trimmed past twice that) gives
    them back to the kernel; a prepared worker keeps them for the next answers."""
    out = run_in_a_fresh_interpreter(
        f"""
        import os
        from loglake.spark.worker_heap import prepare_worker_heap

        def resident() -> int:
            return int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

        if {prepared}:
            prepare_worker_heap()
        first = bytearray(16 * 1024**2)
        del first
        buffers = [bytearray(16 * 1024**2) for _ in range(3)]  # zeroed: every page is resident
        before = resident()
        del buffers
        print(before - resident() < 8 * 1024**2)
        """
    )
    assert out.split() == [str(prepared)]


def test_a_read_task_freezes_the_workers_heap(broker: BrokerProcess, topic: str) -> None:
    create_topic(broker.bootstrap, topic, partitions=1)
    produce(broker, topic, [{"value": b"%d" % i} for i in range(10)])
    out = run_in_a_fresh_interpreter(
        f"""
        import gc
        from loglake.spark.batch_reader import OffsetRangePartition, read_partition
        from loglake.spark.offset_ranges import plan_batch
        from loglake.spark.options import parse_read_options

        options = parse_read_options(
            {{"kafka.bootstrap.servers": {broker.bootstrap!r}, "subscribe": {topic!r}}}, streaming=False
        )
        (planned,) = plan_batch(options)
        assert gc.get_freeze_count() == 0
        rows = sum(b.num_rows for b in read_partition(options, OffsetRangePartition(planned)))
        print(rows, gc.get_freeze_count())
        """
    )
    rows, frozen = map(int, out.split())
    assert rows == 10 and frozen > 10_000
