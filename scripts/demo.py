"""`make demo`: a standalone broker; 100,000 keyed events over HTTP, all read back; then
100,000 more from a Kafka client (confluent-kafka, idempotent, acks=all), read back by kcat;
then the first topic read with Spark (count and offset range per partition) and sunk into a
Delta table by the exactly-once job (`jobs.delta_sink`, available-now)."""

from __future__ import annotations

import asyncio
import base64
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import httpx
import orjson
from confluent_kafka import Producer

ROOT = Path(__file__).resolve().parent.parent
# The launch helpers (harness/) are a package of the checkout, as jobs/ and bench/ are.
sys.path.insert(0, str(ROOT))

from harness.process import BrokerProcess  # noqa: E402

TOPIC = "demo-events"
KAFKA_TOPIC = "demo-kafka-events"
PARTITIONS = 3
EVENTS = 100_000
PER_REQUEST = 1_000
CONCURRENCY = 4
BINARY_V2 = "application/vnd.kafka.binary.v2+json"


def _b64(s: str) -> str:
    return base64.b64encode(s.encode()).decode()


async def produce(url: str) -> Counter:
    per_partition: Counter = Counter()
    queue: asyncio.Queue[int] = asyncio.Queue()
    for start in range(0, EVENTS, PER_REQUEST):
        queue.put_nowait(start)

    async def worker(client: httpx.AsyncClient) -> None:
        while not queue.empty():
            start = queue.get_nowait()
            records = [
                {"key": _b64(f"user-{i % 997}"), "value": _b64(f'{{"event":{i},"kind":"click"}}')}
                for i in range(start, start + PER_REQUEST)
            ]
            resp = await client.post(
                f"/topics/{TOPIC}",
                content=orjson.dumps({"records": records}),
                headers={"content-type": BINARY_V2},
                params={"acks": "all"},
            )
            resp.raise_for_status()
            for o in resp.json()["offsets"]:
                per_partition[o["partition"]] += 1

    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        await asyncio.gather(*(worker(client) for _ in range(CONCURRENCY)))
    return per_partition


def read_back(url: str) -> dict[int, tuple[int, int, int]]:
    """Per partition: (records read, first offset, last offset)."""
    out = {}
    with httpx.Client(base_url=url, timeout=60) as client:
        for p in range(PARTITIONS):
            offset, count, first, last = 0, 0, None, None
            while True:
                resp = client.get(
                    f"/topics/{TOPIC}/partitions/{p}/records",
                    params={"offset": offset, "max_bytes": 4 << 20},
                    headers={"accept": BINARY_V2},
                )
                resp.raise_for_status()
                records = resp.json()
                if not records:
                    break
                first = records[0]["offset"] if first is None else first
                last = records[-1]["offset"]
                count += len(records)
                offset = last + 1
            out[p] = (count, first, last)
    return out


def produce_with_kafka_client(bootstrap: str) -> Counter:
    """confluent-kafka, unmodified: idempotent, acks=all, keyed. With the Java client's
    partitioner (murmur2), the same keys land in the same partitions as over HTTP."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 5,
            "partitioner": "murmur2_random",
        }
    )
    per_partition: Counter = Counter()
    failures: list[str] = []

    def delivered(err, msg) -> None:
        if err is not None:
            failures.append(str(err))
        else:
            per_partition[msg.partition()] += 1

    for i in range(EVENTS):
        while True:
            try:
                producer.produce(
                    KAFKA_TOPIC, f'{{"event":{i}}}'.encode(), key=f"user-{i % 997}".encode(), on_delivery=delivered
                )
                break
            except BufferError:
                producer.poll(0.05)
        if i % 5000 == 0:
            producer.poll(0)
    producer.flush(60)
    if failures:
        raise RuntimeError(f"{len(failures)} deliveries failed, first: {failures[0]}")
    return per_partition


def consume_with_kcat(bootstrap: str) -> Counter:
    """kcat reads the topic from the beginning to the end; one line per record: its partition."""
    out = subprocess.run(
        ["kcat", "-C", "-b", bootstrap, "-t", KAFKA_TOPIC, "-o", "beginning", "-e", "-q", "-f", "%p\n"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    return Counter(int(line) for line in out.split())


def read_with_spark(bootstrap: str) -> dict[int, tuple[int, int, int]]:
    """Per partition: (records, first offset, last offset), as Spark's `loglake` source reads them."""
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    import loglake.spark

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("loglake-demo")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "3")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    try:
        loglake.spark.register(spark)
        rows = (
            spark.read.format("loglake")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", TOPIC)
            .load()
            .groupBy("partition")
            .agg(F.count("*").alias("n"), F.min("offset").alias("first"), F.max("offset").alias("last"))
            .collect()
        )
    finally:
        spark.stop()
    return {r.partition: (r.n, r.first, r.last) for r in rows}


