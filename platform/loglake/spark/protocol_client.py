"""A small synchronous Kafka protocol client: what the Spark source needs, over plain sockets.

Spark calls the source from its driver (planning) and from Python workers (reading), both
synchronous code in short-lived processes, so a blocking socket per broker is all it
takes: one request in flight per connection, answered in order. Bodies are the plain
dicts of `loglake.protocol`; Fetch "records" come back as memoryviews of the response.

Leaders are found with Metadata and followed: a partition answered NOT_LEADER_OR_FOLLOWER
(or a broker that stops answering) makes the caller refresh metadata and ask again.
"""

from __future__ import annotations

import itertools
import socket
import struct
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any, Self

from loglake.errors import ErrorCode
from loglake.protocol import ApiKey, IsolationLevel, decode_response, encode_request, read_frame_size
from loglake.security.client import PLAINTEXT, ClientSecurity, SaslClientExchange
from loglake.security.scram import ScramError

# Versions every Kafka since 2.6 and loglake (Kafka 3.9.0's ranges) serve.
METADATA_VERSION = 9
LIST_OFFSETS_VERSION = 7
FETCH_VERSION = 12
FIND_COORDINATOR_VERSION = 3
OFFSET_FETCH_VERSION = 7
OFFSET_COMMIT_VERSION = 8
PRODUCE_VERSION = 9
INIT_PRODUCER_ID_VERSION = 4
ADD_PARTITIONS_TO_TXN_VERSION = 3  # v4+ is for brokers only
ADD_OFFSETS_TO_TXN_VERSION = 3
END_TXN_VERSION = 3
TXN_OFFSET_COMMIT_VERSION = 3

# ListOffsets' special timestamps.
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2

# Errors after which the partition's leader may have moved: refresh metadata and retry.
RETRIABLE_PARTITION_ERRORS = frozenset(
    {
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.LEADER_NOT_AVAILABLE,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.FENCED_LEADER_EPOCH,
        ErrorCode.UNKNOWN_LEADER_EPOCH,
        ErrorCode.REPLICA_NOT_AVAILABLE,
        ErrorCode.NOT_COORDINATOR,
        ErrorCode.COORDINATOR_NOT_AVAILABLE,
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
        ErrorCode.REQUEST_TIMED_OUT,
    }
)

_FRAME_SIZE = struct.Struct(">i")


class CoordinatorType(IntEnum):
    """FindCoordinator's key types."""

    GROUP = 0
    TRANSACTION = 1


class AuthenticationFailed(Exception):
    """The broker refused this client's SASL credentials (not retriable)."""


class BrokerUnavailable(ConnectionError):
    """No broker of the bootstrap list (or a partition's leader) answered."""


@dataclass(frozen=True, slots=True, order=True)
class TopicPartition:
    topic: str
    partition: int


@dataclass(slots=True)
class ClusterMetadata:
    brokers: dict[int, tuple[str, int]]
    # topic -> partition -> leader id (-1: no leader right now)
    leaders: dict[str, dict[int, int]]
    # topics the cluster answered with an error, and the error
    topic_errors: dict[str, ErrorCode] = field(default_factory=dict)
    internal_topics: set[str] = field(default_factory=set)


@dataclass(slots=True)
class PartitionFetch:
    """One partition of a Fetch answer. `visible_end`: what the isolation level lets a reader
    see up to (the high watermark, or the last stable offset for read_committed);
    `aborted`: (producer id, first offset) of the aborted transactions among the records."""

    error: ErrorCode
    visible_end: int
    log_start_offset: int
    records: memoryview
    aborted: list[tuple[int, int]] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class ProducerIdAndEpoch:
    """A transactional producer's identity: what every transactional request names, and
    what lets any client end the transaction (EndTxn)."""

    transactional_id: str
    producer_id: int
    producer_epoch: int

    def request_fields(self) -> dict[str, Any]:
        """The fields of AddOffsetsToTxn, EndTxn and TxnOffsetCommit that name it."""
        return {
            "transactional_id": self.transactional_id,
            "producer_id": self.producer_id,
            "producer_epoch": self.producer_epoch,
        }


