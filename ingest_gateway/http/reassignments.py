"""HTTP for partition reassignment, what `loglake reassign` (as kafka-reassign-partitions.sh)
asks: the reassignments in progress (ListPartitionReassignments) and new ones or
cancellations (AlterPartitionReassignments, carried out by the controller). Plans are
Kafka's JSON: {"version": 1, "partitions": [{"topic": t, "partition": p, "replicas": [..]}]},
`"replicas": null` cancelling that partition's reassignment.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, Request

from ingest_gateway.http.errors import BadRequest

if TYPE_CHECKING:
    from ingest_gateway.metadata.admin_manager import AdminManager


def _plan_targets(doc: Any) -> dict[tuple[str, int], tuple[int, ...] | None]:
    """The partition -> target replicas of a plan document; 422 for a malformed one."""
    entries = doc.get("partitions") if isinstance(doc, dict) else None
    if not isinstance(entries, list) or not entries:
        raise BadRequest(422, 'a plan is {"version": 1, "partitions": [{"topic", "partition", "replicas"}, ...]}', 2)
    targets: dict[tuple[str, int], tuple[int, ...] | None] = {}
    for entry in entries:
        topic = entry.get("topic") if isinstance(entry, dict) else None
        partition = entry.get("partition") if isinstance(entry, dict) else None
        if not isinstance(topic, str) or not isinstance(partition, int) or isinstance(partition, bool):
            raise BadRequest(422, f"each partition needs a string 'topic' and an integer 'partition': {entry!r}", 2)
        replicas = entry.get("replicas")
        if replicas is not None and (
            not isinstance(replicas, list) or not all(isinstance(r, int) and not isinstance(r, bool) for r in replicas)
        ):
            raise BadRequest(422, f"'replicas' of {topic}-{partition} must be a list of broker ids or null", 2)
        if (topic, partition) in targets:
            raise BadRequest(422, f"{topic}-{partition} is in the plan twice", 2)
        targets[(topic, partition)] = None if replicas is None else tuple(replicas)
    return targets


def reassignment_routes(admin: AdminManager) -> APIRouter:
    router = APIRouter()

    @router.get("/reassignments")
    async def list_reassignments() -> dict[str, Any]:
        ongoing = await admin.list_partition_reassignments(None)
        return {
            "partitions": [
                {
                    "topic": topic,
                    "partition": p,
                    "replicas": list(replicas),
                    "adding_replicas": list(adding),
                    "removing_replicas": list(removing),
                }
                for (topic, p), (replicas, adding, removing) in sorted(ongoing.items())
            ]
        }

    @router.post("/reassignments")
    async def alter_reassignments(request: Request) -> dict[str, Any]:
        """Start (or cancel) the plan's reassignments; each partition's outcome, its error
        named as Kafka names it."""
        try:
            doc = await request.json()
        except ValueError:
            raise BadRequest(422, "the body must be a JSON reassignment plan", 2) from None
        results = await admin.alter_partition_reassignments(_plan_targets(doc))
        return {
            "partitions": [
                {
                    "topic": topic,
                    "partition": p,
                    "error": None if error is None else error.code.name,
                    "message": None if error is None else error.message,
                }
                for (topic, p), error in sorted(results.items())
            ]
        }

    return router
