"""Fault injection for the broker's crash tests.

`LOGLAKE_FAULT=<point>` makes the process kill itself with SIGKILL when it reaches that
point, so a test hits a narrow crash window every time rather than by luck. Points:
`cleaner-<step>` (the segment swap, see `storage/segment_swap.py`) and
`txn-after-prepare` (a transaction coordinator, once PrepareCommit/PrepareAbort is
durable and before any marker is written).
"""

from __future__ import annotations

import logging
import os
import signal
from pathlib import Path

FAULT_ENV = "LOGLAKE_FAULT"

log = logging.getLogger(__name__)


def crash_point(point: str) -> None:
    """Die like a kill -9 here when LOGLAKE_FAULT names `point` (crash tests only)."""
    if os.environ.get(FAULT_ENV) == point:
        log.warning("%s=%s: killing the process", FAULT_ENV, point)
        os.kill(os.getpid(), signal.SIGKILL)


# A slow ZooKeeper on one broker, for the tests that keep it off the event loop: a path with
# `{broker_id}`; while that broker's file exists, each of its metadata-store calls first
# sleeps the milliseconds written in it (`loglake.coordination.store.instrumented`).
STORE_DELAY_ENV = "LOGLAKE_FAULT_STORE_DELAY_FILE"


def store_delay_file(broker_id: int) -> Path | None:
    template = os.environ.get(STORE_DELAY_ENV)
    return None if not template else Path(template.format(broker_id=broker_id))


def store_delay_s(path: Path) -> float:
    try:
        return int(path.read_text()) / 1000
    except (FileNotFoundError, ValueError):
        return 0.0
