"""Fault injection for the crash tests of the Spark jobs.

`LOGLAKE_FAULT=<point>[:<n>]` ends the process at the named point (of batch or run `n`
only, when given) with `os._exit`, as abruptly as `kill -9`: no finally blocks, no Spark
shutdown hooks. It exists so that tests hit a narrow crash window every time rather than
by luck.
"""

from __future__ import annotations

import os

FAULT_ENV = "LOGLAKE_FAULT"


def fault_point(name: str, at: int) -> None:
    """Exit here if LOGLAKE_FAULT names this point (and, if it gives one, this batch or run)."""
    fault = os.environ.get(FAULT_ENV, "")
    point, _, only = fault.partition(":")
    if point == name and (not only or int(only) == at):
        os._exit(137)
