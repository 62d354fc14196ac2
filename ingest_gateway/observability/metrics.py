"""The broker's Prometheus metrics (`GET /metrics`), named after Kafka's JMX metrics.

Each broker has a registry of its own (tests run several brokers in one process). Two
kinds of metric:

- Recorded on the hot path, per request or per partition of a request, never per record:
  bytes and messages in and bytes out per topic, request counts, errors and latency
  histograms, log flush times. The cost is prometheus_client's counter and histogram
  updates (its own small locks), with each topic's and request type's children looked
  up once and kept.
- Read at scrape time by `BrokerCollector` (server/broker_collector.py) from the state the broker keeps anyway:
  partition counts and ISR health, controller state, per-partition log offsets and sizes,
  consumer-group lag, cleaner, retention and transaction counters. Nothing of these is
  maintained for the metrics' sake.

`metrics.enabled=false` builds no `BrokerMetrics` at all: every hook is then skipped by
its caller (`None`), and `/metrics` answers 404.

A request's remote time (Kafka's RemoteTimeMs: waiting for acks=all, or for a fetch's
min bytes) is the time the request spends in `ReplicaManager.wait_for_change`; it is
added to the `RequestTiming` the listener put in a context variable for the request.
"""

from __future__ import annotations

import contextvars
import logging
import struct
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from loglake.broker_configs import BROKER_CONFIG_KEYS
from loglake.errors import ErrorCode
from loglake.protocol import ApiKey
from prometheus_client import CollectorRegistry, Histogram, disable_created_metrics, generate_latest
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

request_log = logging.getLogger("kafka.request.logger")

# No `_created` series: a creation time per child would double the exposition for nothing
# Prometheus uses (a process-wide switch of prometheus_client).
disable_created_metrics()

# Seconds: from half a millisecond (a produce to the page cache) to a long poll's 30 s.
LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
_BOUNDS = np.array(LATENCY_BUCKETS)
FLUSH_BUCKETS = (0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)

# Kafka's request names (Produce, Fetch, ListOffsets, ...) by API key.
REQUEST_NAMES: dict[int, str] = {int(k): "".join(w.capitalize() for w in k.name.split("_")) for k in ApiKey}
# A follower's fetch, kept apart from consumers' (whose long polls it would swamp), as
# Kafka's FetchFollower; consumers' keep the API name, Fetch.
FETCH_FOLLOWER = "FetchFollower"
_HEADER = struct.Struct(">hhih")  # api key, version, correlation id, client id length


@dataclass(frozen=True)
class MetricsConfig:
    """`metrics.enabled`, `metrics.per.partition.enabled` and `request.logging.enable`."""

    enabled: bool = True
    per_partition_enabled: bool = True
    request_logging: bool = False

    @classmethod
    def from_properties(cls, raw: Any) -> MetricsConfig:
        def get(name: str) -> bool:
            key = BROKER_CONFIG_KEYS[name]
            return key.parse(raw[name]) if name in raw else key.default

        return cls(get("metrics.enabled"), get("metrics.per.partition.enabled"), get("request.logging.enable"))


@dataclass(slots=True)
class RequestTiming:
    """One request's timestamps (perf_counter seconds) and the remote time inside it."""

    received: float
    started: float
    handled: float = 0.0
    remote: float = 0.0
    name: str | None = None  # set by a handler to relabel the request (FetchFollower)


_current: contextvars.ContextVar[RequestTiming | None] = contextvars.ContextVar("loglake_request", default=None)


def add_remote_time(seconds: float) -> None:
    """Count `seconds` of waiting (acks=all, a fetch's min bytes) as the current request's remote time."""
    timing = _current.get()
    if timing is not None:
        timing.remote += seconds


def label_request(name: str) -> None:
    """Give the current request another request label (a follower's Fetch)."""
    timing = _current.get()
    if timing is not None:
        timing.name = name


class _LoopHistogram:
    """A latency histogram updated on the event loop only, so without a lock
    (prometheus_client's Histogram takes a lock per bucket and per sum, which per request
    is measurable), and in batches (`_RequestSeries.fold`)."""

    __slots__ = ("counts", "sum")

    def __init__(self) -> None:
        self.counts = [0] * (len(LATENCY_BUCKETS) + 1)  # the last one is +Inf
        self.sum = 0.0

    def observe_many(self, seconds: np.ndarray) -> None:
        # side="left" is bisect_left: a value equal to a bound counts in that bound's bucket (le).
        found = np.bincount(np.searchsorted(_BOUNDS, seconds, side="left"), minlength=len(self.counts))
        self.counts = [c + int(n) for c, n in zip(self.counts, found)]
        self.sum += float(seconds.sum())

    def cumulative(self) -> list[tuple[str, float]]:
        out: list[tuple[str, float]] = []
        total = 0
        for bound, count in zip((*LATENCY_BUCKETS, float("inf")), self.counts):
            total += count
            out.append((floatToGoString(bound), total))
        return out


