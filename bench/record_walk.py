"""The record walk in C against the walk in Python, in one process, on the records of
`bench/spark_read.py` (unique ~100-byte JSON event values of varied lengths, 12-byte keys).

Records are encoded into batches of `--batch` records and joined as a fetch answer holds
them; each side is timed in CPU seconds (best of `--rounds`) for:

- the walk alone over every batch's records section (what the decoder runs first),
- the Spark decoder's `decode_fetch` with the Kafka schema's columns and with two columns,
- the broker's produce check of a batch of 1, 2, 4, 8 and 64 records (per call; what sets
  the count below which `holds_records` stays in Python).

The ratio is the Python walk's CPU over the native walk's (how many times faster).

    python -m bench.record_walk [--records 200000] [--batch 4000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from loglake.record import walk
from loglake.record.batch import RecordRow, encode_batch
from loglake.record.header import HEADER_SIZE
from loglake.spark.arrow_decoder import decode_fetch
from loglake.spark.kafka_columns import default_columns

from bench.spark_read import event


@contextmanager
def python_walk() -> Iterator[None]:
    """Records walked in Python for the block, as without the library (what set-up does
    without a compiler)."""
    native = walk._NATIVE
    walk._NATIVE = None
    try:
        yield
    finally:
        walk._NATIVE = native


def best_cpu(fn: Callable[[], object], rounds: int) -> float:
    times = []
    for _ in range(rounds):
        start = time.process_time()
        fn()
        times.append(time.process_time() - start)
    return min(times)


def per_call_us(fn: Callable[[], object], calls: int, rounds: int) -> float:
    def loop() -> None:
        for _ in range(calls):
            fn()

    return best_cpu(loop, rounds) / calls * 1e6


def produce_check_us(native: walk.NativeWalk, data: bytes, count: int, rounds: int) -> tuple[float, float]:
    """µs a call of the produce check of `data`, walked in Python and natively (called
    whatever the count: `holds_records` keeps a single record in Python)."""
    slow = per_call_us(lambda: walk.python_holds_records(data, 0, len(data), count), 20_000, rounds)
    fast = per_call_us(lambda: native.holds_records(data, 0, len(data), count), 20_000, rounds)
    return slow, fast


def fetch_answer(records: int, batch: int) -> tuple[memoryview, list[tuple[bytes, int]]]:
    """A fetch answer's bytes (batches at consecutive offsets), and each batch's records
    section with its record count."""
    rng = random.Random(21)
    batches, sections = [], []
    for base in range(0, records, batch):
        rows: list[RecordRow] = [
            (b"k-%010d" % i, event(i, rng), [], None) for i in range(base, min(records, base + batch))
        ]
        encoded = encode_batch(rows, 1_764_000_000_000, base_offset=base)
        batches.append(encoded)
        sections.append((encoded[HEADER_SIZE:], len(rows)))
    return memoryview(b"".join(batches)), sections


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--batch", type=int, default=4000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    native = walk._NATIVE
    if native is None:
        sys.exit("the native walk is not built (bash scripts/build_native.sh): nothing to compare")
    answer, sections = fetch_answer(args.records, args.batch)
    section_ends, counts, at = [], [], 0
    for section, count in sections:
        at += len(section)
        section_ends.append(at)
        counts.append(count)
    joined = b"".join(section for section, _ in sections) + bytes(16)
    n = args.records
    rows = [
        ("walk", lambda: walk.sections_record_starts(joined, section_ends, counts)),
        ("decode, Kafka schema", lambda: decode_fetch(answer, "t", 0, 0, n, default_columns(False))),
        ("decode, two columns", lambda: decode_fetch(answer, "t", 0, 0, n, ("partition", "value"))),
    ]
    print(f"{n:,} records in batches of {args.batch:,}, best of {args.rounds} rounds (CPU of this process)")
    print("| what | Python walk: µs a record | native walk: µs a record | ratio (Python / native) |")
    print("| --- | --- | --- | --- |")
    for name, fn in rows:
        with python_walk():
            slow = best_cpu(fn, args.rounds) / n * 1e6
        fast = best_cpu(fn, args.rounds) / n * 1e6
        print(f"| {name} | {slow:.3f} | {fast:.3f} | {slow / fast:.1f} |")
    print("| produce check (holds_records), records a batch | Python walk: µs a call | native walk: µs a call | |")
    for size in (1, 2, 4, 8, 64):
        section, _ = sections[0]
        # The first `size` records of a batch: their section ends where record `size` starts.
        starts = walk.record_starts(section, 0, len(section), counts[0])
        assert starts is not None
        data = section[: int(starts[size])] if size < len(starts) else section
        slow, fast = produce_check_us(native, data, size, args.rounds)
        print(f"| {size} | {slow:.2f} | {fast:.2f} | {slow / fast:.1f} |")
    print(f"CPU seconds of this process: {time.process_time():.2f}")


if __name__ == "__main__":
    main()
