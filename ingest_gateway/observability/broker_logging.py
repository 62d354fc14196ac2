"""The broker process's log lines: `log.format=text` (default) or `json`, and the level.

Text lines are `time level logger: message`. JSON lines are one object per line with
`time` (ISO 8601, UTC), `level`, `logger`, `broker_id`, `message`, the `extra` fields a
call site passes (the request log's times, ...) and `exception` when there is one, so a
log shipper can index them without parsing messages.
"""

from __future__ import annotations

import logging
from datetime import datetime, timezone
from typing import Any

import orjson

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
# The attributes every LogRecord has; anything else on a record came from `extra`.
_STANDARD = frozenset(logging.makeLogRecord({}).__dict__) | {"message", "asctime", "taskName"}


class JsonFormatter(logging.Formatter):
    def __init__(self, broker_id: int) -> None:
        super().__init__()
        self._broker_id = broker_id

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, timezone.utc).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "broker_id": self._broker_id,
            "message": record.getMessage(),
        }
        for key, value in record.__dict__.items():
            if key not in _STANDARD and key not in entry:
                entry[key] = value
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return orjson.dumps(entry, default=str).decode()


def configure_logging(level: str, log_format: str, broker_id: int) -> None:
    """Install the root handler (stderr) with the chosen format and level."""
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter(broker_id) if log_format == "json" else logging.Formatter(TEXT_FORMAT))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
