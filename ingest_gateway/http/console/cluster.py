"""The whole cluster as the console sees it, through the brokers' own HTTP APIs.

What one broker knows locally (the store's cluster status) is read in process; what only a
partition's leader or a group's coordinator knows (offsets, records, group offsets) is
asked of that broker's HTTP API, the same endpoints the `loglake` CLI uses, so the console
and the CLI show the same numbers. This broker's own API is called in process (an ASGI
transport), so the console needs no listener address of its own and works in tests that
run the app without one.
"""

from __future__ import annotations

import asyncio
import base64
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import httpx
from fastapi import FastAPI

from ingest_gateway.http.rest_records import BINARY_V2
from loglake.cluster.leader_offsets import leaders_without_offsets, merge_leader_offsets

if TYPE_CHECKING:
    from loglake.config import BrokerConfig

# Other brokers answer within this or are shown as unreachable.
REMOTE_TIMEOUT_S = 5.0
# Bytes a page of the message browser reads at most (the first batch always).
PAGE_MAX_BYTES = 256 * 1024


class ConsoleError(Exception):
    """Shown as the console's error page with `status`."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True)
class BrokerInfo:
    broker_id: int
    kafka: str | None
    http: str | None
    rack: str | None
    alive: bool


@dataclass(frozen=True)
class Record:
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]


@dataclass(frozen=True)
class PartitionOffsets:
    """A partition's offsets on its leader: readers see `start` to `high_watermark`
    (exclusive); records up to `log_end` are written but not yet on every in-sync replica."""

    start: int
    high_watermark: int
    log_end: int


@dataclass(frozen=True)
class Group:
    group_id: str
    state: str
    protocol_type: str
    coordinator: int


def _unb64(text: str | None) -> bytes | None:
    return None if text is None else base64.b64decode(text)


class Cluster:
    """One console request's view of the cluster: use as `async with Cluster(config, status, app)`."""

    def __init__(
        self, config: BrokerConfig, status: dict[str, Any], app: FastAPI, authorization: str | None = None
    ) -> None:
        """`status`: this broker's cluster status; `authorization`: the console request's
        Authorization header, passed on so that every broker authenticates and authorizes
        the same user."""
        self._config = config
        self.status = status
        self.self_id = config.broker_id
        self._urls = {b["broker_id"]: b["http"] for b in self.status["brokers"]}
        self._headers = {"authorization": authorization} if authorization else {}
        self._local = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://console", headers=self._headers
        )
        self._remote: httpx.AsyncClient | None = None  # made on the first call to another broker

    async def __aenter__(self) -> Cluster:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self._local.aclose()
        if self._remote is not None:
            await self._remote.aclose()

    # Plain HTTP to a broker ----------------------------------------------------------------

    async def call(self, broker_id: int, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """A request to broker `broker_id`'s HTTP API; an error answer raises ConsoleError
        with its status and message."""
        if broker_id == self.self_id:
            response = await self._local.request(method, path, **kwargs)
        else:
            url = self._urls.get(broker_id)
            if url is None:
                raise ConsoleError(503, f"broker {broker_id} is not alive")
            if self._remote is None:
                # https:// brokers present certificates of the CAs in the broker's truststore.
                truststore = self._config.raw.get("ssl.truststore.location")
                self._remote = httpx.AsyncClient(
                    timeout=REMOTE_TIMEOUT_S, headers=self._headers, verify=truststore or True
                )
            try:
                response = await self._remote.request(method, url + path, **kwargs)
            except httpx.HTTPError as exc:
                raise ConsoleError(502, f"broker {broker_id} ({url}) did not answer: {exc!r}") from None
        if response.status_code >= 400:
            try:
                message = response.json().get("message", response.text)
            except ValueError:
                message = response.text
            raise ConsoleError(response.status_code, message)
        return response

    async def get_json(self, broker_id: int, path: str, **params: Any) -> Any:
        return (await self.call(broker_id, "GET", path, params=params)).json()

    # The cluster ---------------------------------------------------------------------------

    def brokers(self) -> list[BrokerInfo]:
        """The registered brokers, and the brokers that hold replicas but are not registered (down)."""
        alive = [BrokerInfo(b["broker_id"], b["kafka"], b["http"], b["rack"], True) for b in self.status["brokers"]]
        known = {b.broker_id for b in alive}
        down = {r for p in self.status["partitions"] for r in p["replicas"]} - known
        return sorted(alive + [BrokerInfo(r, None, None, None, False) for r in down], key=lambda b: b.broker_id)

    def partitions_of(self, topic: str) -> list[dict[str, Any]]:
        return [p for p in self.status["partitions"] if p["topic"] == topic]

    def leader_of(self, topic: str, partition: int) -> int:
        for p in self.partitions_of(topic):
            if p["partition"] == partition:
                if p["offline"]:
                    raise ConsoleError(503, f"{topic}-{partition} has no live leader")
                return p["leader"]
        if not self.partitions_of(topic):
            raise ConsoleError(404, f"topic {topic!r} does not exist")
        raise ConsoleError(404, f"topic {topic!r} has no partition {partition}")

    async def describe_topic(self, name: str) -> dict[str, Any]:
        """GET /topics/{name} with every live leader's offsets (as `loglake topics describe`)."""
        topic = await self.get_json(self.self_id, f"/topics/{name}")
        missing = sorted(leaders_without_offsets(topic) & self._urls.keys())
        answers = await asyncio.gather(
            *(self.get_json(leader, f"/topics/{name}") for leader in missing), return_exceptions=True
        )
        for leader, theirs in zip(missing, answers):
            if not isinstance(theirs, BaseException):  # an unreachable leader's partitions show no offsets
                topic = merge_leader_offsets(topic, leader, theirs)
        return topic

    # Records -------------------------------------------------------------------------------

    async def offsets(self, topic: str, partition: int) -> PartitionOffsets:
        """The partition's log start offset, high watermark and log end, from its leader."""
        doc = await self.get_json(self.leader_of(topic, partition), f"/topics/{topic}/partitions/{partition}/offsets")
        return PartitionOffsets(doc["beginning_offset"], doc["end_offset"], doc["log_end_offset"])

    async def offset_for_time(self, topic: str, partition: int, timestamp_ms: int) -> int | None:
        """The first offset whose timestamp is at or after `timestamp_ms`, if any."""
        doc = await self.get_json(
            self.leader_of(topic, partition),
            f"/topics/{topic}/partitions/{partition}/offsets",
            timestamp=timestamp_ms,
        )
        return doc["offset"]

    async def read_page(self, topic: str, partition: int, offset: int, page_size: int) -> list[Record]:
        """At most `page_size` records from `offset`, read by the leader's records endpoint."""
        response = await self.call(
            self.leader_of(topic, partition),
            "GET",
            f"/topics/{topic}/partitions/{partition}/records",
            params={"offset": offset, "max_records": page_size, "max_bytes": PAGE_MAX_BYTES},
            headers={"accept": BINARY_V2},
        )
        return [
            Record(
                r["offset"],
                r["timestamp"],
                _unb64(r["key"]),
                _unb64(r["value"]),
                [(h["key"], _unb64(h["value"])) for h in r["headers"]],
            )
            for r in response.json()
        ]

    # Groups --------------------------------------------------------------------------------

    async def groups(self) -> list[Group]:
        """Every live broker's groups (each coordinator lists its own)."""
        ids = sorted(self._urls)
        answers = await asyncio.gather(*(self.get_json(b, "/groups") for b in ids), return_exceptions=True)
        found = [
            Group(g["group_id"], g["state"], g["protocol_type"], broker_id)
            for broker_id, answer in zip(ids, answers)
            if not isinstance(answer, BaseException)
            for g in answer
        ]
        return sorted(found, key=lambda g: g.group_id)

    async def describe_group(self, group_id: str) -> tuple[Group, dict[str, Any]]:
        """The group and its coordinator's GET /groups/{id} (what `loglake groups describe` prints)."""
        group = next((g for g in await self.groups() if g.group_id == group_id), None)
        if group is None:
            raise ConsoleError(404, f"group {group_id!r} does not exist")
        return group, await self.get_json(group.coordinator, f"/groups/{quote(group_id, safe='')}")