def parse_bootstrap_servers(servers: str) -> list[tuple[str, int]]:
    """ "host:port,host:port" as (host, port) pairs; ValueError names what is malformed."""
    out = []
    for item in servers.split(","):
        item = item.strip()
        if not item:
            continue
        host, sep, port = item.rpartition(":")
        if not sep or not host or not port.isdigit():
            raise ValueError(f"kafka.bootstrap.servers: {item!r} is not host:port")
        out.append((host.strip("[]"), int(port)))
    if not out:
        raise ValueError("kafka.bootstrap.servers is empty")
    return out


def _offset_commit_topics(offsets: Mapping[TopicPartition, int], metadata: Mapping[TopicPartition, str]) -> list[dict]:
    """The `topics` of OffsetCommit and TxnOffsetCommit (same fields for a simple consumer)."""
    by_topic: dict[str, list[dict]] = {}
    for tp, offset in offsets.items():
        by_topic.setdefault(tp.topic, []).append(
            {
                "partition_index": tp.partition,
                "committed_offset": offset,
                "committed_leader_epoch": -1,
                "committed_metadata": metadata.get(tp, ""),
            }
        )
    return [{"name": name, "partitions": parts} for name, parts in by_topic.items()]


class BrokerConnection:
    """One blocking TCP connection (TLS and SASL as `security` says); one request at a time."""

    def __init__(
        self, host: str, port: int, client_id: str, timeout_s: float, security: ClientSecurity = PLAINTEXT
    ) -> None:
        self.host = host
        self.port = port
        self.client_id = client_id
        self._correlation = itertools.count(1)
        try:
            sock = socket.create_connection((host, port), timeout=timeout_s)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._sock = sock if security.tls is None else security.tls.wrap_socket(sock, server_hostname=host)
        except OSError as exc:  # ssl.SSLError too: an untrusted certificate
            raise BrokerUnavailable(f"cannot connect to {host}:{port}: {exc}") from exc
        if security.mechanism is not None:
            self._authenticate(security)

    def _authenticate(self, security: ClientSecurity) -> None:
        """SaslHandshake v1 and SaslAuthenticate; a refusal is an AuthenticationFailed."""
        mechanism = security.mechanism or ""
        answer = self.request(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": mechanism})
        if answer["error_code"]:
            self.close()
            raise AuthenticationFailed(
                f"{self.host}:{self.port} does not offer SASL/{mechanism}: {answer['mechanisms']}"
            )

        exchange = SaslClientExchange(security)
        token: bytes | None = exchange.first()
        try:
            while token is not None:
                reply = self.request(ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": token})
                if reply["error_code"]:
                    raise AuthenticationFailed(f"{self.host}:{self.port}: {reply['error_message']}")
                token = exchange.respond(bytes(reply["auth_bytes"]))
        except AuthenticationFailed:
            self.close()
            raise
        except ScramError as exc:
            self.close()
            raise AuthenticationFailed(f"{self.host}:{self.port}: {exc}") from None

    def request(self, api_key: int, version: int, body: dict[str, Any]) -> dict[str, Any]:
        correlation_id = next(self._correlation) & 0x7FFFFFFF
        try:
            self._sock.sendall(encode_request(api_key, version, correlation_id, self.client_id, body))
            size = read_frame_size(self._recv_exact(4))
            payload = self._recv_exact(size)
        except OSError as exc:
            self.close()
            raise BrokerUnavailable(f"{self.host}:{self.port}: {exc}") from exc
        answered, response = decode_response(api_key, version, payload)
        if answered != correlation_id:
            self.close()
            raise BrokerUnavailable(f"{self.host}:{self.port} answered request {answered}, not {correlation_id}")
        return response

    def _recv_exact(self, n: int) -> bytearray:
        # One preallocated buffer filled in place: fetch answers are megabytes.
        buf = bytearray(n)
        view = memoryview(buf)
        got = 0
        while got < n:
            k = self._sock.recv_into(view[got:], n - got)
            if k == 0:
                raise ConnectionError("connection closed by the broker")
            got += k
        return buf

    def close(self) -> None:
        self._sock.close()


class ProtocolClient:
    """Connections to a cluster: metadata, offsets and fetches, routed to partition leaders."""

    def __init__(
        self,
        bootstrap_servers: str,
        *,
        client_id: str = "loglake-spark",
        request_timeout_ms: int = 30_000,
        isolation_level: IsolationLevel = IsolationLevel.READ_UNCOMMITTED,
        security: ClientSecurity = PLAINTEXT,
    ) -> None:
        self.bootstrap = parse_bootstrap_servers(bootstrap_servers)
        self.security = security
        self.client_id = client_id
        # Of ListOffsets (latest: the LSO for read_committed) and Fetch (up to the LSO, with
        # the aborted transactions).
        self.isolation_level = isolation_level
        self.timeout_s = request_timeout_ms / 1000
        self._connections: dict[tuple[str, int], BrokerConnection] = {}
        self.metadata_cache: ClusterMetadata | None = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for conn in self._connections.values():
            conn.close()
        self._connections.clear()

    def _connection(self, address: tuple[str, int]) -> BrokerConnection:
        conn = self._connections.get(address)
        if conn is None:
            conn = BrokerConnection(address[0], address[1], self.client_id, self.timeout_s, self.security)
            self._connections[address] = conn
        return conn

    def request_to(self, address: tuple[str, int], api_key: int, version: int, body: dict[str, Any]) -> dict:
        try:
            return self._connection(address).request(api_key, version, body)
        except BrokerUnavailable:
            self._connections.pop(address, None)
            raise

    def request_any(self, api_key: int, version: int, body: dict[str, Any]) -> dict:
        """Ask a broker known to be alive, else each bootstrap server in turn."""
        candidates = list(self._connections) + list(self.bootstrap)
        if self.metadata_cache is not None:
            candidates += list(self.metadata_cache.brokers.values())
        failures = []
        for address in dict.fromkeys(candidates):
            try:
                return self.request_to(address, api_key, version, body)
            except BrokerUnavailable as exc:
                failures.append(str(exc))
        raise BrokerUnavailable(f"no broker answered ({'; '.join(failures)})")

    def metadata(self, topics: list[str] | None) -> ClusterMetadata:
        """Brokers and partition leaders of `topics` (None: every topic). Topics are never created."""
        body = {
            "topics": None if topics is None else [{"name": name} for name in topics],
            "allow_auto_topic_creation": False,
            "include_topic_authorized_operations": False,
        }
        response = self.request_any(ApiKey.METADATA, METADATA_VERSION, body)
        brokers = {b["node_id"]: (b["host"], b["port"]) for b in response["brokers"]}
        leaders: dict[str, dict[int, int]] = {}
        errors: dict[str, ErrorCode] = {}
        internal: set[str] = set()
        for topic in response["topics"]:
            name = topic["name"]
            if topic["error_code"] and not topic["partitions"]:
                errors[name] = ErrorCode(topic["error_code"])
                continue
            if topic["is_internal"]:
                internal.add(name)
            leaders[name] = {p["partition_index"]: p["leader_id"] for p in topic["partitions"]}
        metadata = ClusterMetadata(brokers, leaders, errors, internal)
        self.metadata_cache = metadata
        return metadata

    def leader_address(self, tp: TopicPartition) -> tuple[str, int] | None:
        """The cached leader's address, or None when unknown (refresh metadata then)."""
        metadata = self.metadata_cache
        if metadata is None:
            return None
        leader = metadata.leaders.get(tp.topic, {}).get(tp.partition, -1)
        return metadata.brokers.get(leader)

    def list_offsets_from(
        self, address: tuple[str, int], timestamps: dict[TopicPartition, int]
    ) -> dict[TopicPartition, tuple[ErrorCode, int]]:
        """ListOffsets on one broker, at the client's isolation level: (error, offset) per partition."""
        by_topic: dict[str, list[dict]] = {}
        for tp, ts in timestamps.items():
            by_topic.setdefault(tp.topic, []).append(
                {"partition_index": tp.partition, "current_leader_epoch": -1, "timestamp": ts}
            )
        body = {
            "replica_id": -1,
            "isolation_level": self.isolation_level,
            "topics": [{"name": name, "partitions": parts} for name, parts in by_topic.items()],
        }
        response = self.request_to(address, ApiKey.LIST_OFFSETS, LIST_OFFSETS_VERSION, body)
        out = {}
        for topic in response["topics"]:
            for p in topic["partitions"]:
                out[TopicPartition(topic["name"], p["partition_index"])] = (ErrorCode(p["error_code"]), p["offset"])
        return out

    def fetch_from(
        self, address: tuple[str, int], tp: TopicPartition, offset: int, max_bytes: int, max_wait_ms: int = 0
    ) -> PartitionFetch:
        """A sessionless Fetch of one partition at the client's isolation level (never past the
        high watermark; for read_committed, never past the last stable offset)."""
        body = {
            "replica_id": -1,
            "max_wait_ms": max_wait_ms,
            "min_bytes": 1,
            "max_bytes": max_bytes,
            "isolation_level": self.isolation_level,
            "session_id": 0,
            "session_epoch": -1,
            "topics": [
                {
                    "topic": tp.topic,
                    "partitions": [
                        {
                            "partition": tp.partition,
                            "current_leader_epoch": -1,
                            "fetch_offset": offset,
                            "last_fetched_epoch": -1,
                            "log_start_offset": -1,
                            "partition_max_bytes": max_bytes,
                        }
                    ],
                }
            ],
            "forgotten_topics_data": [],
            "rack_id": "",
        }
        response = self.request_to(address, ApiKey.FETCH, FETCH_VERSION, body)
        if response["error_code"]:
            return PartitionFetch(ErrorCode(response["error_code"]), -1, -1, memoryview(b""))
        (topic,) = response["responses"]
        (p,) = topic["partitions"]
        records = p["records"]
        committed = self.isolation_level == IsolationLevel.READ_COMMITTED
        return PartitionFetch(
            ErrorCode(p["error_code"]),
            p["last_stable_offset"] if committed else p["high_watermark"],
            p["log_start_offset"],
            memoryview(b"") if records is None else memoryview(records),
            [(a["producer_id"], a["first_offset"]) for a in p["aborted_transactions"] or ()] if committed else [],
        )

    def find_coordinator(
        self, key: str, key_type: CoordinatorType = CoordinatorType.GROUP
    ) -> tuple[ErrorCode, tuple[str, int] | None]:
        """The address of the coordinator of a group id or a transactional id."""
        body = {"key": key, "key_type": key_type}
        response = self.request_any(ApiKey.FIND_COORDINATOR, FIND_COORDINATOR_VERSION, body)
        error = ErrorCode(response["error_code"])
        if error != ErrorCode.NONE:
            return error, None
        return error, (response["host"], response["port"])

    def offset_fetch_from(
        self, address: tuple[str, int], group_id: str, partitions: list[TopicPartition] | None
    ) -> tuple[ErrorCode, dict[TopicPartition, tuple[ErrorCode, int, str]]]:
        """A group's committed offsets (-1: none) and their metadata strings of `partitions`
        (None: every partition the group has an offset for), and the group-level error."""
        by_topic: dict[str, list[int]] = {}
        for tp in partitions or ():
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        topics = [{"name": name, "partition_indexes": parts} for name, parts in by_topic.items()]
        body = {
            "group_id": group_id,
            "topics": None if partitions is None else topics,
            "require_stable": True,
        }
        response = self.request_to(address, ApiKey.OFFSET_FETCH, OFFSET_FETCH_VERSION, body)
        out = {
            TopicPartition(topic["name"], p["partition_index"]): (
                ErrorCode(p["error_code"]),
                p["committed_offset"],
                p["metadata"] or "",
            )
            for topic in response["topics"]
            for p in topic["partitions"]
        }
        return ErrorCode(response["error_code"]), out

    def offset_commit_to(
        self,
        address: tuple[str, int],
        group_id: str,
        offsets: dict[TopicPartition, int],
        metadata: Mapping[TopicPartition, str] | None = None,
    ) -> dict[TopicPartition, ErrorCode]:
        """Commit as a "simple consumer": generation -1 and no member id, which Kafka accepts
        for a group without active members; `metadata` is each partition's metadata string."""
        body = {
            "group_id": group_id,
            "generation_id_or_member_epoch": -1,
            "member_id": "",
            "group_instance_id": None,
            "topics": _offset_commit_topics(offsets, metadata or {}),
        }
        response = self.request_to(address, ApiKey.OFFSET_COMMIT, OFFSET_COMMIT_VERSION, body)
        return {
            TopicPartition(topic["name"], p["partition_index"]): ErrorCode(p["error_code"])
            for topic in response["topics"]
            for p in topic["partitions"]
        }

    def init_producer_id_from(
        self, address: tuple[str, int], transactional_id: str, transaction_timeout_ms: int
    ) -> tuple[ErrorCode, ProducerIdAndEpoch]:
        """InitProducerId of a transactional id at its coordinator: its producer id with the
        epoch bumped, any open transaction of the previous epoch aborted."""
        body = {
            "transactional_id": transactional_id,
            "transaction_timeout_ms": transaction_timeout_ms,
            "producer_id": -1,
            "producer_epoch": -1,
        }
        response = self.request_to(address, ApiKey.INIT_PRODUCER_ID, INIT_PRODUCER_ID_VERSION, body)
        producer = ProducerIdAndEpoch(transactional_id, response["producer_id"], response["producer_epoch"])
        return ErrorCode(response["error_code"]), producer

    def add_partitions_to_txn_to(
        self, address: tuple[str, int], producer: ProducerIdAndEpoch, partitions: Collection[TopicPartition]
    ) -> set[ErrorCode]:
        """AddPartitionsToTxn at the transaction coordinator; the errors answered."""
        by_topic: dict[str, list[int]] = {}
        for tp in partitions:
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        body = {
            "v3_and_below_transactional_id": producer.transactional_id,
            "v3_and_below_producer_id": producer.producer_id,
            "v3_and_below_producer_epoch": producer.producer_epoch,
            "v3_and_below_topics": [{"name": name, "partitions": parts} for name, parts in by_topic.items()],
        }
        response = self.request_to(address, ApiKey.ADD_PARTITIONS_TO_TXN, ADD_PARTITIONS_TO_TXN_VERSION, body)
        return {
            ErrorCode(p["partition_error_code"])
            for topic in response["results_by_topic_v3_and_below"]
            for p in topic["results_by_partition"]
        }

    def add_offsets_to_txn_to(self, address: tuple[str, int], producer: ProducerIdAndEpoch, group_id: str) -> ErrorCode:
        body = {**producer.request_fields(), "group_id": group_id}
        response = self.request_to(address, ApiKey.ADD_OFFSETS_TO_TXN, ADD_OFFSETS_TO_TXN_VERSION, body)
        return ErrorCode(response["error_code"])

    def end_txn_to(self, address: tuple[str, int], producer: ProducerIdAndEpoch, commit: bool) -> ErrorCode:
        body = {**producer.request_fields(), "committed": commit}
        response = self.request_to(address, ApiKey.END_TXN, END_TXN_VERSION, body)
        return ErrorCode(response["error_code"])

    def txn_offset_commit_to(
        self,
        address: tuple[str, int],
        producer: ProducerIdAndEpoch,
        group_id: str,
        offsets: dict[TopicPartition, int],
        metadata: str,
    ) -> set[ErrorCode]:
        """TxnOffsetCommit at the group coordinator, as a simple consumer (generation -1, no
        member id): the offsets become the group's when the transaction commits."""
        body = {
            **producer.request_fields(),
            "group_id": group_id,
            "generation_id": -1,
            "member_id": "",
            "group_instance_id": None,
            "topics": _offset_commit_topics(offsets, dict.fromkeys(offsets, metadata)),
        }
        response = self.request_to(address, ApiKey.TXN_OFFSET_COMMIT, TXN_OFFSET_COMMIT_VERSION, body)
        return {ErrorCode(p["error_code"]) for topic in response["topics"] for p in topic["partitions"]}

    def produce_to(
        self, address: tuple[str, int], transactional_id: str | None, batches: dict[TopicPartition, bytes]
    ) -> dict[TopicPartition, tuple[ErrorCode, int]]:
        """Produce one record batch per partition to their leader with acks=all: (error, base
        offset) per partition."""
        by_topic: dict[str, list[dict]] = {}
        for tp, records in batches.items():
            by_topic.setdefault(tp.topic, []).append({"index": tp.partition, "records": records})
        body = {
            "transactional_id": transactional_id,
            "acks": -1,
            "timeout_ms": int(self.timeout_s * 1000),
            "topic_data": [{"name": name, "partition_data": parts} for name, parts in by_topic.items()],
        }
        response = self.request_to(address, ApiKey.PRODUCE, PRODUCE_VERSION, body)
        return {
            TopicPartition(topic["name"], p["index"]): (ErrorCode(p["error_code"]), p["base_offset"])
            for topic in response["responses"]
            for p in topic["partition_responses"]
        }
