"""The consumer group APIs of the Kafka protocol, over `loglake.groups.GroupCoordinator`.

Each handler copies fields between the request/response bodies and the coordinator's
plain results; the group logic itself lives in the coordinator.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ingest_gateway.kafka_apis import KafkaApis
from loglake.errors import ErrorCode
from loglake.groups import GroupCoordinator, MemberIdentity, OffsetCommitData, TopicPartition
from loglake.protocol import ApiKey, RequestHeader

Body = dict[str, Any]

# The versions before static membership (group.instance.id, KIP-345), which the coordinator
# does not implement; OffsetFetch v9 and ListGroups v5 belong to the new consumer protocol
# (KIP-848).
GROUP_API_VERSIONS: dict[ApiKey, tuple[int, int]] = {
    ApiKey.JOIN_GROUP: (0, 4),
    ApiKey.SYNC_GROUP: (0, 2),
    ApiKey.HEARTBEAT: (0, 2),
    ApiKey.LEAVE_GROUP: (0, 2),
    ApiKey.OFFSET_COMMIT: (0, 6),
    ApiKey.OFFSET_FETCH: (0, 8),
    ApiKey.LIST_GROUPS: (0, 4),
    ApiKey.DESCRIBE_GROUPS: (0, 5),
    ApiKey.DELETE_GROUPS: (0, 2),
}


class GroupApis:
    def __init__(
        self,
        coordinator: GroupCoordinator,
        client_host: str = "/127.0.0.1",
        partition_exists: Callable[[str, int], bool] | None = None,
    ) -> None:
        self.coordinator = coordinator
        self._client_host = client_host
        # Whether the cluster has this partition (None: take every commit).
        self._partition_exists = partition_exists

    async def join_group(self, header: RequestHeader, body: Body) -> Body:
        version = header.request_api_version
        result = await self.coordinator.join_group(
            body["group_id"],
            body["member_id"],
            header.client_id or "",
            self._client_host,
            body["session_timeout_ms"],
            body["rebalance_timeout_ms"] if version >= 1 else body["session_timeout_ms"],
            body["protocol_type"],
            [(p["name"], p["metadata"]) for p in body["protocols"]],
            group_instance_id=body.get("group_instance_id"),
            require_known_member_id=version >= 4,
        )
        return {
            "throttle_time_ms": 0,
            "error_code": result.error,
            "generation_id": result.generation_id,
            "protocol_type": result.protocol_type,
            # Before v7 the name is not nullable: "" stands for none.
            "protocol_name": result.protocol_name if version >= 7 else (result.protocol_name or ""),
            "leader": result.leader,
            "member_id": result.member_id,
            "members": [
                {"member_id": m.member_id, "group_instance_id": m.group_instance_id, "metadata": m.metadata}
                for m in result.members
            ],
        }

    async def sync_group(self, header: RequestHeader, body: Body) -> Body:
        result = await self.coordinator.sync_group(
            body["group_id"],
            body["generation_id"],
            body["member_id"],
            {a["member_id"]: bytes(a["assignment"]) for a in body["assignments"]},
            protocol_type=body.get("protocol_type"),
            protocol_name=body.get("protocol_name"),
        )
        return {
            "throttle_time_ms": 0,
            "error_code": result.error,
            "protocol_type": result.protocol_type,
            "protocol_name": result.protocol_name,
            "assignment": result.assignment,
        }

    async def heartbeat(self, header: RequestHeader, body: Body) -> Body:
        error = await self.coordinator.heartbeat(body["group_id"], body["member_id"], body["generation_id"])
        return {"throttle_time_ms": 0, "error_code": error}

    async def leave_group(self, header: RequestHeader, body: Body) -> Body:
        if header.request_api_version >= 3:
            members = [MemberIdentity(m["member_id"], m["group_instance_id"]) for m in body["members"]]
        else:
            members = [MemberIdentity(body["member_id"])]
        result = await self.coordinator.leave_group(body["group_id"], members)
        error = result.error
        if header.request_api_version < 3 and not error and result.members:
            error = result.members[0].error
        return {
            "throttle_time_ms": 0,
            "error_code": error,
            "members": [
                {"member_id": m.member_id, "group_instance_id": m.group_instance_id, "error_code": m.error}
                for m in result.members
            ],
        }

    async def offset_commit(self, header: RequestHeader, body: Body) -> Body:
        offsets = {}
        errors: dict[TopicPartition, int] = {}
        for t in body["topics"]:
            for p in t["partitions"]:
                tp = TopicPartition(t["name"], p["partition_index"])
                if self._partition_exists is not None and not self._partition_exists(tp.topic, tp.partition):
                    # As Kafka: no offsets are kept for partitions the cluster lacks.
                    errors[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                    continue
                offsets[tp] = OffsetCommitData(
                    p["committed_offset"], p.get("committed_leader_epoch", -1), p["committed_metadata"]
                )
        if offsets:
            errors |= await self.coordinator.commit_offsets(
                body["group_id"], body.get("member_id", ""), body.get("generation_id_or_member_epoch", -1), offsets
            )
        return {
            "throttle_time_ms": 0,
            "topics": [
                {
                    "name": t["name"],
                    "partitions": [
                        {
                            "partition_index": p["partition_index"],
                            "error_code": errors[TopicPartition(t["name"], p["partition_index"])],
                        }
                        for p in t["partitions"]
                    ],
                }
                for t in body["topics"]
            ],
        }

    async def offset_fetch(self, header: RequestHeader, body: Body) -> Body:
        version = header.request_api_version
        if version >= 8:
            groups = [(g["group_id"], g["topics"]) for g in body["groups"]]
        else:
            groups = [(body["group_id"], body["topics"])]
        answers = []
        for group_id, topics in groups:
            wanted = None
            if topics is not None:
                wanted = [TopicPartition(t["name"], p) for t in topics for p in t["partition_indexes"]]
            result = await self.coordinator.fetch_offsets(
                group_id, wanted, require_stable=body.get("require_stable", False)
            )
            by_topic: dict[str, list[Body]] = {}
            for tp, po in sorted(result.partitions.items()):
                by_topic.setdefault(tp.topic, []).append(
                    {
                        "partition_index": tp.partition,
                        "committed_offset": po.offset,
                        "committed_leader_epoch": po.leader_epoch,
                        "metadata": po.metadata,
                        "error_code": po.error,
                    }
                )
            answers.append(
                {
                    "group_id": group_id,
                    "error_code": result.error,
                    "topics": [{"name": name, "partitions": parts} for name, parts in by_topic.items()],
                }
            )
        if version >= 8:
            return {"throttle_time_ms": 0, "groups": answers}
        answer = answers[0]
        return {"throttle_time_ms": 0, "topics": answer["topics"], "error_code": answer["error_code"]}

    async def list_groups(self, header: RequestHeader, body: Body) -> Body:
        result = await self.coordinator.list_groups(body.get("states_filter") or None)
        return {
            "throttle_time_ms": 0,
            "error_code": result.error,
            "groups": [
                {"group_id": g.group_id, "protocol_type": g.protocol_type, "group_state": g.state.value}
                for g in result.groups
            ],
        }

    async def describe_groups(self, header: RequestHeader, body: Body) -> Body:
        described = await self.coordinator.describe_groups(body["groups"])
        return {
            "throttle_time_ms": 0,
            "groups": [
                {
                    "error_code": d.error,
                    "group_id": d.group_id,
                    "group_state": d.state,
                    "protocol_type": d.protocol_type,
                    "protocol_data": d.protocol,
                    "members": [
                        {
                            "member_id": m.member_id,
                            "group_instance_id": m.group_instance_id,
                            "client_id": m.client_id,
                            "client_host": m.client_host,
                            "member_metadata": m.metadata,
                            "member_assignment": m.assignment,
                        }
                        for m in d.members
                    ],
                }
                for d in described
            ],
        }

    async def delete_groups(self, header: RequestHeader, body: Body) -> Body:
        errors = await self.coordinator.delete_groups(body["groups_names"])
        return {
            "throttle_time_ms": 0,
            "results": [{"group_id": g, "error_code": errors[g]} for g in dict.fromkeys(body["groups_names"])],
        }


def register_group_apis(apis: KafkaApis, coordinator: GroupCoordinator) -> GroupApis:
    def partition_exists(topic: str, partition: int) -> bool:
        description = apis.broker.image.topics.get(topic)
        return description is not None and partition in description.assignment

    groups = GroupApis(coordinator, partition_exists=partition_exists)
    handlers = {
        ApiKey.JOIN_GROUP: groups.join_group,
        ApiKey.SYNC_GROUP: groups.sync_group,
        ApiKey.HEARTBEAT: groups.heartbeat,
        ApiKey.LEAVE_GROUP: groups.leave_group,
        ApiKey.OFFSET_COMMIT: groups.offset_commit,
        ApiKey.OFFSET_FETCH: groups.offset_fetch,
        ApiKey.LIST_GROUPS: groups.list_groups,
        ApiKey.DESCRIBE_GROUPS: groups.describe_groups,
        ApiKey.DELETE_GROUPS: groups.delete_groups,
    }
    for key, handler in handlers.items():
        apis.register(key, GROUP_API_VERSIONS[key], handler)
    return groups
