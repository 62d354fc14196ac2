"""A topic described by one broker, completed with the other leaders' offsets.

A broker's topic description (GET /topics/{name}) has the log start, high watermark, log
end and size only of the partitions it leads; whoever shows the whole topic (the
`loglake topics describe` command, the broker's web console) asks each other leader for
its description and merges the partitions that leader leads.
"""

from __future__ import annotations

from typing import Any


def leaders_without_offsets(topic: dict[str, Any]) -> set[int]:
    """The leaders of the partitions that `topic` (a broker's description) has no offsets for."""
    return {p["leader"] for p in topic["partitions"] if "log_end_offset" not in p and p["leader"] >= 0}


def merge_leader_offsets(topic: dict[str, Any], leader: int, theirs: dict[str, Any]) -> dict[str, Any]:
    """`topic` with the partitions `leader` leads taken from `theirs`, that leader's description."""
    led = {p["partition"]: p for p in theirs["partitions"] if "log_end_offset" in p and p["leader"] == leader}
    partitions = [led.get(p["partition"], p) if p["leader"] == leader else p for p in topic["partitions"]]
    return {**topic, "partitions": partitions}
