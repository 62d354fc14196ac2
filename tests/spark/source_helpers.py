"""Helpers of the loglake source tests: producing, deleting records, reading back, running
Spark jobs as child processes and killing them."""

from __future__ import annotations

import contextlib
import json
import os
import random
from collections.abc import Callable, Iterator
from pathlib import Path

from crash_helpers import kill_at_random
from harness.process import BrokerProcess
from loglake.spark.faults import FAULT_ENV

REPO = Path(__file__).resolve().parents[2]


def job_environment(fault: str | None) -> dict[str, str]:
    """This process's environment for a job child, with LOGLAKE_FAULT set to `fault` (or unset)."""
    env = {key: value for key, value in os.environ.items() if key != FAULT_ENV}
    return env | {FAULT_ENV: fault} if fault else env


def kill_job_at_random(
    argv: list[str], rng: random.Random, seconds: tuple[float, float], meanwhile: Callable[[], None] | None = None
) -> None:
    """Start a job and SIGKILL its whole process group (driver and JVM) at a random moment
    within `seconds`, calling `meanwhile` (a burst of records) every half second until then."""
    kill_at_random(argv, rng, seconds, env=job_environment(None), cwd=REPO, meanwhile=meanwhile)


def produce(broker: BrokerProcess, topic: str, records: list[dict], **config: object) -> None:
    """Produce with confluent-kafka (acks=all); each record a dict of produce() arguments."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "linger.ms": 20, **config})
    errors = []
    for record in records:
        p.produce(topic, on_delivery=lambda err, _msg: errors.append(err) if err else None, **record)
    assert p.flush(30) == 0
    assert not errors, errors


def delete_records(broker: BrokerProcess, topic: str, partition: int, before: int) -> None:
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    (future,) = admin.delete_records([TopicPartition(topic, partition, before)]).values()
    assert future.result(timeout=30).low_watermark == before


def add_partitions(broker: BrokerProcess, topic: str, total: int) -> None:
    from clients.client_helpers import wait_for_topic
    from confluent_kafka.admin import AdminClient, NewPartitions

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_partitions([NewPartitions(topic, total)])[topic].result(timeout=30)
    wait_for_topic(broker.bootstrap, topic, total)


def with_options(builder, broker: BrokerProcess, options: dict[str, object]):
    """A DataFrameReader / DataStreamReader of format loglake with these options (JSON for non-strings)."""
    builder = builder.format("loglake").option("kafka.bootstrap.servers", broker.bootstrap)
    for name, value in options.items():
        builder = builder.option(name, value if isinstance(value, str) else json.dumps(value))
    return builder


def offsets_of(df) -> list[tuple[int, int]]:
    return sorted((r.partition, r.offset) for r in df.select("partition", "offset").collect())


def run_available_now(writer):
    """Start a DataStreamWriter with trigger(availableNow=True) and wait for it to finish."""
    query = writer.trigger(availableNow=True).start()
    query.awaitTermination(120)
    assert query.exception() is None, query.exception()
    return query


def to_parquet(stream_df, out, checkpoint):
    """A DataStreamWriter of `stream_df` into Parquet files at `out`."""
    return (
        stream_df.writeStream.format("parquet").option("path", str(out)).option("checkpointLocation", str(checkpoint))
    )


# What brings a DataFrame's rows to the driver.
_TO_DRIVER = ("collect", "toArrow", "toPandas", "toLocalIterator", "tail")


@contextlib.contextmanager
def records_stay_off_the_driver() -> Iterator[None]:
    """Within: an AssertionError if the driver brings rows of records (a frame with a key or
    value column) to itself; small results (add actions, aggregates) may come."""
    from pyspark.sql.classic.dataframe import DataFrame

    originals = {name: getattr(DataFrame, name) for name in _TO_DRIVER}

    def guarded(name: str) -> Callable[..., object]:
        method = originals[name]

        def call(self: DataFrame, *args: object, **kwargs: object) -> object:
            assert not {"key", "value"} & set(self.columns), f"DataFrame.{name} of records on the driver"
            return method(self, *args, **kwargs)

        return call

    try:
        for name in _TO_DRIVER:
            setattr(DataFrame, name, guarded(name))
        yield
    finally:
        for name, method in originals.items():
            setattr(DataFrame, name, method)