@dataclass
class _RequestSeries:
    """One request label's numbers, kept on the event loop. A request's four latencies wait
    in `pending` and go into the histograms together (four bisects per request were ~1 µs
    of a small request's ~40): at `_FOLD_AT` of them, and before every scrape."""

    requests: int = 0
    total: _LoopHistogram = field(default_factory=_LoopHistogram)
    queue: _LoopHistogram = field(default_factory=_LoopHistogram)
    local: _LoopHistogram = field(default_factory=_LoopHistogram)
    remote: _LoopHistogram = field(default_factory=_LoopHistogram)
    errors: dict[int, int] = field(default_factory=dict)
    # (total, queue, local, remote) seconds of requests not yet in the histograms
    pending: list[tuple[float, float, float, float]] = field(default_factory=list)

    def fold(self) -> None:
        if not self.pending:
            return
        columns = np.array(self.pending, dtype=np.float64)
        self.pending = []
        self.total.observe_many(columns[:, 0])
        self.queue.observe_many(columns[:, 1])
        self.local.observe_many(columns[:, 2])
        self.remote.observe_many(columns[:, 3])


_FOLD_AT = 1024


# name, help and the _RequestSeries field of each request latency histogram.
_LATENCIES = (
    ("kafka_network_request_total_time_seconds", "Request arrival to response sent (TotalTimeMs)", "total"),
    (
        "kafka_network_request_queue_time_seconds",
        "Arrival to handling, behind earlier requests (RequestQueueTimeMs)",
        "queue",
    ),
    ("kafka_network_request_local_time_seconds", "Handling on this broker, waits excluded (LocalTimeMs)", "local"),
    (
        "kafka_network_request_remote_time_seconds",
        "Waiting for acks=all or a fetch's min bytes (RemoteTimeMs)",
        "remote",
    ),
)


class BrokerMetrics:
    """The metrics of one broker: its registry, the hot-path hooks and the scrape-time collector.

    The hooks run on the broker's event loop (the Kafka listener, the HTTP API, the replica
    manager), as does the scrape, so their numbers are plain Python ints and floats that
    the collector reads; only log flushes, timed on the flusher threads, go to a
    prometheus_client Histogram."""

    def __init__(self, config: MetricsConfig, *collectors: Collector) -> None:
        """`collectors`: what else the registry reads at scrape time (the broker's state)."""
        self.config = config
        self.registry = CollectorRegistry(auto_describe=False)
        self._flush = Histogram(
            "kafka_log_flush_time_seconds",
            "fsync of a log (LogFlushRateAndTimeMs)",
            registry=self.registry,
            buckets=FLUSH_BUCKETS,
        )
        # topic -> [bytes in, records in, bytes out]
        self.topics: dict[str, list[int]] = {}
        self.requests: dict[str, _RequestSeries] = {}
        # The series of each api key's requests not relabelled (`timing.name`), found once.
        self._by_api_key: dict[int, _RequestSeries] = {}
        self.registry.register(_TrafficCollector(self))
        for collector in collectors:
            self.registry.register(collector)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)

    # Hot-path hooks (per request, per partition of a request) ----------------------------

    def _topic(self, topic: str) -> list[int]:
        counts = self.topics.get(topic)
        if counts is None:
            counts = self.topics[topic] = [0, 0, 0]
        return counts

    def record_append(self, topic: str, size: int, records: int) -> None:
        counts = self._topic(topic)
        counts[0] += size
        counts[1] += records

    def record_bytes_out(self, topic: str, size: int) -> None:
        self._topic(topic)[2] += size

    def observe_flush(self, seconds: float) -> None:
        self._flush.observe(seconds)

    def begin_request(self, received: float) -> RequestTiming:
        """Called by the listener once a request frame is in: the timing its handler sees."""
        timing = RequestTiming(received, time.perf_counter())
        _current.set(timing)
        return timing

    def end_request(self, payload: memoryview, timing: RequestTiming, peer: str) -> None:
        """Called once the response is sent (or, acks=0, once handled)."""
        done = time.perf_counter()
        name = timing.name
        if name is None:
            # By the payload's api key (its first two bytes; a negative one is "Unknown" either way).
            key = payload[0] << 8 | payload[1]
            series = self._by_api_key.get(key)
            if series is None:
                series = self._by_api_key[key] = self._series(REQUEST_NAMES.get(key, "Unknown"))
        else:
            series = self._series(name)
        total = done - timing.received
        local = timing.handled - timing.started - timing.remote
        series.requests += 1
        pending = series.pending
        pending.append((total, timing.started - timing.received, local, timing.remote))
        if len(pending) >= _FOLD_AT:
            series.fold()
        if self.config.request_logging:
            name = name or REQUEST_NAMES.get(payload[0] << 8 | payload[1], "Unknown")
            _log_request(payload, name, peer, timing, total, local)

    def count_errors(self, api_key: int, response: Mapping[str, Any]) -> None:
        """The non-zero error codes of a response body, each partition's or resource's once."""
        counts: dict[int, int] = {}
        if api_key == ApiKey.PRODUCE:
            _produce_error_codes(response, counts)
        else:
            _error_codes(response, counts)
        if not counts:
            return
        timing = _current.get()
        errors = self._series((timing.name if timing else None) or REQUEST_NAMES.get(api_key, "Unknown")).errors
        for code, n in counts.items():
            errors[code] = errors.get(code, 0) + n

    def _series(self, name: str) -> _RequestSeries:
        series = self.requests.get(name)
        if series is None:
            series = self.requests[name] = _RequestSeries()
        return series