def sink_to_delta(bootstrap: str, table: Path) -> int:
    """`python -m jobs.delta_sink` (available-now) into `table`; the table's row count."""
    from deltalake import DeltaTable

    subprocess.run(
        [sys.executable, "-m", "jobs.delta_sink", "--bootstrap-servers", bootstrap, "--topics", TOPIC,
         "--table", str(table), "--trigger", "available-now"],
        cwd=ROOT, check=True, capture_output=True, timeout=600,
    )  # fmt: skip
    return DeltaTable(str(table)).to_pyarrow_dataset().count_rows()


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="loglake-demo-") as tmp:
        broker = BrokerProcess(Path(tmp) / "logs", config=ROOT / "conf/server.properties")
        print(f"starting a standalone broker (HTTP {broker.http_url}, data in {tmp}) ...")
        with broker:
            httpx.post(
                f"{broker.http_url}/topics", json={"name": TOPIC, "partitions": PARTITIONS}, timeout=30
            ).raise_for_status()
            print(f"created topic {TOPIC} with {PARTITIONS} partitions")
            t0 = time.perf_counter()
            produced = asyncio.run(produce(broker.http_url))
            t1 = time.perf_counter()
            print(
                f"produced {EVENTS:,} keyed events over HTTP in {t1 - t0:.2f}s ({EVENTS / (t1 - t0):,.0f}/s, acks=all)"
            )
            summary = read_back(broker.http_url)
            t2 = time.perf_counter()
            total = sum(c for c, _, _ in summary.values())
            print(f"read {total:,} events back over HTTP in {t2 - t1:.2f}s")
            print(f"{'partition':>9} {'produced':>9} {'read':>9} {'first':>7} {'last':>7}")
            for p, (count, first, last) in summary.items():
                print(f"{p:>9} {produced[p]:>9} {count:>9} {first!s:>7} {last!s:>7}")

            httpx.post(
                f"{broker.http_url}/topics", json={"name": KAFKA_TOPIC, "partitions": PARTITIONS}, timeout=30
            ).raise_for_status()
            t3 = time.perf_counter()
            kafka_produced = produce_with_kafka_client(broker.bootstrap)
            t4 = time.perf_counter()
            print(
                f"\nproduced {EVENTS:,} keyed events with confluent-kafka over the Kafka protocol ({broker.bootstrap}) "
                f"in {t4 - t3:.2f}s ({EVENTS / (t4 - t3):,.0f}/s, idempotent, acks=all)"
            )
            kcat_read = consume_with_kcat(broker.bootstrap)
            t5 = time.perf_counter()
            print(f"kcat read {sum(kcat_read.values()):,} events back in {t5 - t4:.2f}s")
            print(f"{'partition':>9} {'produced':>9} {'kcat read':>9}")
            for p in range(PARTITIONS):
                print(f"{p:>9} {kafka_produced[p]:>9} {kcat_read[p]:>9}")

            spark_read = read_with_spark(broker.bootstrap)
            t6 = time.perf_counter()
            print(f"\nSpark (spark.read.format('loglake')) read {TOPIC} in {t6 - t5:.2f}s, JVM start included")
            print(f"{'partition':>9} {'records':>9} {'first':>7} {'last':>7}")
            for p, (count, first, last) in sorted(spark_read.items()):
                print(f"{p:>9} {count:>9} {first:>7} {last:>7}")
            table = Path(tmp) / "delta" / TOPIC
            delta_rows = sink_to_delta(broker.bootstrap, table)
            t7 = time.perf_counter()
            print(
                f"python -m jobs.delta_sink (exactly once, available-now) wrote {TOPIC} into {table} in {t7 - t6:.2f}s"
            )
            print(f"the Delta table holds {delta_rows:,} rows")
        print("broker stopped")
        if total != EVENTS or any(produced[p] != summary[p][0] for p in summary):
            print("MISMATCH: not every event produced over HTTP was read back", file=sys.stderr)
            return 1
        if kafka_produced != kcat_read or sum(kcat_read.values()) != EVENTS:
            print("MISMATCH: kcat did not read back every event the Kafka client produced", file=sys.stderr)
            return 1
        if spark_read != summary or delta_rows != EVENTS:
            print("MISMATCH: Spark or the Delta table does not hold every event produced over HTTP", file=sys.stderr)
            return 1
        if kafka_produced != produced:
            print("MISMATCH: the Kafka client and HTTP put the same keys in different partitions", file=sys.stderr)
            return 1
    print("every event read back")
    return 0


if __name__ == "__main__":
    sys.exit(main())
