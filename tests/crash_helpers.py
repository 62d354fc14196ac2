"""Crash tests' helper: run a child process and kill -9 it at a random moment."""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path


def kill_at_random(
    argv: list[str],
    rng: random.Random,
    seconds: tuple[float, float],
    *,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    meanwhile: Callable[[], None] | None = None,
) -> int | None:
    """Start `argv` in a session of its own and SIGKILL the whole session at a random
    moment within `seconds`, calling `meanwhile` every half second until then. Returns the
    child's exit code if it ended on its own first, else None."""
    child = subprocess.Popen(
        argv, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    deadline = time.monotonic() + rng.uniform(*seconds)
    while time.monotonic() < deadline and child.poll() is None:
        if meanwhile is not None:
            meanwhile()
        time.sleep(0.5)
    exited = child.poll()
    with contextlib.suppress(ProcessLookupError):  # it may have finished already
        os.killpg(child.pid, signal.SIGKILL)
    child.wait()
    return exited