class _TrafficCollector(Collector):
    """The per-topic and per-request numbers the hooks accumulated."""

    def __init__(self, metrics: BrokerMetrics) -> None:
        self._metrics = metrics

    def collect(self) -> Iterator[Metric]:
        m = self._metrics
        topic = ["topic"]
        families = (
            CounterMetricFamily(
                "kafka_server_broker_topic_bytes_in", "Bytes appended by producers (BytesInPerSec)", labels=topic
            ),
            CounterMetricFamily(
                "kafka_server_broker_topic_messages_in",
                "Records appended by producers (MessagesInPerSec)",
                labels=topic,
            ),
            CounterMetricFamily(
                "kafka_server_broker_topic_bytes_out", "Bytes sent to consumers (BytesOutPerSec)", labels=topic
            ),
        )
        for name, counts in list(m.topics.items()):
            for family, value in zip(families, counts):
                family.add_metric([name], value)
        yield from families
        requests = CounterMetricFamily(
            "kafka_network_requests", "Requests handled (RequestsPerSec)", labels=["request"]
        )
        errors = CounterMetricFamily(
            "kafka_network_request_errors",
            "Error codes in responses, one per partition or resource (ErrorsPerSec)",
            labels=["request", "error"],
        )
        latencies = [HistogramMetricFamily(n, doc, labels=["request"]) for n, doc, _ in _LATENCIES]
        for name, series in list(m.requests.items()):
            series.fold()
            requests.add_metric([name], series.requests)
            for code, n in list(series.errors.items()):
                errors.add_metric([name, _error_name(code)], n)
            for latency, (_, _, attr) in zip(latencies, _LATENCIES):
                histogram: _LoopHistogram = getattr(series, attr)
                latency.add_metric([name], histogram.cumulative(), histogram.sum)
        yield requests
        yield errors
        yield from latencies


def _error_name(code: int) -> str:
    return ErrorCode(code).name if code in ErrorCode._value2member_map_ else str(code)


def _error_codes(body: Mapping[str, Any], counts: dict[int, int]) -> None:
    code = body.get("error_code")
    if code:
        counts[code] = counts.get(code, 0) + 1
    for value in body.values():
        if value.__class__ is list:  # the nested structs; records and scalars are skipped
            for item in value:
                if item.__class__ is dict:
                    _error_codes(item, counts)


def _produce_error_codes(body: Mapping[str, Any], counts: dict[int, int]) -> None:
    """`_error_codes` of a ProduceResponse, unrolled (every small produce pays it): only its
    partitions carry an error code."""
    for topic in body["responses"]:
        for partition in topic["partition_responses"]:
            code = partition["error_code"]
            if code:
                counts[code] = counts.get(code, 0) + 1


def _log_request(payload: memoryview, name: str, peer: str, timing: RequestTiming, total: float, local: float) -> None:
    """Kafka's request log line ("Completed request ..."): header fields and the times."""
    _, version, correlation_id, client_id_length = _HEADER.unpack_from(payload)
    client_id = bytes(payload[10 : 10 + client_id_length]).decode(errors="replace") if client_id_length > 0 else ""
    request_log.info(
        "completed request %s v%d from %s (client %r, correlation id %d): total %.3f ms, queue %.3f ms, "
        "local %.3f ms, remote %.3f ms",
        name,
        version,
        peer,
        client_id,
        correlation_id,
        total * 1000,
        (timing.started - timing.received) * 1000,
        local * 1000,
        timing.remote * 1000,
        extra={
            "request": name,
            "api_version": version,
            "peer": peer,
            "client_id": client_id,
            "correlation_id": correlation_id,
            "total_ms": round(total * 1000, 3),
            "queue_ms": round((timing.started - timing.received) * 1000, 3),
            "local_ms": round(local * 1000, 3),
            "remote_ms": round(timing.remote * 1000, 3),
        },
    )
