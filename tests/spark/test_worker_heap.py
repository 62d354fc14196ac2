"""A Python worker's task freezes the worker's long-lived objects once, so that the
`gc.collect()` PySpark's daemon runs after every task walks only what the tasks made."""

from __future__ import annotations

import subprocess
import sys
import textwrap

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
        from loglake.spark.worker_heap import freeze_worker_heap

        assert gc.get_freeze_count() == 0
        freeze_worker_heap()
        frozen = gc.get_freeze_count()
        import pandas  # imported by pyarrow's first array: already frozen
        assert gc.get_freeze_count() == frozen
        kept = [object] * 3
        freeze_worker_heap()  # a later task: nothing more is frozen
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
