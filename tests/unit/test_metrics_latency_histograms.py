"""The request latency histograms: a request's latencies wait and go in by batches, and a
scrape always sees every request handled before it, in the bucket Prometheus' `le` names."""

from __future__ import annotations

import random
from bisect import bisect_left

from prometheus_client.parser import text_string_to_metric_families

from ingest_gateway.observability.metrics import (
    _FOLD_AT,
    LATENCY_BUCKETS,
    BrokerMetrics,
    MetricsConfig,
    RequestTiming,
)

PRODUCE_V9 = memoryview(bytes([0, 0, 0, 9]))  # a payload starting with Produce's api key


def handled(metrics: BrokerMetrics, total: float) -> None:
    # Local time is handled - started - remote: exactly `total` (no rounding across a bound).
    timing = RequestTiming(received=0.0, started=0.0, handled=total)
    metrics.end_request(PRODUCE_V9, timing, "127.0.0.1:1")


def scraped_buckets(metrics: BrokerMetrics) -> tuple[dict[str, float], float]:
    for family in text_string_to_metric_families(metrics.exposition().decode()):
        if family.name == "kafka_network_request_local_time_seconds":
            buckets = {
                s.labels["le"]: s.value
                for s in family.samples
                if s.name.endswith("_bucket") and s.labels["request"] == "Produce"
            }
            count = next(s.value for s in family.samples if s.name.endswith("_count"))
            return buckets, count
    raise AssertionError("no local time histogram")


def test_every_request_is_in_the_scrape_and_in_its_bucket() -> None:
    metrics = BrokerMetrics(MetricsConfig())
    rng = random.Random(7)
    # Values on the bounds themselves (le is inclusive), between them and past the last.
    values = [rng.choice(LATENCY_BUCKETS) for _ in range(500)] + [rng.uniform(0, 40) for _ in range(2 * _FOLD_AT)]
    expected = [0] * (len(LATENCY_BUCKETS) + 1)
    for v in values:
        handled(metrics, v)
        expected[bisect_left(LATENCY_BUCKETS, v)] += 1
    buckets, count = scraped_buckets(metrics)
    assert count == len(values)  # some still pending when scraped: the scrape folds them in
    cumulative = 0
    for bound, n in zip((*LATENCY_BUCKETS, float("inf")), expected):
        cumulative += n
        key = "+Inf" if bound == float("inf") else repr(bound)
        assert buckets[key] == cumulative, key
