"""Every partition log of a broker, across its `log.dirs` (Kafka's LogManager).

Start-up loads each `<topic>-<partition>` directory. A log dir that holds the
clean-shutdown marker skips recovery; otherwise each log recovers from its checkpointed
recovery point. The marker is removed once the logs are loaded, so a crash from then on
is noticed at the next start, and written again by `shutdown` after the final flush and
checkpoints.
"""

from __future__ import annotations

import logging
import shutil
import threading
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path

from loglake.config import LogConfig, validate_topic_name
from loglake.storage.checkpoints import (
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    CheckpointFileError,
    OffsetCheckpointFile,
)
from loglake.storage.fileutil import atomic_write_text
from loglake.storage.log import Log, parse_topic_partition
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
    ) -> None:
        if not log_dirs:
            raise ValueError("at least one log dir is needed")
        self.log_dirs = [Path(d) for d in log_dirs]
        self.default_config = default_config
        self.broker_id = broker_id
        self._logs: dict[TopicPartition, Log] = {}
        self._lock = threading.Lock()
        self._checkpoint_lock = threading.Lock()
        self.cluster_id = self._check_meta_properties(cluster_id)
        for log_dir in self.log_dirs:
            self._load_dir(log_dir)

    def _check_meta_properties(self, cluster_id: str | None) -> str:
        """Every dir must be this broker's and this cluster's; new dirs are stamped."""
        found: dict[Path, MetaProperties] = {}
        for log_dir in self.log_dirs:
            log_dir.mkdir(parents=True, exist_ok=True)
            meta = MetaProperties.read(log_dir / META_PROPERTIES)
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
        for log_dir in self.log_dirs:
            if log_dir not in found:
                MetaProperties(self.broker_id, resolved).write(log_dir / META_PROPERTIES)
        return resolved

    def _load_dir(self, log_dir: Path) -> None:
        marker = log_dir / CLEAN_SHUTDOWN_FILE
        clean = marker.exists()
        recovery_points = _read_checkpoint(log_dir / RECOVERY_POINT_CHECKPOINT)
        start_offsets = _read_checkpoint(log_dir / LOG_START_OFFSET_CHECKPOINT)
        for child in sorted(log_dir.iterdir()):
            if not child.is_dir():
                continue
            if child.name.endswith(DELETE_DIR_SUFFIX):
                # A deletion interrupted by a crash: finish it.
                shutil.rmtree(child, ignore_errors=True)
                continue
            key = parse_topic_partition(child.name)
            if key is None:
                continue
            if key in self._logs:
                raise RuntimeError(f"{key[0]}-{key[1]} is in two log dirs: {self._logs[key].dir} and {child}")
            self._logs[key] = Log.open(
                child,
                self.default_config,
                recovery_point=recovery_points.get(key, 0),
                log_start_offset=start_offsets.get(key, 0),
                had_clean_shutdown=clean,
            )
        logger.info("loaded %s (%s shutdown)", log_dir, "clean" if clean else "unclean")
        marker.unlink(missing_ok=True)

    # Logs --------------------------------------------------------------------------------

    def get_log(self, topic: str, partition: int) -> Log | None:
        return self._logs.get((topic, partition))

    def get_or_create_log(self, topic: str, partition: int, config: LogConfig | None = None) -> Log:
        """The partition's log, created in the log dir with the fewest partitions if new.
        A given `config` replaces the config of an existing log (it was loaded with the
        defaults at start-up)."""
        with self._lock:
            log = self._logs.get((topic, partition))
            if log is not None:
                if config is not None:
                    log.update_config(config)
                return log
            validate_topic_name(topic)
            if partition < 0:
                raise ValueError(f"partition {partition} is negative")
            counts = {d: 0 for d in self.log_dirs}
            for existing in self._logs.values():
                counts[existing.dir.parent] = counts.get(existing.dir.parent, 0) + 1
            log_dir = min(self.log_dirs, key=lambda d: counts[d])
            log = Log.open(log_dir / f"{topic}-{partition}", config or self.default_config)
            self._logs[(topic, partition)] = log
            return log

    def delete_log(self, topic: str, partition: int) -> bool:
        """Rename the partition dir to `<dir>.<uuid>-delete` (so a crash midway cannot
        resurrect it), then remove it. Returns False if there was no such log."""
        with self._lock:
            log = self._logs.pop((topic, partition), None)
        if log is None:
            return False
        log.rename_dir(log.dir.with_name(f"{log.dir.name}.{uuid.uuid4().hex}{DELETE_DIR_SUFFIX}"))
        log.delete()
        self.checkpoint_recovery_points()
        self.checkpoint_log_start_offsets()
        return True

    def all_logs(self) -> list[Log]:
        return list(self._logs.values())

    # Durability --------------------------------------------------------------------------

    def checkpoint_recovery_points(self) -> None:
        self._checkpoint(RECOVERY_POINT_CHECKPOINT, lambda log: log.recovery_point)

    def checkpoint_log_start_offsets(self) -> None:
        self._checkpoint(LOG_START_OFFSET_CHECKPOINT, lambda log: log.log_start_offset)

    def _checkpoint(self, name: str, value: Callable[[Log], int]) -> None:
        by_dir: dict[Path, dict[TopicPartition, int]] = {d: {} for d in self.log_dirs}
        for key, log in list(self._logs.items()):
            by_dir.setdefault(log.dir.parent, {})[key] = value(log)
        with self._checkpoint_lock:
            for log_dir, offsets in by_dir.items():
                OffsetCheckpointFile(log_dir / name).write(offsets)

    def flush_dirty(self, now: int | None = None) -> None:
        """Flush every log whose last flush is at least its flush.ms ago."""
        now = now_ms() if now is None else now
        for log in self.all_logs():
            if now - log.last_flush_ms >= log.config.flush_ms:
                log.flush()

    def shutdown(self) -> None:
        """Flush and close every log, write the checkpoints, then the clean-shutdown marker."""
        logs = self.all_logs()
        for log in logs:
            log.flush()
            log.close()
        self.checkpoint_recovery_points()
        self.checkpoint_log_start_offsets()
        for log_dir in self.log_dirs:
            atomic_write_text(log_dir / CLEAN_SHUTDOWN_FILE, "")


def _read_checkpoint(path: Path) -> dict[TopicPartition, int]:
    """A checkpoint's offsets; a damaged file counts as empty, which is safe: every log
    is then recovered from its start and keeps the start its segments give it."""
    try:
        return OffsetCheckpointFile(path).read()
    except CheckpointFileError as exc:
        logger.warning("ignoring %s", exc)
        return {}
