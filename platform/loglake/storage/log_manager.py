"""Every partition log of a broker, across its `log.dirs` (Kafka's LogManager).

Start-up loads each `<topic>-<partition>` directory. A log dir that holds the
clean-shutdown marker skips recovery; otherwise each log recovers from its checkpointed
recovery point. The marker is removed once the logs are loaded, so a crash from then on
is noticed at the next start, and written again by `shutdown` after the final flush and
checkpoints.

A log dir that cannot be opened at start-up, or whose disk fails or fills up later, is
offline (Kafka's offline log dir, KIP-112): every I/O error in it is reported to the
manager's `LogDirFailureChannel`, which takes the dir offline at once (nothing more is
tried on its disk); then, on the scheduler thread, `handle_log_dir_failure` drops its
logs, remembers their partitions as offline (they are not created again elsewhere: their
data is still on the failed disk) and tells the `offline_listeners` (the broker's replica
manager). New logs go to the live dirs only; DescribeLogDirs reports an offline dir with
KAFKA_STORAGE_ERROR. The dir is tried again at the next start.

Moving a replica to another log dir (AlterReplicaLogDirs, KIP-113) goes through a future
log, `<topic>-<partition>.<uuid>-future` in the target dir, which the broker fills from
the current log and then swaps in (`replace_current_with_future`). The swap renames the
current log to `-delete` first and the future to `<topic>-<partition>` second, so a crash
in between leaves only the caught-up future, which start-up promotes; a future found next
to its current log is loaded as a future, and the move resumes.

Housekeeping runs on the manager's `Scheduler` thread once `startup` is called, as
Kafka's LogManager schedules it: "kafka-log-retention" every
`log.retention.check.interval.ms` (`cleanup_logs`) and "kafka-log-flusher" every
`log.flush.scheduler.interval.ms` (`flush_dirty`); removed segments' files are deleted
on the same thread after `file.delete.delay.ms`.
"""

from __future__ import annotations

import logging
import shutil
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path

from loglake.config import LogConfig, validate_topic_name
from loglake.errors import ErrorCode, KafkaError
from loglake.scheduler import Scheduler
from loglake.storage.checkpoints import (
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    CheckpointFileError,
    OffsetCheckpointFile,
)
from loglake.storage.fileutil import atomic_write_text, remove_temp_files
from loglake.storage.log import Log, future_log_dir_name, parse_future_topic_partition, parse_topic_partition
from loglake.storage.log_dir_failure import LogDirFailureChannel
from loglake.storage.meta_properties import (
    META_PROPERTIES,
    InconsistentMetaPropertiesError,
    MetaProperties,
    new_cluster_id,
)
from loglake.storage.segment import now_ms

logger = logging.getLogger(__name__)

CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
DELETE_DIR_SUFFIX = "-delete"

TopicPartition = tuple[str, int]


