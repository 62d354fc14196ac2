"""The storage engine: Kafka's on-disk log layout, byte for byte.

`<log.dir>/<topic>-<partition>/` holds segments named by their 20-digit base offset
(`.log` of magic-2 record batches, sparse `.index` and `.timeindex`) and the
`leader-epoch-checkpoint`; each log dir holds `meta.properties`, the offset checkpoint
files and, after a clean shutdown, `.kafka_cleanshutdown`.
"""

from loglake.storage.checkpoints import CheckpointFileError, OffsetCheckpointFile
from loglake.storage.file_records import FileRecords, LogSlice
from loglake.storage.index import CorruptIndexError
from loglake.storage.leader_epoch_cache import EpochEntry, LeaderEpochFileCache
from loglake.storage.log import Log, LogAppendInfo, LogOffsetMetadata, parse_topic_partition
from loglake.storage.log_manager import LogManager
from loglake.storage.offset_index import OffsetIndex, OffsetPosition
from loglake.storage.segment import LogSegment
from loglake.storage.time_index import TimeIndex, TimestampOffset

__all__ = [
    "CheckpointFileError",
    "CorruptIndexError",
    "EpochEntry",
    "FileRecords",
    "LeaderEpochFileCache",
    "Log",
    "LogAppendInfo",
    "LogManager",
    "LogOffsetMetadata",
    "LogSegment",
    "LogSlice",
    "OffsetCheckpointFile",
    "OffsetIndex",
    "OffsetPosition",
    "TimeIndex",
    "TimestampOffset",
    "parse_topic_partition",
]
