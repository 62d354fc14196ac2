"""CPU seconds used by this process's descendants, by kind, read from /proc (Linux).

On a machine shared with other work, wall-clock figures move with the load; the CPU time
each process used for a query moves much less, and says where the time goes: the broker,
Spark's JVM, Spark's Python workers, or this (driver) process.
"""

from __future__ import annotations

import os
from collections import Counter, defaultdict
from pathlib import Path

_TICKS = os.sysconf("SC_CLK_TCK")


def _parsed(stat: Path) -> tuple[str, list[str]]:
    """A /proc stat file's command name and the fields after it: fields[0] is field 3 of
    proc(5), so ppid is fields[1] and utime, stime, cutime, cstime are fields[11:15]."""
    raw = stat.read_text()
    return raw[raw.index("(") + 1 : raw.rindex(")")], raw[raw.rindex(")") + 2 :].split()


def _stat(pid: int) -> tuple[int, str, float] | None:
    """(parent pid, what the process is, CPU seconds of the process and its reaped children)."""
    try:
        name, fields = _parsed(Path(f"/proc/{pid}/stat"))
        command = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return None
    if b"ingest_gateway" in command:
        name = "broker"
    return int(fields[1]), name, sum(int(f) for f in fields[11:15]) / _TICKS


def process_cpu_seconds(pid: int) -> float:
    """CPU seconds so far of one process (and its reaped children)."""
    stat = _stat(pid)
    if stat is None:
        raise ProcessLookupError(pid)
    return stat[2]


def cpu_by_kind() -> Counter[str]:
    """CPU seconds so far of this process (`driver`) and its descendants: `broker`
    (`python -m ingest_gateway`), `jvm`, `python workers` (Python under the JVM), `other`."""
    stats = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (stat := _stat(int(entry.name))) is not None:
            stats[int(entry.name)] = stat
    me = os.getpid()
    totals: dict[str, float] = defaultdict(float)
    for pid, (_, name, seconds) in stats.items():
        ancestors = []
        at = stats[pid][0]
        while at in stats and at != me:
            ancestors.append(stats[at][1])
            at = stats[at][0]
        if pid == me:
            totals["driver"] += seconds
        elif at != me:
            continue  # not ours
        elif name in ("broker", "java"):
            totals["broker" if name == "broker" else "jvm"] += seconds
        elif "java" in ancestors and name.startswith("python"):
            totals["python workers"] += seconds
        else:
            totals["other"] += seconds
    return Counter(totals)  # a Counter, for subtract()


def jit_seconds() -> float:
    """CPU seconds so far of the JIT compiler threads (C1, C2) of the JVMs this process started:
    a young JVM keeps compiling for a while, and that is not the work being measured."""
    total = 0.0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            name, fields = _parsed(entry / "stat")
            if name != "java" or int(fields[1]) != os.getpid():
                continue
            for thread in (entry / "task").iterdir():
                thread_name, thread_fields = _parsed(thread / "stat")
                if "CompilerThre" in thread_name:
                    total += sum(int(f) for f in thread_fields[11:13]) / _TICKS  # utime, stime
        except (OSError, ValueError):
            continue
    return total
