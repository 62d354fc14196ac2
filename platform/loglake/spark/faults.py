"""Fault injection for the crash tests of the Spark jobs.

`LOGLAKE_FAULT=<point>[:<n>]` ends the process at the named point (of batch or run `n`
only, when given) with `os._exit`, as abruptly as `kill -9`: no finally blocks, no Spark
shutdown hooks. It exists so that tests hit a narrow crash window every time rather than
by luck.
"""

from __future__ import annotations

import os
import signal

from loglake.faults import FAULT_ENV


def _is_named(name: str, at: int) -> bool:
    point, _, only = os.environ.get(FAULT_ENV, "").partition(":")
    return point == name and (not only or int(only) == at)


def fault_point(name: str, at: int) -> None:
    """Exit here if LOGLAKE_FAULT names this point (and, if it gives one, this batch or run)."""
    if _is_named(name, at):
        os._exit(137)


def spark_jvm_fault_point(name: str, at: int) -> None:
    """For points reached in a Spark Python worker (a data source's commit on the driver, or
    a task, which local mode runs in the driver's JVM too): SIGKILL the worker's JVM, its
    nearest `java` ancestor, if LOGLAKE_FAULT names this point. A job's Python driver then
    dies with its gateway, as under kill -9."""
    if not _is_named(name, at):
        return
    pid = os.getppid()
    while pid > 1:
        with open(f"/proc/{pid}/stat") as f:
            # "pid (comm) state ppid ...": comm may hold spaces, so split after its ")".
            comm, _, rest = f.read().partition(") ")
        if comm.endswith("(java"):
            os.kill(pid, signal.SIGKILL)
            os._exit(137)
        pid = int(rest.split()[1])
    raise RuntimeError(f"{FAULT_ENV}: no java ancestor of process {os.getpid()}")
