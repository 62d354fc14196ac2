"""HTTP for the replication throttles this broker has applied (what `loglake reassign execute
--throttle` waits for before it submits a plan).

`/brokers/{id}/configs` answers what is stored; each broker applies it later, on the store's
notification, so only the broker itself can say what it throttles now: its two quota rates,
and the topics' throttled-replica lists as its metadata image holds them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fastapi import APIRouter
from loglake.broker_configs import REPLICATION_THROTTLE_RATES
from loglake.cluster.replication_quota import THROTTLED_REPLICAS, UNLIMITED

if TYPE_CHECKING:
    from ingest_gateway.metadata.metadata_cache import MetadataCache
    from ingest_gateway.replica.replica_manager import ReplicaManager


def replication_throttle_routes(replica_manager: ReplicaManager, cache: MetadataCache) -> APIRouter:
    router = APIRouter()

    @router.get("/replication-throttles")
    async def applied() -> dict[str, Any]:
        """This broker's applied rates (null: unlimited) and, per topic with any, the
        throttled-replica lists of its metadata."""
        rates = zip(
            REPLICATION_THROTTLE_RATES, (replica_manager.leader_quota.rate, replica_manager.follower_quota.rate)
        )
        topics = {
            name: {k: topic.config.get(k, "") for k in THROTTLED_REPLICAS}
            for name, topic in cache.image.topics.items()
            if any(topic.config.get(k) for k in THROTTLED_REPLICAS)
        }
        return {
            "broker": replica_manager.broker_id,
            "rates": {k: None if v >= UNLIMITED else v for k, v in rates},
            "topics": topics,
        }

    return router
