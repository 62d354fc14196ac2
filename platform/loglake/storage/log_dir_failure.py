"""The one place an I/O error in a log directory is reported (Kafka's
LogDirFailureChannel, KIP-112).

Code that hits an OSError while working in a log dir reports it here and answers its
own caller with KAFKA_STORAGE_ERROR. The first report of a dir marks it offline, logs
the cause once at ERROR and tells the listeners (the `LogManager`, which hands the rest
to its scheduler thread: a listener runs on the failing call's thread, possibly under a
log's lock, so it must be quick). Later reports of the same dir are only counted: the
dir stays offline until the broker restarts, when start-up tries it again.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path

from loglake.errors import ErrorCode, KafkaError

logger = logging.getLogger(__name__)


class LogDirFailureChannel:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        # Offline dir -> what failed there first ("append to t-0 failed: [Errno 28] ...").
        self._offline: dict[Path, str] = {}
        # Told each dir that went offline, once, on the reporting thread.
        self.listeners: list[Callable[[Path], None]] = []
        # Reports of dirs already offline (the broker's metrics may show them).
        self.repeated_reports = 0

    def report(self, log_dir: Path, message: str, cause: BaseException) -> KafkaError:
        """Take `log_dir` offline (if it is not yet) because `message` failed with `cause`;
        returns the KAFKA_STORAGE_ERROR to answer the failed operation's caller with."""
        error = f"{message}: {cause}"
        with self._lock:
            first = log_dir not in self._offline
            if first:
                self._offline[log_dir] = error
            else:
                self.repeated_reports += 1
        if first:
            logger.error("log dir %s is offline: %s", log_dir, error, exc_info=cause)
            for listener in list(self.listeners):
                listener(log_dir)
        return KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, f"log dir {log_dir} is offline ({error})")

    def is_offline(self, log_dir: Path) -> bool:
        # The common case (every dir online) is one truth test of an empty dict.
        return bool(self._offline) and log_dir in self._offline

    def offline_dirs(self) -> dict[Path, str]:
        """Every offline dir with the failure that took it offline."""
        with self._lock:
            return dict(self._offline)

    def check_online(self, log_dir: Path) -> None:
        """KAFKA_STORAGE_ERROR if `log_dir` is offline: nothing more is tried on its disk."""
        if self.is_offline(log_dir):
            raise KafkaError(
                ErrorCode.KAFKA_STORAGE_ERROR, f"log dir {log_dir} is offline ({self._offline.get(log_dir)})"
            )
