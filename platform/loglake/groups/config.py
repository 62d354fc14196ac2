"""The group coordinator's broker settings (GroupConfig), with Kafka's names and defaults."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from loglake.groups.consumer_group import ConsumerGroupConfig

# The newest OffsetCommit version (v9 carries KIP-848 member epochs); callers outside the
# Kafka protocol (the HTTP consumer, offset resets) commit as it.
LATEST_OFFSET_COMMIT_VERSION = 9


@dataclass(frozen=True)
class GroupConfig:
    """The broker settings the coordinator uses, with Kafka's defaults."""

    group_min_session_timeout_ms: int = 6000
    group_max_session_timeout_ms: int = 1_800_000
    group_initial_rebalance_delay_ms: int = 3000
    offsets_topic_num_partitions: int = 50
    offset_metadata_max_bytes: int = 4096
    offsets_retention_ms: int = 7 * 24 * 3600 * 1000
    offsets_retention_check_interval_ms: int = 600_000
    # Kafka's GroupCoordinator.NewMemberJoinTimeoutMs (a constant there).
    new_member_join_timeout_ms: int = 300_000
    # The group.consumer.* settings of consumer-protocol (KIP-848) groups.
    consumer: ConsumerGroupConfig = field(default_factory=ConsumerGroupConfig)

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> GroupConfig:
        """From server.properties names; offsets.retention.minutes as Kafka reads it."""
        base = cls()

        def get(name: str, default: int) -> int:
            return int(props[name]) if name in props else default

        retention_ms = base.offsets_retention_ms
        if "offsets.retention.minutes" in props:
            retention_ms = int(props["offsets.retention.minutes"]) * 60_000
        return cls(
            group_min_session_timeout_ms=get("group.min.session.timeout.ms", base.group_min_session_timeout_ms),
            group_max_session_timeout_ms=get("group.max.session.timeout.ms", base.group_max_session_timeout_ms),
            group_initial_rebalance_delay_ms=get(
                "group.initial.rebalance.delay.ms", base.group_initial_rebalance_delay_ms
            ),
            offsets_topic_num_partitions=get("offsets.topic.num.partitions", base.offsets_topic_num_partitions),
            offset_metadata_max_bytes=get("offset.metadata.max.bytes", base.offset_metadata_max_bytes),
            offsets_retention_ms=retention_ms,
            offsets_retention_check_interval_ms=get(
                "offsets.retention.check.interval.ms", base.offsets_retention_check_interval_ms
            ),
            consumer=ConsumerGroupConfig.from_properties(props),
        )
