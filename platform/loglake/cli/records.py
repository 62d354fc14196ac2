"""`loglake produce` and `loglake consume`: lines from stdin, records to stdout (as
kafka-console-producer.sh and kafka-console-consumer.sh), over the HTTP API's binary format."""

from __future__ import annotations

import argparse
import base64
import sys
from collections.abc import Iterator
from typing import Any

import httpx
import orjson

from loglake.cli.common import CliError, check, client, http_command

BINARY_V2 = "application/vnd.kafka.binary.v2+json"
PRODUCE_CHUNK = 1000


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def cmd_produce(args: argparse.Namespace) -> int:
    path = f"/topics/{args.topic}" + (f"/partitions/{args.partition}" if args.partition is not None else "")
    sep = args.key_separator.encode() if args.parse_key else None
    total = 0
    with client(args) as c:
        batch: list[dict[str, Any]] = []

        def send() -> None:
            nonlocal total
            resp = c.post(
                path,
                params={"acks": args.acks},
                content=orjson.dumps({"records": batch}),
                headers={"content-type": BINARY_V2},
            )
            result = check(resp)
            failed = [o for o in result["offsets"] if o.get("error")]
            if failed:
                raise CliError(f"{len(failed)} records failed: {failed[0]['error']}")
            total += len(batch)
            batch.clear()

        for raw in sys.stdin.buffer:
            line = raw.rstrip(b"\r\n")
            record: dict[str, Any] = {}
            if sep is not None:
                key, found, value = line.partition(sep)
                if not found:
                    raise CliError(f"no key separator {args.key_separator!r} in line {line[:80]!r}")
                record["key"] = _b64(key)
            else:
                value = line
            record["value"] = _b64(value)
            batch.append(record)
            if len(batch) >= PRODUCE_CHUNK:
                send()
        if batch:
            send()
    print(f"Produced {total} records to {args.topic}.", file=sys.stderr)
    return 0


def _consume_partition(
    c: httpx.Client, args: argparse.Namespace, partition: int, start: int
) -> Iterator[dict[str, Any]]:
    offset = start
    while True:
        resp = c.get(
            f"/topics/{args.topic}/partitions/{partition}/records",
            params={"offset": offset, "max_bytes": args.max_bytes, "timeout_ms": 1000 if args.follow else 0},
            headers={"accept": BINARY_V2},
        )
        records = check(resp)
        if not records:
            if args.follow:
                continue
            return
        yield from records
        offset = records[-1]["offset"] + 1


def cmd_consume(args: argparse.Namespace) -> int:
    if args.follow and args.partition is None:
        raise CliError("--follow needs --partition (use a consumer group over the Kafka protocol for all partitions)")
    sep = args.key_separator.encode()
    out = sys.stdout.buffer
    count = 0
    with client(args) as c:
        topic = check(c.get(f"/topics/{args.topic}"))
        partitions = [args.partition] if args.partition is not None else range(topic["partitions_count"])
        for p in partitions:
            offsets = check(c.get(f"/topics/{args.topic}/partitions/{p}/offsets"))
            if args.offset is not None:
                start = args.offset
            elif args.from_beginning:
                start = offsets["beginning_offset"]
            else:
                start = offsets["end_offset"]
            for rec in _consume_partition(c, args, p, start):
                if args.print_key:
                    key = b"null" if rec["key"] is None else base64.b64decode(rec["key"])
                    out.write(key + sep)
                out.write((b"null" if rec["value"] is None else base64.b64decode(rec["value"])) + b"\n")
                count += 1
                if args.max_messages is not None and count >= args.max_messages:
                    out.flush()
                    return 0
            out.flush()
    print(f"Processed a total of {count} messages", file=sys.stderr)
    return 0


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = http_command(subparsers, "produce", "produce lines from stdin", cmd_produce)
    p.add_argument("--topic", required=True)
    p.add_argument("--partition", type=int)
    p.add_argument("--acks", default="1", choices=["0", "1", "all", "-1"])
    p.add_argument("--parse-key", action="store_true", help="split each line into key and value")
    p.add_argument("--key-separator", default="\t")

    p = http_command(subparsers, "consume", "print records to stdout", cmd_consume)
    p.add_argument("--topic", required=True)
    p.add_argument("--partition", type=int)
    start_at = p.add_mutually_exclusive_group()
    start_at.add_argument("--from-beginning", action="store_true")
    start_at.add_argument("--offset", type=int)
    p.add_argument("--follow", action="store_true", help="keep waiting for new records")
    p.add_argument("--max-messages", type=int)
    p.add_argument("--max-bytes", type=int, default=1048576)
    p.add_argument("--print-key", action="store_true")
    p.add_argument("--key-separator", default="\t")
