"""What the broker's state says at scrape time: partition counts and ISR health, controller
state, per-partition log offsets and sizes, consumer-group lag, cleaner, retention and
transaction counters. Read on the event loop with the /metrics request, from the state the
broker keeps anyway (observability/metrics.py has the metrics recorded on the hot path)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from loglake.cluster.partition import Partition
    from loglake.coordination.controller import Controller
    from loglake.groups import GroupCoordinator
    from loglake.maintenance.log_cleaner import CleanerCounters
    from loglake.storage.log_manager import LogManager
    from loglake.transactions import TransactionCoordinator

    from ingest_gateway.metadata.metadata_cache import MetadataCache
    from ingest_gateway.replica.replica_manager import ReplicaManager


class BrokerCollector(Collector):
    """What the broker's state says at scrape time (on the event loop, with the /metrics request)."""

    def __init__(
        self,
        replica_manager: ReplicaManager,
        cache: MetadataCache,
        controller: Controller,
        group_coordinator: GroupCoordinator,
        transaction_coordinator: TransactionCoordinator,
        log_manager: LogManager,
        cleaner_counters: CleanerCounters,
        per_partition: bool,
    ) -> None:
        self._replica_manager = replica_manager
        self._cache = cache
        self._controller = controller
        self._group_coordinator = group_coordinator
        self._transaction_coordinator = transaction_coordinator
        self._log_manager = log_manager
        self._cleaner_counters = cleaner_counters
        self._per_partition = per_partition

    def collect(self) -> Iterator[Metric]:
        yield from self._replica_metrics()
        yield from self._controller_metrics()
        if self._per_partition:
            yield from self._logs()
        yield from self._consumer_groups()
        yield from self._maintenance()
        yield from self._transactions()

    def _replica_metrics(self) -> Iterator[Metric]:
        rm = self._replica_manager
        hosted = list(rm.partitions.values())
        led = [p for p in hosted if p.is_leader]
        prefix = "kafka_server_replica_manager_"
        yield _gauge(prefix + "partition_count", "Partitions hosted (PartitionCount)", len(hosted))
        yield _gauge(prefix + "leader_count", "Partitions led (LeaderCount)", len(led))
        yield _gauge(
            prefix + "under_replicated_partitions",
            "Led partitions whose ISR is smaller than their replicas (UnderReplicatedPartitions)",
            sum(1 for p in led if len(p.isr) < len(p.replicas) - len(self._adding(p))),
        )
        yield _gauge(
            prefix + "under_min_isr_partitions",
            "Led partitions whose ISR is below min.insync.replicas (UnderMinIsrPartitionCount)",
            sum(1 for p in led if len(p.isr) < p.config.min_insync_replicas),
        )
        yield _counter(
            prefix + "isr_shrinks_total", "ISR shrinks written by this leader (IsrShrinksPerSec)", rm.isr_shrinks
        )
        yield _counter(
            prefix + "isr_expands_total", "ISR expansions written by this leader (IsrExpandsPerSec)", rm.isr_expands
        )
        yield _gauge(
            prefix + "offline_replica_count",
            "Partitions of this broker on an offline log dir (OfflineReplicaCount)",
            len(rm.offline_partitions),
        )
        yield _gauge(
            "kafka_log_log_manager_offline_log_directory_count",
            "Log dirs offline after an I/O error (OfflineLogDirectoryCount)",
            len(self._log_manager.offline_dirs),
        )

    def _adding(self, partition: Partition) -> tuple[int, ...]:
        """Replicas a reassignment is adding: not counted as missing until they catch up (Kafka's rule)."""
        topic = self._cache.image.topics.get(partition.topic)
        return () if topic is None else topic.adding.get(partition.partition, ())

    def _controller_metrics(self) -> Iterator[Metric]:
        controller = self._controller
        epoch = controller.epoch  # read once: the controller may resign on another thread meanwhile
        active = epoch is not None
        yield _gauge(
            "kafka_controller_active_controller_count",
            "1 on the active controller (ActiveControllerCount)",
            int(active),
        )
        stats = controller.stats
        yield _counter(
            "kafka_controller_leader_elections_total",
            "Leader elections made by this broker as controller (LeaderElectionRateAndTimeMs)",
            stats.leader_elections,
        )
        yield _counter(
            "kafka_controller_unclean_leader_elections_total",
            "Elections of a leader outside the ISR (UncleanLeaderElectionsPerSec)",
            stats.unclean_leader_elections,
        )
        if epoch is None:
            return
        yield _gauge("kafka_controller_epoch", "The active controller's epoch", epoch)
        image = self._cache.image
        offline = sum(
            1 for states in image.partition_states.values() for s in states.values() if s.leader not in image.brokers
        )
        yield _gauge(
            "kafka_server_replica_manager_offline_partitions",
            "Partitions without a live leader, on the controller (OfflinePartitionsCount)",
            offline,
        )

    def _logs(self) -> Iterator[Metric]:
        labels = ["topic", "partition"]
        size = GaugeMetricFamily("kafka_log_size_bytes", "Bytes of a partition's log (Log Size)", labels=labels)
        start = GaugeMetricFamily(
            "kafka_log_start_offset", "A partition's log start offset (LogStartOffset)", labels=labels
        )
        end = GaugeMetricFamily("kafka_log_end_offset", "A partition's log end offset (LogEndOffset)", labels=labels)
        for (topic, p), partition in list(self._replica_manager.partitions.items()):
            key = [topic, str(p)]
            log_ = partition.log
            size.add_metric(key, log_.size)
            start.add_metric(key, log_.log_start_offset)
            end.add_metric(key, log_.log_end_offset)
        yield from (size, start, end)

    def _consumer_groups(self) -> Iterator[Metric]:
        labels = ["group", "topic", "partition"]
        committed = GaugeMetricFamily(
            "kafka_consumergroup_committed_offset", "A group's committed offset, on its coordinator", labels=labels
        )
        lag = GaugeMetricFamily(
            "kafka_consumergroup_lag",
            "High watermark minus committed offset, on the coordinator, for partitions it hosts",
            labels=labels,
        )
        partitions = self._replica_manager.partitions
        for group, tp, offset in self._group_coordinator.committed_offsets():
            key = [group, tp.topic, str(tp.partition)]
            committed.add_metric(key, offset)
            local = partitions.get((tp.topic, tp.partition))
            if local is not None:
                lag.add_metric(key, max(0, local.high_watermark - offset))
        yield from (committed, lag)

    def _maintenance(self) -> Iterator[Metric]:
        log_manager = self._log_manager
        yield _gauge(
            "kafka_log_recovery_time_seconds",
            "Loading (after an unclean shutdown, recovering) the logs at start-up",
            log_manager.recovery_seconds,
        )
        yield _counter(
            "kafka_log_retention_segments_deleted_total", "Segments deleted by retention", log_manager.segments_deleted
        )
        counters = self._cleaner_counters
        yield _counter("kafka_log_cleaner_runs_total", "Compactions of a log (either executor)", counters.cleanings)
        yield _counter("kafka_log_cleaner_failures_total", "Compactions that failed", counters.failures)
        yield _counter("kafka_log_cleaner_bytes_read_total", "Bytes read by compactions", counters.bytes_read)
        yield _counter("kafka_log_cleaner_bytes_written_total", "Bytes written by compactions", counters.bytes_written)
        yield _counter("kafka_log_cleaner_time_seconds_total", "Time spent compacting", counters.seconds)

    def _transactions(self) -> Iterator[Metric]:
        coordinator = self._transaction_coordinator
        counters = coordinator.counters
        prefix = "kafka_transaction_coordinator_"
        yield _gauge(
            prefix + "ongoing", "Open or ending transactions this coordinator owns", coordinator.ongoing_count()
        )
        yield _counter(prefix + "committed_total", "Transactions committed", counters.committed)
        yield _counter(prefix + "aborted_total", "Transactions aborted (timed-out ones included)", counters.aborted)
        yield _counter(prefix + "timed_out_total", "Transactions aborted by transaction.timeout.ms", counters.timed_out)


def _gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, value=value)


def _counter(name: str, doc: str, value: float) -> CounterMetricFamily:
    return CounterMetricFamily(name, doc, value=value)
