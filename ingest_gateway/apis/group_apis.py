"""The consumer group APIs of the Kafka protocol, over `loglake.groups.GroupCoordinator`.

Each handler copies fields between the request/response bodies and the coordinator's
plain results; the group logic itself lives in the coordinator.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

from loglake.errors import ErrorCode
from loglake.groups import (
    GroupCoordinator,
    GroupDescription,
    MemberIdentity,
    OffsetCommitData,
    SyncResult,
    TopicPartition,
)
from loglake.groups.consumer_group import HeartbeatRequest, TopicPartitions
from loglake.protocol import ApiKey, bodies  # bodies.X: HeartbeatRequest is also the coordinator's
from loglake.security.acls import CLUSTER_NAME, AclOperation, ResourceType

from ingest_gateway.apis.authorization import RequestAuthorization
from ingest_gateway.apis.authorized_operations import group_operations
from ingest_gateway.apis.request_router import handles
from ingest_gateway.network.request_context import RequestContext

# OffsetCommit v2-v4: no retention time given, the broker's offsets.retention applies.
DEFAULT_RETENTION_TIME = -1
# ConsumerGroupDescribe v1's MemberType of a member of a consumer group.
CLASSIC_MEMBER_TYPE = 0
CONSUMER_MEMBER_TYPE = 1


class GroupApis:
    def __init__(
        self,
        coordinator: GroupCoordinator,
        authorization: RequestAuthorization,
        partition_exists: Callable[[str, int], bool] | None = None,
    ) -> None:
        self.coordinator = coordinator
        self.authorization = authorization
        # Whether the cluster has this partition (None: take every commit).
        self._partition_exists = partition_exists

    @handles(ApiKey.JOIN_GROUP, 0, 9)
    async def join_group(self, context: RequestContext, body: bodies.JoinGroupRequest) -> bodies.JoinGroupResponse:
        header = context.header
        version = header.request_api_version
        result = await self.coordinator.join_group(
            body["group_id"],
            body["member_id"],
            header.client_id or "",
            "/" + context.client_host,  # Kafka's form of a member's host
            body["session_timeout_ms"],
            body["rebalance_timeout_ms"] if version >= 1 else body["session_timeout_ms"],
            body["protocol_type"],
            [(p["name"], bytes(p["metadata"])) for p in body["protocols"]],
            group_instance_id=body.get("group_instance_id"),
            require_known_member_id=version >= 4,
            supports_skip_assignment=version >= 9,
        )
        return {
            "throttle_time_ms": 0,
            "error_code": result.error,
            "skip_assignment": result.skip_assignment,
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

    @handles(ApiKey.SYNC_GROUP, 0, 5)
    async def sync_group(self, context: RequestContext, body: bodies.SyncGroupRequest) -> bodies.SyncGroupResponse:
        header = context.header
        protocol_type, protocol_name = body.get("protocol_type"), body.get("protocol_name")
        if header.request_api_version >= 5 and (protocol_type is None or protocol_name is None):
            # From v5 both are mandatory, as Kafka checks before the coordinator sees the request.
            result = SyncResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
        else:
            result = await self.coordinator.sync_group(
                body["group_id"],
                body["generation_id"],
                body["member_id"],
                {a["member_id"]: bytes(a["assignment"]) for a in body["assignments"]},
                group_instance_id=body.get("group_instance_id"),
                protocol_type=protocol_type,
                protocol_name=protocol_name,
            )
        return {
            "throttle_time_ms": 0,
            "error_code": result.error,
            "protocol_type": result.protocol_type,
            "protocol_name": result.protocol_name,
            "assignment": result.assignment,
        }

    @handles(ApiKey.HEARTBEAT, 0, 4)
    async def heartbeat(self, context: RequestContext, body: bodies.HeartbeatRequest) -> bodies.HeartbeatResponse:
        error = await self.coordinator.heartbeat(
            body["group_id"], body["member_id"], body["generation_id"], group_instance_id=body.get("group_instance_id")
        )
        return {"throttle_time_ms": 0, "error_code": error}

    @handles(ApiKey.LEAVE_GROUP, 0, 5)
    async def leave_group(self, context: RequestContext, body: bodies.LeaveGroupRequest) -> bodies.LeaveGroupResponse:
        header = context.header
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

    # OffsetCommit v9's member epoch and OffsetFetch v9's member id and epoch are checked
    # against consumer-protocol (KIP-848) groups.
    @handles(ApiKey.OFFSET_COMMIT, 0, 9)
    async def offset_commit(
        self, context: RequestContext, body: bodies.OffsetCommitRequest
    ) -> bodies.OffsetCommitResponse:
        header = context.header
        retention_ms = body.get("retention_time_ms", DEFAULT_RETENTION_TIME)
        expire_timestamp = None
        if retention_ms != DEFAULT_RETENTION_TIME:
            expire_timestamp = self.coordinator.now_ms() + retention_ms
        offsets = {}
        errors: dict[TopicPartition, int] = {}
        auth = self.authorization
        group_denied = not auth.allowed(context, AclOperation.READ, ResourceType.GROUP, body["group_id"])
        denied_topics = auth.denied_topics(context, AclOperation.READ, (t["name"] for t in body["topics"]))
        for t in body["topics"]:
            for p in t["partitions"]:
                tp = TopicPartition(t["name"], p["partition_index"])
                if group_denied or tp.topic in denied_topics:
                    errors[tp] = (
                        ErrorCode.GROUP_AUTHORIZATION_FAILED if group_denied else ErrorCode.TOPIC_AUTHORIZATION_FAILED
                    )
                    continue
                if self._partition_exists is not None and not self._partition_exists(tp.topic, tp.partition):
                    # As Kafka: no offsets are kept for partitions the cluster lacks.
                    errors[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                    continue
                offsets[tp] = OffsetCommitData(
                    p["committed_offset"],
                    p.get("committed_leader_epoch", -1),
                    p["committed_metadata"],
                    p.get("commit_timestamp", -1),
                    expire_timestamp,
                )
        if offsets:
            errors |= await self.coordinator.commit_offsets(
                body["group_id"],
                body.get("member_id", ""),
                body.get("generation_id_or_member_epoch", -1),
                offsets,
                group_instance_id=body.get("group_instance_id"),
                api_version=header.request_api_version,
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

    @handles(ApiKey.OFFSET_FETCH, 0, 9)
    async def offset_fetch(
        self, context: RequestContext, body: bodies.OffsetFetchRequest
    ) -> bodies.OffsetFetchResponse:
        header = context.header
        version = header.request_api_version
        # (group id, topics (None: all), member id and epoch (v9: a consumer group member's)).
        groups: list[tuple[str, list[bodies.OffsetFetchRequestOffsetFetchRequestTopics] | None, str | None, int]]
        if version >= 8:
            groups = [
                (g["group_id"], g["topics"], g.get("member_id"), g.get("member_epoch", -1)) for g in body["groups"]
            ]
        else:
            groups = [(body["group_id"], body["topics"], None, -1)]
        answers: list[bodies.OffsetFetchResponseOffsetFetchResponseGroup] = []
        auth = self.authorization
        for group_id, topics, member_id, member_epoch in groups:
            if not auth.allowed(context, AclOperation.DESCRIBE, ResourceType.GROUP, group_id):
                answers.append({"group_id": group_id, "error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED, "topics": []})
                continue
            wanted = None
            if topics is not None:
                wanted = [TopicPartition(t["name"], p) for t in topics for p in t["partition_indexes"]]
            result = await self.coordinator.fetch_offsets(
                group_id,
                wanted,
                require_stable=body.get("require_stable", False),
                # v9: a consumer group member names itself with its epoch.
                member=(member_id, member_epoch) if version >= 9 else None,
            )
            denied = auth.denied_topics(context, AclOperation.DESCRIBE, (tp.topic for tp in result.partitions))
            by_topic: dict[str, list[bodies.OffsetFetchResponseOffsetFetchResponsePartitions]] = {}
            for tp, po in sorted(result.partitions.items()):
                if tp.topic in denied:
                    if wanted is not None:  # asked for by name: say so; a listing leaves it out
                        by_topic.setdefault(tp.topic, []).append(
                            {"partition_index": tp.partition, "committed_offset": -1, "committed_leader_epoch": -1,
                             "metadata": None, "error_code": ErrorCode.TOPIC_AUTHORIZATION_FAILED}
                        )  # fmt: skip
                    continue
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
        # v0-7 carry the one group's topics at the top level: the same fields, though the spec
        # names their structs apart (and marks the leader epoch, v5+, optional in the older one).
        older = cast("list[bodies.OffsetFetchResponseOffsetFetchResponseTopic]", answer["topics"])
        return {"throttle_time_ms": 0, "topics": older, "error_code": answer["error_code"]}

    @handles(ApiKey.OFFSET_DELETE, 0, 0)
    async def offset_delete(
        self, context: RequestContext, body: bodies.OffsetDeleteRequest
    ) -> bodies.OffsetDeleteResponse:
        # As Kafka: READ on each topic too (DELETE on the group is checked before).
        denied = self.authorization.denied_topics(context, AclOperation.READ, (t["name"] for t in body["topics"]))
        wanted = [
            TopicPartition(t["name"], p["partition_index"])
            for t in body["topics"]
            if t["name"] not in denied
            for p in t["partitions"]
        ]
        result = await self.coordinator.delete_offsets(body["group_id"], wanted)
        refused = {
            TopicPartition(t["name"], p["partition_index"]): ErrorCode.TOPIC_AUTHORIZATION_FAILED
            for t in body["topics"]
            if t["name"] in denied
            for p in t["partitions"]
        }
        by_topic: dict[str, list[bodies.OffsetDeleteResponseOffsetDeleteResponsePartition]] = {}
        for tp, error in (result.partitions | refused).items():
            by_topic.setdefault(tp.topic, []).append({"partition_index": tp.partition, "error_code": error})
        return {
            "error_code": result.error,
            "throttle_time_ms": 0,
            "topics": [{"name": name, "partitions": parts} for name, parts in by_topic.items()],
        }

    @handles(ApiKey.LIST_GROUPS, 0, 5)
    async def list_groups(self, context: RequestContext, body: bodies.ListGroupsRequest) -> bodies.ListGroupsResponse:
        result = await self.coordinator.list_groups(body.get("states_filter") or None)
        types = {t.lower() for t in body.get("types_filter") or ()}
        groups = [g for g in result.groups if not types or g.group_type in types]
        auth = self.authorization
        if not auth.allowed(context, AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME, log_denial=False):
            groups = [
                g for g in groups if auth.allowed(context, AclOperation.DESCRIBE, ResourceType.GROUP, g.group_id, False)
            ]
        return {
            "throttle_time_ms": 0,
            "error_code": result.error,
            "groups": [
                {
                    "group_id": g.group_id,
                    "protocol_type": g.protocol_type,
                    "group_state": g.state.value,
                    "group_type": g.group_type,
                }
                for g in groups
            ],
        }

    @handles(ApiKey.DESCRIBE_GROUPS, 0, 5)
    async def describe_groups(
        self, context: RequestContext, body: bodies.DescribeGroupsRequest
    ) -> bodies.DescribeGroupsResponse:
        auth = self.authorization
        allowed = [g for g in body["groups"] if auth.allowed(context, AclOperation.DESCRIBE, ResourceType.GROUP, g)]
        found = {d.group_id: d for d in await self.coordinator.describe_groups(allowed)}
        described = [
            found.get(g) or GroupDescription(g, ErrorCode.GROUP_AUTHORIZATION_FAILED, "") for g in body["groups"]
        ]
        with_operations = body.get("include_authorized_operations", False)
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
                    "authorized_operations": group_operations(
                        auth, context, d.group_id, with_operations and d.error is ErrorCode.NONE
                    ),
                }
                for d in described
            ],
        }

    @handles(ApiKey.DELETE_GROUPS, 0, 2)
    async def delete_groups(
        self, context: RequestContext, body: bodies.DeleteGroupsRequest
    ) -> bodies.DeleteGroupsResponse:
        auth = self.authorization
        names = body["groups_names"]
        allowed = [g for g in names if auth.allowed(context, AclOperation.DELETE, ResourceType.GROUP, g)]
        errors = dict.fromkeys(names, ErrorCode.GROUP_AUTHORIZATION_FAILED) | await self.coordinator.delete_groups(
            allowed
        )
        return {
            "throttle_time_ms": 0,
            "results": [{"group_id": g, "error_code": errors[g]} for g in dict.fromkeys(body["groups_names"])],
        }

    @handles(ApiKey.CONSUMER_GROUP_HEARTBEAT, 0, 1)
    async def consumer_group_heartbeat(
        self, context: RequestContext, body: bodies.ConsumerGroupHeartbeatRequest
    ) -> bodies.ConsumerGroupHeartbeatResponse:
        header = context.header
        names, owned = body["subscribed_topic_names"], body["topic_partitions"]
        request = HeartbeatRequest(
            body["group_id"],
            body["member_id"],
            body["member_epoch"],
            instance_id=body["instance_id"],
            rack_id=body["rack_id"],
            rebalance_timeout_ms=body["rebalance_timeout_ms"],
            subscribed_topic_names=None if names is None else tuple(names),
            subscribed_topic_regex=body.get("subscribed_topic_regex"),  # v1+
            server_assignor=body["server_assignor"],
            owned_partitions=None
            if owned is None
            else tuple(TopicPartitions(t["topic_id"], tuple(t["partitions"])) for t in owned),
            client_id=header.client_id or "",
            client_host="/" + context.client_host,
        )
        result = await self.coordinator.consumer_group_heartbeat(request)
        assignment: bodies.ConsumerGroupHeartbeatResponseAssignment | None = None
        if result.assignment is not None:
            assignment = {
                "topic_partitions": [
                    {"topic_id": tp.topic_id, "partitions": list(tp.partitions)} for tp in result.assignment
                ]
            }
        return {
            "throttle_time_ms": 0,
            "error_code": result.error,
            "error_message": result.error_message,
            "member_id": result.member_id,
            "member_epoch": result.member_epoch,
            "heartbeat_interval_ms": result.heartbeat_interval_ms,
            "assignment": assignment,
        }

    @handles(ApiKey.CONSUMER_GROUP_DESCRIBE, 0, 1)
    async def consumer_group_describe(
        self, context: RequestContext, body: bodies.ConsumerGroupDescribeRequest
    ) -> bodies.ConsumerGroupDescribeResponse:
        auth = self.authorization
        allowed = [g for g in body["group_ids"] if auth.allowed(context, AclOperation.DESCRIBE, ResourceType.GROUP, g)]
        found = {d.group_id: d for d in await self.coordinator.consumer_group_describe(allowed)}
        denied = set(body["group_ids"]) - set(allowed)
        with_operations = body.get("include_authorized_operations", False)

        def assignment(
            parts: tuple[TopicPartitions, ...], names: dict[Any, str]
        ) -> bodies.ConsumerGroupDescribeResponseDescribedAssignment:
            return {
                "topic_partitions": [
                    {
                        "topic_id": tp.topic_id,
                        "topic_name": names.get(tp.topic_id, ""),
                        "partitions": list(tp.partitions),
                    }
                    for tp in parts
                ]
            }

        groups: list[bodies.ConsumerGroupDescribeResponseDescribedGroup] = []
        for group_id in body["group_ids"]:
            if group_id in denied:
                groups.append(
                    {
                        "error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED,
                        "error_message": None,
                        "group_id": group_id,
                        "group_state": "",
                        "group_epoch": 0,
                        "assignment_epoch": 0,
                        "assignor_name": "",
                        "members": [],
                        "authorized_operations": group_operations(auth, context, group_id, False),
                    }
                )
                continue
            d = found[group_id]
            ok = d.error is ErrorCode.NONE
            groups.append(
                {
                    "error_code": d.error,
                    "error_message": f"Group {d.group_id} is not a consumer group or does not exist."
                    if d.error is ErrorCode.GROUP_ID_NOT_FOUND
                    else None,
                    "group_id": d.group_id,
                    "group_state": d.state if ok else "",
                    "group_epoch": d.group_epoch,
                    "assignment_epoch": d.assignment_epoch,
                    "assignor_name": d.assignor_name,
                    "members": [
                        {
                            "member_id": m.member_id,
                            "instance_id": m.instance_id,
                            "rack_id": m.rack_id,
                            "member_epoch": m.member_epoch,
                            "client_id": m.client_id,
                            "client_host": m.client_host,
                            "subscribed_topic_names": list(m.subscribed_topic_names),
                            "subscribed_topic_regex": m.subscribed_topic_regex,
                            "assignment": assignment(m.assignment, m.topic_names),
                            "target_assignment": assignment(m.target_assignment, m.topic_names),
                            "member_type": CLASSIC_MEMBER_TYPE if m.uses_classic_protocol else CONSUMER_MEMBER_TYPE,
                        }
                        for m in d.members
                    ],
                    "authorized_operations": group_operations(auth, context, d.group_id, with_operations and ok),
                }
            )
        return {"throttle_time_ms": 0, "groups": groups}
