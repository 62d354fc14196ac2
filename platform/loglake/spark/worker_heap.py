"""The Python worker's long-lived objects, kept out of the collection PySpark runs after
every task."""

from __future__ import annotations

import gc

import pyarrow as pa

_frozen = False


def freeze_worker_heap() -> None:
    """Once per Python worker, at the start of a task: move the objects alive now (the
    modules the worker imported) out of the cyclic collector's sight.

    PySpark's daemon runs `gc.collect()` after every task of a reused worker, which walked
    those ~93,000 objects each time: ~45 ms of CPU a task, ~40 % of a read's Python worker
    time, and the worker's next task waits for it. They live as long as the worker; the
    tasks' own objects are still collected. pyarrow imports pandas (if installed) at its
    first `pa.array`, which every task makes: made here first, so that pandas is frozen too.
    """
    global _frozen
    if not _frozen:
        pa.array([], pa.int8())
        gc.freeze()
        _frozen = True
