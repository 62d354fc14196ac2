"""`meta.properties`: which broker and cluster a log directory belongs to.

Kafka refuses to start on a directory written by another broker id or cluster, so a
misconfigured `log.dirs` cannot silently mix two brokers' data.
"""

from __future__ import annotations

import base64
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from loglake.config import load_properties
from loglake.storage.fileutil import atomic_write_text

META_PROPERTIES = "meta.properties"


class InconsistentMetaPropertiesError(RuntimeError):
    """A log directory belongs to another broker id or cluster."""


def new_cluster_id() -> str:
    """A random 16-byte id in Kafka's form: URL-safe base64 without padding (22 chars)."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()


@dataclass(frozen=True)
class MetaProperties:
    broker_id: int
    cluster_id: str
    version: int = 0

    @classmethod
    def read(cls, path: Path) -> MetaProperties | None:
        """The properties in `path`, or None when the file does not exist."""
        if not path.exists():
            return None
        try:
            props = load_properties(path)
            return cls(int(props["broker.id"]), props["cluster.id"], int(props.get("version", "0")))
        except KeyError as exc:
            damage = f"{exc} is missing"
        except ValueError as exc:  # a line that is not key=value, a non-number, not text
            damage = str(exc).removeprefix(f"{path}: ")
        raise InconsistentMetaPropertiesError(
            f"{path} is damaged ({damage}). It records which broker and cluster the log dir "
            "belongs to: if the dir is this broker's, delete the file and start again (it is "
            "written anew); otherwise fix log.dirs"
        )

    @classmethod
    def stored_cluster_id(cls, log_dirs: Iterable[str | Path]) -> str | None:
        """The cluster id a broker's log dirs were stamped with, if any (the first found;
        `LogManager` checks that they agree)."""
        for log_dir in log_dirs:
            meta = cls.read(Path(log_dir) / META_PROPERTIES)
            if meta is not None:
                return meta.cluster_id
        return None

    def write(self, path: Path) -> None:
        atomic_write_text(
            path,
            "#\n"
            f"#{time.strftime('%a %b %d %H:%M:%S %Z %Y')}\n"
            f"version={self.version}\n"
            f"broker.id={self.broker_id}\n"
            f"cluster.id={self.cluster_id}\n",
        )
