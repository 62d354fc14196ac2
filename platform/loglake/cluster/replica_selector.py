"""Which replica a consumer reads from (KIP-392, Kafka's RackAwareReplicaSelector).

With `replica.selector.class` set to the rack-aware selector, the leader answers a
consumer's fetch that names a `rack_id` with the id of an in-sync replica in that rack
(the "preferred read replica"), and the consumer fetches from it until it errs. Reading
from the nearest replica saves cross-zone traffic; the follower serves up to its own high
watermark, which trails the leader's by at most one fetch.
"""

from __future__ import annotations

from collections.abc import Callable

from loglake.cluster.partition import Partition


def rack_aware_read_replica(
    partition: Partition, client_rack: str, rack_of: Callable[[int], str | None], fetch_offset: int, now_ms: int
) -> int:
    """The replica (this leader or an in-sync follower) in `client_rack` that has the data
    at `fetch_offset`, most caught up first; the leader if none is in that rack."""
    leader = partition.broker_id
    # (log end offset, -ms since caught up) orders replicas as Kafka's ReplicaView comparator.
    candidates: dict[int, tuple[int, int]] = {leader: (partition.log_end_offset, 0)}
    for replica_id, state in partition.followers.items():
        if replica_id in partition.isr and state.log_end_offset >= fetch_offset:
            candidates[replica_id] = (state.log_end_offset, -(now_ms - state.last_caught_up_time_ms))
    in_rack = [r for r in candidates if rack_of(r) == client_rack]
    if not in_rack:
        return leader
    return max(in_rack, key=lambda r: (candidates[r], r == leader))
