"""The Python worker's heap, set up once for the tasks it runs: long-lived objects out of
the collection PySpark runs after every task, freed memory kept for the next fetch."""

from __future__ import annotations

import ctypes
import gc
import sys

import pyarrow as pa

# glibc's mallopt parameters (malloc.h).
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
# Blocks up to this size come from the heap, not from their own mmap: glibc's largest
# (32 MiB on 64-bit); fetch answers are 4 MiB by default.
_MMAP_THRESHOLD_BYTES = 32 * 1024**2
# Free memory kept at the heap's top instead of being given back to the kernel.
_TRIM_THRESHOLD_BYTES = 64 * 1024**2

_prepared = False


def prepare_worker_heap() -> None:
    """Once per Python worker, at the start of a task:

    - Move the objects alive now (the modules the worker imported) out of the cyclic
      collector's sight. PySpark's daemon runs `gc.collect()` after every task of a reused
      worker, which walked those ~93,000 objects each time: ~45 ms of CPU a task, ~40 % of
      a read's worker time, and the worker's next task waits for it. They live as long as
      the worker; the tasks' own objects are still collected. pyarrow imports pandas (if
      installed) at its first `pa.array`, which every task makes: made here first, so that
      pandas is frozen too.
    - Keep freed memory (glibc): by default each fetch answer's buffers (the answer, its
      joined records, the decoder's arrays: a few MiB each) went back to the kernel when
      freed and the next answer's came back as fresh pages, zeroed and faulted in one by
      one: a third of decode's CPU.
    """
    global _prepared
    if _prepared:
        return
    pa.array([], pa.int8())
    gc.freeze()
    _keep_freed_memory()
    _prepared = True


def _keep_freed_memory() -> None:
    if not sys.platform.startswith("linux"):
        return
    mallopt = getattr(ctypes.CDLL(None), "mallopt", None)  # glibc's; absent from some C libraries
    if mallopt is not None:
        mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD_BYTES)
        mallopt(_M_TRIM_THRESHOLD, _TRIM_THRESHOLD_BYTES)
