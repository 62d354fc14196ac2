"""Topic administration over HTTP: list, create, describe, alter and delete topics; a topic's
partitions and their offsets.

A topic is described as kafka-topics.sh --describe shows it, plus the log start, high
watermark, log end and size of the partitions this broker leads (and their compaction
state)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, Request, Response

from ingest_gateway.http.errors import BadRequest, json_object

if TYPE_CHECKING:
    from loglake.maintenance.cleaner_manager import LogCleanerManager

    from ingest_gateway.metadata.admin_manager import AdminManager
    from ingest_gateway.metadata.metadata_cache import MetadataCache
    from ingest_gateway.replica.replica_manager import ReplicaManager


def describe_topic(
    name: str, cache: MetadataCache, replica_manager: ReplicaManager, cleaner: LogCleanerManager
) -> dict[str, Any]:
    """A topic as kafka-topics.sh --describe shows it, plus the log start, high watermark,
    log end and size in bytes of the partitions this broker leads."""
    image = cache.image
    topic = image.topic(name)
    states = image.partition_states.get(name, {})
    partitions = []
    for p in range(topic.num_partitions):
        state = states.get(p)
        if state is None:
            continue  # added to the topic an instant ago; its state is not in the image yet
        entry: dict[str, Any] = {
            "partition": p,
            "leader": state.leader,
            "leader_epoch": state.leader_epoch,
            "replicas": [
                {"broker": r, "leader": r == state.leader, "in_sync": r in state.isr} for r in topic.assignment[p]
            ],
            "isr": list(state.isr),
            "adding_replicas": list(topic.adding.get(p, ())),
            "removing_replicas": list(topic.removing.get(p, ())),
        }
        local = replica_manager.partitions.get((name, p))
        if local is not None and local.is_leader:
            # Together: retention (on the scheduler's thread) moves the start and drops
            # segments in one step, which two separate reads could split.
            log_start, size = local.log.start_and_size()
            entry.update(
                log_start_offset=log_start,
                high_watermark=local.high_watermark,
                log_end_offset=local.log_end_offset,
                size=size,
            )
            if local.log.config.compact:
                entry["compaction"] = cleaner.describe(local.log)
        partitions.append(entry)
    return {
        "name": name,
        "topic_id": topic.topic_id,
        "partitions_count": topic.num_partitions,
        "replication_factor": topic.replication_factor,
        "configs": topic.config,
        "partitions": partitions,
    }


def topic_routes(
    default_partitions: int,
    default_replication_factor: int,
    cache: MetadataCache,
    admin: AdminManager,
    replica_manager: ReplicaManager,
    cleaner: LogCleanerManager,
) -> APIRouter:
    router = APIRouter()

    def describe(name: str) -> dict[str, Any]:
        return describe_topic(name, cache, replica_manager, cleaner)

    @router.get("/topics")
    async def list_topics() -> list[str]:
        return sorted(t for t in cache.image.topics if not t.startswith("__"))

    @router.post("/topics", status_code=201)
    async def create_topic(request: Request) -> dict[str, Any]:
        doc = await json_object(request)
        name = doc.get("name", doc.get("topic_name"))
        if not isinstance(name, str):
            raise BadRequest(422, "'name' (the topic name) is required", 2)
        partitions = doc.get("partitions", doc.get("partitions_count", default_partitions))
        rf = doc.get("replication_factor", default_replication_factor)
        if not isinstance(partitions, int) or not isinstance(rf, int):
            raise BadRequest(422, "'partitions' and 'replication_factor' must be integers", 2)
        await admin.create_topic(name, partitions, rf, _configs(doc.get("configs")))
        return describe(name)

    @router.get("/topics/{topic}")
    async def describe_one(topic: str) -> dict[str, Any]:
        return describe(topic)

    @router.patch("/topics/{topic}")
    async def alter_topic(topic: str, request: Request) -> dict[str, Any]:
        doc = await json_object(request)
        cache.image.topic(topic)
        if "configs" in doc:
            await admin.alter_topic_config(topic, _configs(doc["configs"]))
        partitions = doc.get("partitions", doc.get("partitions_count"))
        if partitions is not None:
            if not isinstance(partitions, int):
                raise BadRequest(422, "'partitions' must be an integer", 2)
            await admin.create_partitions(topic, partitions)
        return describe(topic)

    @router.delete("/topics/{topic}", status_code=204)
    async def delete_topic(topic: str) -> Response:
        await admin.delete_topic(topic)
        return Response(status_code=204)

    @router.get("/topics/{topic}/partitions")
    async def list_partitions(topic: str) -> list[dict[str, Any]]:
        partitions: list[dict[str, Any]] = describe(topic)["partitions"]
        return partitions

    @router.get("/topics/{topic}/partitions/{partition}")
    async def describe_partition(topic: str, partition: int) -> dict[str, Any]:
        cache.image.partition_state(topic, partition)
        described: dict[str, Any] = describe(topic)["partitions"][partition]
        return described

    @router.get("/topics/{topic}/partitions/{partition}/offsets")
    async def partition_offsets(topic: str, partition: int, timestamp: int | None = None) -> dict[str, Any]:
        """Beginning and end offsets (the end is the high watermark, where consumers stop;
        `log_end_offset` also counts records the leader has that are not yet replicated to
        the whole ISR); with `timestamp` (ms), the first offset at or after it. Only the
        leader answers: another replica's view may be stale (NOT_LEADER_OR_FOLLOWER, 503)."""
        p = replica_manager.leader_partition(topic, partition)
        if timestamp is None:
            return {
                "beginning_offset": p.log_start_offset,
                "end_offset": p.high_watermark,
                "log_end_offset": p.log_end_offset,
            }
        found = p.offset_for_timestamp(timestamp)
        if found is None:
            return {"offset": None, "timestamp": None}
        return {"offset": found[0], "timestamp": found[1]}

    return router


def _configs(raw: Any) -> dict[str, str]:
    """Configs as {"k": "v"} or REST Proxy v3's [{"name": k, "value": v}]."""
    if raw is None:
        return {}
    if isinstance(raw, dict):
        return {str(k): str(v).lower() if isinstance(v, bool) else str(v) for k, v in raw.items()}
    if isinstance(raw, list) and all(isinstance(c, dict) and "name" in c for c in raw):
        return {str(c["name"]): str(c.get("value", "")) for c in raw}
    raise BadRequest(422, "'configs' must be an object of name: value", 2)
