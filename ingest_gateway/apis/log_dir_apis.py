"""The log dir APIs: DescribeLogDirs and AlterReplicaLogDirs (KIP-113), at Kafka 3.9.0's versions."""

from __future__ import annotations

import logging
import shutil
from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING

from loglake.errors import ErrorCode, KafkaError
from loglake.protocol import ApiKey
from loglake.protocol.bodies import (
    AlterReplicaLogDirsRequest,
    AlterReplicaLogDirsResponse,
    AlterReplicaLogDirsResponseAlterReplicaLogDirPartitionResult,
    DescribeLogDirsRequest,
    DescribeLogDirsResponse,
    DescribeLogDirsResponseDescribeLogDirsPartition,
    DescribeLogDirsResponseDescribeLogDirsResult,
)
from loglake.storage.log import Log

from ingest_gateway.apis.request_router import handles
from ingest_gateway.network.request_context import RequestContext
from ingest_gateway.replica.replica_alter_log_dirs import ReplicaAlterLogDirsManager

if TYPE_CHECKING:
    from ingest_gateway.replica.replica_manager import ReplicaManager

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
# DescribeLogDirs' offset lag when the partition has no hosted replica to compare with.
INVALID_OFFSET_LAG = -1


class LogDirApis:
    def __init__(self, replica_manager: ReplicaManager, mover: ReplicaAlterLogDirsManager) -> None:
        self._replicas = replica_manager
        self._logs = replica_manager.log_manager
        self._mover = mover

    @handles(ApiKey.DESCRIBE_LOG_DIRS, 0, 4)
    async def describe_log_dirs(self, context: RequestContext, body: DescribeLogDirsRequest) -> DescribeLogDirsResponse:
        """Every log dir (configured order), with the wanted partitions' logs in it;
        `topics` null means every partition."""
        topics = body["topics"]
        wanted = None if topics is None else {(t["topic"], p) for t in topics for p in t["partitions"]}
        logs_by_dir: dict[Path, list[Log]] = defaultdict(list)
        for log_ in [*self._logs.all_logs(), *self._logs.future_logs()]:
            if wanted is None or (log_.topic, log_.partition) in wanted:
                logs_by_dir[log_.dir.parent].append(log_)
        results = [self._describe_dir(d, logs_by_dir[d]) for d in self._logs.log_dirs]
        return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "results": results}

    def _describe_dir(self, log_dir: Path, logs: list[Log]) -> DescribeLogDirsResponseDescribeLogDirsResult:
        try:
            if log_dir in self._logs.offline_dirs:
                raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, f"log dir {log_dir} is offline")
            usage = shutil.disk_usage(log_dir)
        except (KafkaError, OSError) as exc:
            log.warning("cannot describe log dir %s: %s", log_dir, exc)
            return {"error_code": ErrorCode.KAFKA_STORAGE_ERROR, "log_dir": str(log_dir), "topics": []}
        by_topic: dict[str, list[DescribeLogDirsResponseDescribeLogDirsPartition]] = defaultdict(list)
        for log_ in sorted(logs, key=lambda lg: (lg.topic, lg.partition)):
            by_topic[log_.topic].append(
                {
                    "partition_index": log_.partition,
                    "partition_size": log_.size,
                    "offset_lag": self._offset_lag(log_),
                    "is_future_key": log_.is_future,
                }
            )
        return {
            "error_code": ErrorCode.NONE,
            "log_dir": str(log_dir),
            "topics": [{"name": topic, "partitions": partitions} for topic, partitions in by_topic.items()],
            "total_bytes": usage.total,
            "usable_bytes": usage.free,  # what the broker's user may still write (statvfs f_bavail)
        }

    def _offset_lag(self, log_: Log) -> int:
        """A future log's lag behind the current log; a current log's behind the HW (0 on
        a leader, whose HW never passes its LEO)."""
        partition = self._replicas.partitions.get((log_.topic, log_.partition))
        if partition is None:
            return INVALID_OFFSET_LAG
        if log_.is_future:
            return partition.log_end_offset - log_.log_end_offset
        return max(partition.high_watermark - log_.log_end_offset, 0)

    @handles(ApiKey.ALTER_REPLICA_LOG_DIRS, 0, 2)
    async def alter_replica_log_dirs(
        self, context: RequestContext, body: AlterReplicaLogDirsRequest
    ) -> AlterReplicaLogDirsResponse:
        # A partition named twice goes where it was named last, as Kafka's map of it does.
        destinations: dict[TopicPartition, str] = {}
        for d in body["dirs"]:
            for t in d["topics"]:
                for p in t["partitions"]:
                    destinations[(t["name"], p)] = d["path"]
        by_topic: dict[str, list[AlterReplicaLogDirsResponseAlterReplicaLogDirPartitionResult]] = defaultdict(list)
        for (topic, partition), path in destinations.items():
            error = ErrorCode.NONE
            try:
                await self._mover.alter_log_dir(topic, partition, path)
            except KafkaError as exc:
                log.warning("cannot move %s-%d to %s: %s", topic, partition, path, exc.message or exc.code.name)
                error = exc.code
            by_topic[topic].append({"partition_index": partition, "error_code": error})
        return {
            "throttle_time_ms": 0,
            "results": [{"topic_name": topic, "partitions": partitions} for topic, partitions in by_topic.items()],
        }