class LogManager:
    def __init__(
        self,
        log_dirs: Sequence[str | Path],
        default_config: LogConfig,
        broker_id: int = 0,
        cluster_id: str | None = None,
        scheduler: Scheduler | None = None,
    ) -> None:
        if not log_dirs:
            raise ValueError("at least one log dir is needed")
        self.log_dirs = [Path(d).absolute() for d in log_dirs]
        self.default_config = default_config
        self.broker_id = broker_id
        self.failure_channel = LogDirFailureChannel()
        self.failure_channel.listeners.append(self._on_dir_offline)
        # Told (log dir, its partitions now offline) on the scheduler thread after a dir
        # went offline; `live_dirs` is then empty if it was the last one.
        self.offline_listeners: list[Callable[[Path, list[TopicPartition]], None]] = []
        self._handled_offline: set[Path] = set()
        # Partitions whose log is in an offline dir: not created anywhere else until restart.
        self._offline_partitions: dict[TopicPartition, Path] = {}
        self._logs: dict[TopicPartition, Log] = {}
        self._future_logs: dict[TopicPartition, Log] = {}
        # Where a partition not yet hosted is to be created (AlterReplicaLogDirs before LeaderAndIsr).
        self._preferred_dirs: dict[TopicPartition, Path] = {}
        self._lock = threading.Lock()
        self._deletion_bounds_of: Callable[[str, int], tuple[int, int] | None] = lambda topic, partition: None
        self._checkpoint_lock = threading.Lock()
        self.scheduler = scheduler or Scheduler()
        # Told each log flush's seconds (the broker's metrics); None: not measured.
        self.flush_observer: Callable[[float], None] | None = None
        # Segments deleted by retention since start-up.
        self.segments_deleted = 0
        self.cluster_id = self._check_meta_properties(cluster_id)
        started = time.monotonic()
        for log_dir in self.live_dirs:
            try:
                self._load_dir(log_dir)
            except OSError as exc:
                self._take_offline(log_dir, "loading the logs", exc)
        self._promote_orphan_futures()
        # How long loading (and, after an unclean shutdown, recovering) the logs took.
        self.recovery_seconds = time.monotonic() - started

    @property
    def live_dirs(self) -> list[Path]:
        return [d for d in self.log_dirs if not self.failure_channel.is_offline(d)]

    @property
    def offline_dirs(self) -> set[Path]:
        return set(self.failure_channel.offline_dirs())

    def offline_partitions(self) -> dict[TopicPartition, Path]:
        """Partitions whose log is in an offline dir, with that dir."""
        with self._lock:
            return dict(self._offline_partitions)

    def _take_offline(self, log_dir: Path, what: str, cause: OSError) -> None:
        """At start-up: a dir that cannot be read or stamped stays offline; the broker
        starts on the others (Kafka's rule), and refuses to start without any."""
        self.failure_channel.report(log_dir, f"{what} in {log_dir} failed", cause)
        self.handle_log_dir_failure(log_dir)
        if not self.live_dirs:
            raise RuntimeError(
                f"every log dir is offline: {self.failure_channel.offline_dirs()}; "
                "fix or replace the disks (or the log.dirs setting) and start again"
            )

    def _on_dir_offline(self, log_dir: Path) -> None:
        # On the failing call's thread, perhaps under a log's lock: hand the work over.
        self.scheduler.schedule_once(f"log-dir-failure {log_dir}", lambda: self.handle_log_dir_failure(log_dir))

    def handle_log_dir_failure(self, log_dir: Path) -> list[TopicPartition]:
        """Drop the logs of an offline dir (Kafka's LogManager.handleLogDirFailure): their
        partitions are offline until restart, a future log there is abandoned (the
        current log stays), and the future logs of its partitions elsewhere are dropped
        too. Tells the `offline_listeners`; returns the partitions now offline. Runs once
        per dir."""
        with self._lock:
            if log_dir in self._handled_offline:
                return []
            self._handled_offline.add(log_dir)
            offline = sorted(key for key, log in self._logs.items() if log.dir.parent == log_dir)
            dropped = []
            for key in offline:
                dropped.append(self._logs.pop(key))
                self._offline_partitions[key] = log_dir
            for key, future in list(self._future_logs.items()):
                if future.dir.parent == log_dir or key in self._offline_partitions:
                    dropped.append(self._future_logs.pop(key))
            self._preferred_dirs = {k: d for k, d in self._preferred_dirs.items() if d != log_dir}
        for log in dropped:
            if log.dir.parent == log_dir:
                log.close_handlers()  # the failed disk's files; the others' stay for restart
        logger.error(
            "log dir %s is offline: %d partitions offline (%s); %d log dirs remain online",
            log_dir,
            len(offline),
            ", ".join(f"{t}-{p}" for t, p in offline[:20]) + (" ..." if len(offline) > 20 else ""),
            len(self.live_dirs),
        )
        for listener in list(self.offline_listeners):
            listener(log_dir, offline)
        return offline

    def _check_meta_properties(self, cluster_id: str | None) -> str:
        """Every dir must be this broker's and this cluster's; new dirs are stamped."""
        found: dict[Path, MetaProperties] = {}
        for log_dir in self.log_dirs:
            try:
                log_dir.mkdir(parents=True, exist_ok=True)
                meta = MetaProperties.read(log_dir / META_PROPERTIES)
            except OSError as exc:
                self._take_offline(log_dir, f"reading {META_PROPERTIES}", exc)
                continue
            if meta is None:
                continue
            if meta.broker_id != self.broker_id:
                raise InconsistentMetaPropertiesError(
                    f"{log_dir} belongs to broker.id={meta.broker_id}, not {self.broker_id}"
                )
            found[log_dir] = meta
        cluster_ids = {m.cluster_id for m in found.values()}
        foreign = {str(d): m.cluster_id for d, m in found.items() if cluster_id and m.cluster_id != cluster_id}
        if foreign:
            raise InconsistentMetaPropertiesError(
                f"the cluster id is {cluster_id}, but meta.properties says {foreign}: "
                "this broker is trying to join the wrong cluster (is zookeeper.connect right?)"
            )
        cluster_ids |= {cluster_id} if cluster_id else set()
        if len(cluster_ids) > 1:
            raise InconsistentMetaPropertiesError(f"log dirs belong to different clusters: {sorted(cluster_ids)}")
        resolved = cluster_ids.pop() if cluster_ids else new_cluster_id()
        for log_dir in self.live_dirs:
            if log_dir not in found:
                try:
                    MetaProperties(self.broker_id, resolved).write(log_dir / META_PROPERTIES)
                except OSError as exc:
                    self._take_offline(log_dir, f"writing {META_PROPERTIES}", exc)
        return resolved

    def _load_dir(self, log_dir: Path) -> None:
        marker = log_dir / CLEAN_SHUTDOWN_FILE
        clean = marker.exists()
        remove_temp_files(log_dir)
        recovery_points = _read_checkpoint(log_dir / RECOVERY_POINT_CHECKPOINT)
        start_offsets = _read_checkpoint(log_dir / LOG_START_OFFSET_CHECKPOINT)
        loaded = 0
        for child in sorted(log_dir.iterdir()):
            if not child.is_dir():
                continue
            if child.name.endswith(DELETE_DIR_SUFFIX):
                # A deletion interrupted by a crash: finish it.
                shutil.rmtree(child, ignore_errors=True)
                continue
            future_key = parse_future_topic_partition(child.name)
            key = future_key or parse_topic_partition(child.name)
            logs = self._logs if future_key is None else self._future_logs
            if key is None:
                continue
            if key in logs:
                raise RuntimeError(f"{key[0]}-{key[1]} is in two log dirs: {logs[key].dir} and {child}")
            logs[key] = self._observed(
                Log.open(
                    child,
                    self.default_config,
                    recovery_point=recovery_points.get(key, 0),
                    log_start_offset=start_offsets.get(key, 0),
                    had_clean_shutdown=clean,
                    scheduler=self.scheduler,
                )
            )
            loaded += 1
        # A dir without logs (a fresh one, above all) had nothing a crash could leave behind.
        state = "no logs" if not loaded else "clean shutdown" if clean else "unclean shutdown"
        logger.info("loaded %s (%s)", log_dir, state)
        marker.unlink(missing_ok=True)

    def _promote_orphan_futures(self) -> None:
        """A future log without a current one is what a crash between the two renames of
        `replace_current_with_future` leaves: the future had caught up, so it is the log."""
        for key, future in list(self._future_logs.items()):
            if key not in self._logs:
                logger.warning(
                    "%s: finishing its move to %s, interrupted by a crash", future.dir.name, future.dir.parent
                )
                future.rename_dir(future.dir.with_name(f"{key[0]}-{key[1]}"))
                self._logs[key] = self._future_logs.pop(key)

    # Logs --------------------------------------------------------------------------------

    def get_log(self, topic: str, partition: int) -> Log | None:
        return self._logs.get((topic, partition))

    def get_future_log(self, topic: str, partition: int) -> Log | None:
        return self._future_logs.get((topic, partition))

    def get_or_create_log(
        self, topic: str, partition: int, config: LogConfig | None = None, is_new: bool = True
    ) -> Log:
        """The partition's log, created in the log dir with the fewest partitions if new.
        A given `config` replaces the config of an existing log (it was loaded with the
        defaults at start-up). A replica that is not `is_new` (it existed before) is not
        created while a log dir is offline: its log may be there (Kafka's rule), and a
        second copy elsewhere would stop the next start-up."""
        with self._lock:
            log = self._logs.get((topic, partition))
            if log is not None:
                if config is not None:
                    log.update_config(config)
                return log
            validate_topic_name(topic)
            if partition < 0:
                raise ValueError(f"partition {partition} is negative")
            offline_in = self._offline_partitions.get((topic, partition))
            if offline_in is not None:
                raise KafkaError(
                    ErrorCode.KAFKA_STORAGE_ERROR, f"{topic}-{partition} is in log dir {offline_in}, which is offline"
                )
            offline_dirs = self.failure_channel.offline_dirs()
            if not is_new and offline_dirs:
                raise KafkaError(
                    ErrorCode.KAFKA_STORAGE_ERROR,
                    f"{topic}-{partition} is not here and may be on an offline log dir ({', '.join(map(str, offline_dirs))})",
                )
            log_dir = self._preferred_dirs.pop((topic, partition), None)
            if log_dir is None or self.failure_channel.is_offline(log_dir):
                log_dir = self._next_log_dir()
            log = self._open_new(log_dir / f"{topic}-{partition}", config or self.default_config)
            self._logs[(topic, partition)] = log
            return log

    def _open_new(self, dir: Path, config: LogConfig, log_start_offset: int = 0, recovery_point: int = 0) -> Log:
        """Create a log in `dir`; an I/O error takes its log dir offline (KAFKA_STORAGE_ERROR)."""
        try:
            log = Log.open(dir, config, recovery_point, log_start_offset, scheduler=self.scheduler)
        except OSError as exc:
            raise self.failure_channel.report(dir.parent, f"creating {dir.name} failed", exc) from exc
        return self._observed(log)

    def _observed(self, log: Log) -> Log:
        log.on_flush = self._on_flush
        log.failure_channel = self.failure_channel
        return log

    def _on_flush(self, seconds: float) -> None:
        observer = self.flush_observer
        if observer is not None:
            observer(seconds)

    def _next_log_dir(self) -> Path:
        """The live log dir with the fewest logs, future logs included (as Kafka counts)."""
        counts = {d: 0 for d in self.live_dirs}
        if not counts:
            raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, "every log dir is offline")
        if len(counts) == 1:
            # Nothing to count: counting walks every log, thousands on a large broker.
            return next(iter(counts))
        for existing in self._all_logs():
            if existing.log_dir in counts:
                counts[existing.log_dir] += 1
        return min(counts, key=lambda d: counts[d])

    def delete_log(self, topic: str, partition: int) -> bool:
        """Rename the partition dir to `<dir>.<uuid>-delete` (so a crash midway cannot
        resurrect it), then remove it; its future log, if any, goes first (a future alone
        would be promoted at start-up). Returns False if there was no such log."""
        self.remove_future_log(topic, partition)
        with self._lock:
            log = self._logs.pop((topic, partition), None)
            self._preferred_dirs.pop((topic, partition), None)
        if log is None:
            return False
        _delete_renamed(log)
        self.checkpoint_recovery_points()
        self.checkpoint_log_start_offsets()
        return True

    def all_logs(self) -> list[Log]:
        """The current logs (future logs are copies in the making: see `future_logs`)."""
        return list(self._logs.values())

    def future_logs(self) -> list[Log]:
        return list(self._future_logs.values())

    def _all_logs(self) -> list[Log]:
        return [*self._logs.values(), *self._future_logs.values()]

    # Moving a replica between log dirs -----------------------------------------------------

    def resolve_log_dir(self, path: str) -> Path:
        """The configured log dir at absolute `path`: LOG_DIR_NOT_FOUND if there is none,
        KAFKA_STORAGE_ERROR if it is offline (Kafka's LogManager.isLogDirOnline)."""
        log_dir = Path(path)
        if not log_dir.is_absolute() or log_dir not in self.log_dirs:
            raise KafkaError(ErrorCode.LOG_DIR_NOT_FOUND, f"log dir {path} is not in log.dirs")
        self.failure_channel.check_online(log_dir)
        return log_dir

    def maybe_update_preferred_log_dir(self, topic: str, partition: int, log_dir: Path) -> None:
        """Create the partition in `log_dir` when it comes, unless a log of it is there already."""
        with self._lock:
            logs = (self._logs.get((topic, partition)), self._future_logs.get((topic, partition)))
            if not any(log is not None and log.dir.parent == log_dir for log in logs):
                self._preferred_dirs[(topic, partition)] = log_dir

    def create_future_log(self, topic: str, partition: int, log_dir: Path) -> Log | None:
        """An empty future log of a current log, in `log_dir`, starting where the current
        log's first segment does (a batch boundary the copy can start from). None if the
        current log is in `log_dir` already; the existing future log if it is there."""
        key = (topic, partition)
        with self._lock:
            current = self._logs.get(key)
            if current is None:
                raise KafkaError(ErrorCode.REPLICA_NOT_AVAILABLE, f"this broker has no log of {topic}-{partition}")
            future = self._future_logs.get(key)
            if future is not None and future.dir.parent == log_dir:
                return future
            if future is not None:
                raise ValueError(f"{topic}-{partition} already has a future log in {future.dir.parent}")
            if current.dir.parent == log_dir:
                return None
            start = current.segments[0].base_offset
            future = self._open_new(log_dir / future_log_dir_name(topic, partition), current.config, start, start)
            self._future_logs[key] = future
            return future

    def remove_future_log(self, topic: str, partition: int) -> bool:
        """Abandon a move: delete the future log. Returns False if there was none."""
        with self._lock:
            future = self._future_logs.pop((topic, partition), None)
        if future is None:
            return False
        _delete_renamed(future)
        self.checkpoint_recovery_points()
        self.checkpoint_log_start_offsets()
        return True

    def replace_current_with_future(self, topic: str, partition: int) -> Log:
        """Swap in the future log, which must hold exactly what the current log holds; the
        caller keeps appends away meanwhile. The old copy is deleted; returns the new log."""
        key = (topic, partition)
        with self._lock:
            current, future = self._logs.get(key), self._future_logs.get(key)
            if current is None or future is None:
                raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, f"{topic}-{partition} has no current or future log")
            if (future.log_start_offset, future.log_end_offset) != (current.log_start_offset, current.log_end_offset):
                raise ValueError(f"future {future} has not caught up with {current}")
            future.flush()
            # The checkpoints of the target dir take in the future log before it is the
            # only copy: a crash after the next rename recovers it from there.
            self._checkpoint_all()
            _rename_for_deletion(current)
            future.rename_dir(future.dir.with_name(f"{topic}-{partition}"))
            del self._future_logs[key]
            self._logs[key] = future
        current.delete()
        self._checkpoint_all()
        return future

    # Durability --------------------------------------------------------------------------

    def checkpoint_recovery_points(self) -> None:
        self._checkpoint(RECOVERY_POINT_CHECKPOINT, lambda log: log.recovery_point)

    def checkpoint_log_start_offsets(self) -> None:
        self._checkpoint(LOG_START_OFFSET_CHECKPOINT, lambda log: log.log_start_offset)

    def _checkpoint_all(self) -> None:
        self.checkpoint_recovery_points()
        self.checkpoint_log_start_offsets()

    def _checkpoint(self, name: str, value: Callable[[Log], int]) -> None:
        # A future log is never in its current log's dir, so a dir has one entry per partition.
        by_dir: dict[Path, dict[TopicPartition, int]] = {d: {} for d in self.live_dirs}
        for log in self._all_logs():
            by_dir.setdefault(log.log_dir, {})[(log.topic, log.partition)] = value(log)
        with self._checkpoint_lock:
            for log_dir, offsets in by_dir.items():
                if self.failure_channel.is_offline(log_dir):
                    continue
                try:
                    OffsetCheckpointFile(log_dir / name).write(offsets)
                except OSError as exc:
                    self.failure_channel.report(log_dir, f"writing {name}", exc)

    def startup(
        self,
        deletion_bounds_of: Callable[[str, int], tuple[int, int] | None],
        retention_check_interval_ms: int,
        flush_check_interval_ms: int,
    ) -> None:
        """Schedule retention and flushes. `deletion_bounds_of(topic, partition)` is the
        hosted replica's (high watermark, tiered offset): retention deletes below both (the
        tiered offset matters only with remote.storage.enable). None while the partition
        is not hosted: its log is then left alone."""
        self._deletion_bounds_of = deletion_bounds_of
        self.scheduler.schedule(
            "kafka-log-retention", self.cleanup_logs, retention_check_interval_ms, retention_check_interval_ms
        )
        self.scheduler.schedule("kafka-log-flusher", self.flush_dirty, flush_check_interval_ms, flush_check_interval_ms)

    def cleanup_logs(self, now: int | None = None) -> int:
        """One retention pass over the current logs (Kafka's LogManager.cleanupLogs): roll
        active segments older than segment.ms, delete what `Log.delete_old_segments`
        allows, then checkpoint the moved log start offsets. Returns the segments deleted.
        (A crash before the checkpoint is harmless: start-up removes the `.deleted` files
        and the log starts at its first remaining segment.)"""
        now = now_ms() if now is None else now
        deleted = 0
        for log in self.all_logs():
            try:
                bounds = self._deletion_bounds_of(log.topic, log.partition)
                if bounds is None:
                    continue
                log.roll_if_segment_ms_elapsed(now)
                deleted += log.delete_old_segments(bounds[0], now, tiered_offset=bounds[1])
            except Exception:
                # One partition's failure (a disk error, an unreachable metadata store)
                # must not stop retention of the others.
                logger.exception("retention of %s failed", log.dir.name)
        if deleted:
            self.segments_deleted += deleted
            logger.info("retention deleted %d segments", deleted)
            self.checkpoint_log_start_offsets()
        return deleted

    def flush_dirty(self, now: int | None = None) -> None:
        """Flush every log whose last flush is at least its flush.ms ago."""
        now = now_ms() if now is None else now
        for log in self._all_logs():
            if now - log.last_flush_ms >= log.config.flush_ms:
                try:
                    log.flush()
                except KafkaError:
                    pass  # its dir went offline (reported); the other logs still flush

    def shutdown(self) -> None:
        """Stop the housekeeping, flush and close every log, write the checkpoints, then
        the clean-shutdown marker."""
        self.scheduler.shutdown()
        for log in self._all_logs():
            try:
                log.flush()
                log.close()
            except KafkaError:
                pass  # its dir went offline (reported): no clean-shutdown marker there
        self._checkpoint_all()
        # Only dirs that stayed online: an offline one is recovered at the next start.
        for log_dir in self.live_dirs:
            try:
                atomic_write_text(log_dir / CLEAN_SHUTDOWN_FILE, "")
            except OSError as exc:
                self.failure_channel.report(log_dir, "writing the clean shutdown marker", exc)


def _rename_for_deletion(log: Log) -> None:
    log.rename_dir(log.dir.with_name(f"{log.dir.name}.{uuid.uuid4().hex}{DELETE_DIR_SUFFIX}"))


def _delete_renamed(log: Log) -> None:
    _rename_for_deletion(log)
    log.delete()


def _read_checkpoint(path: Path) -> dict[TopicPartition, int]:
    """A checkpoint's offsets; a damaged file counts as empty, which is safe: every log
    is then recovered from its start and keeps the start its segments give it."""
    try:
        return OffsetCheckpointFile(path).read()
    except CheckpointFileError as exc:
        logger.warning("ignoring the damaged %s (%s): its logs recover from their first segment", path.name, exc)
        return {}
