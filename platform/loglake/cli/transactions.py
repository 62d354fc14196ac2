"""`loglake transactions`: list, describe, describe producers, find hanging, abort (as kafka-transactions.sh)."""

from __future__ import annotations

import argparse
import time
from typing import Any

import httpx

from loglake.cli.common import CliError, broker_urls, cell, check, client, command_group, http_command, print_table

# kafka-transactions.sh's default for find-hanging: Kafka's transaction.max.timeout.ms.
DEFAULT_MAX_TRANSACTION_TIMEOUT_MINUTES = 15


def _leader_url(c: httpx.Client, topic: str, partition: int) -> str:
    status = check(c.get("/cluster"))
    urls = {b["broker_id"]: b["http"] for b in status["brokers"]}
    for p in status["partitions"]:
        if p["topic"] == topic and p["partition"] == partition:
            if p["leader"] not in urls:
                raise CliError(f"{topic}-{partition} has no live leader")
            return urls[p["leader"]]
    raise CliError(f"no partition {topic}-{partition}")


def _all_transactions(c: httpx.Client) -> list[dict[str, Any]]:
    """Every broker's coordinated transactions, each with its coordinator."""
    out: list[dict[str, Any]] = []
    for broker_id, url in sorted(broker_urls(c).items()):
        answer = check(c.get(f"{url}/transactions"))
        out.extend({**t, "coordinator": broker_id} for t in answer["transactions"])
    return out


def cmd_transactions_list(args: argparse.Namespace) -> int:
    with client(args) as c:
        rows = [["TransactionalId", "Coordinator", "ProducerId", "TransactionState"]]
        for t in _all_transactions(c):
            rows.append([t["transactional_id"], str(t["coordinator"]), str(t["producer_id"]), t["state"]])
    print_table(rows)
    return 0


def cmd_transactions_describe(args: argparse.Namespace) -> int:
    with client(args) as c:
        for url in broker_urls(c).values():
            resp = c.get(f"{url}/transactions/{args.transactional_id}")
            if resp.status_code == 503:
                continue  # not its coordinator
            d = check(resp)
            break
        else:
            raise CliError(f"no broker coordinates the transactional id {args.transactional_id!r}")
    start = d["transaction_start_time_ms"]
    duration = int(time.time() * 1000) - start if start >= 0 else None
    partitions = ",".join(f"{p['topic']}-{p['partition']}" for p in d["partitions"])
    print_table(
        [
            [
                "CoordinatorId",
                "TransactionalId",
                "ProducerId",
                "ProducerEpoch",
                "TransactionState",
                "TransactionTimeoutMs",
                "CurrentTransactionStartTimeMs",
                "TransactionDurationMs",
                "TopicPartitions",
            ],
            [
                str(d["coordinator"]),
                d["transactional_id"],
                str(d["producer_id"]),
                str(d["producer_epoch"]),
                d["state"],
                str(d["transaction_timeout_ms"]),
                cell(start if start >= 0 else None),
                cell(duration),
                partitions or "-",
            ],
        ]
    )
    return 0


def _producer_rows(producers: list[dict[str, Any]]) -> list[list[str]]:
    return [
        [
            str(p["producer_id"]),
            str(p["producer_epoch"]),
            str(p["last_sequence"]),
            str(p["last_timestamp"]),
            cell(p["current_txn_start_offset"] if p["current_txn_start_offset"] >= 0 else None),
        ]
        for p in producers
    ]


_PRODUCER_HEADER = ["ProducerId", "ProducerEpoch", "LastSequence", "LastTimestamp", "CurrentTransactionStartOffset"]


def cmd_transactions_describe_producers(args: argparse.Namespace) -> int:
    with client(args) as c:
        url = _leader_url(c, args.topic, args.partition)
        answer = check(c.get(f"{url}/topics/{args.topic}/partitions/{args.partition}/producers"))
    print_table([_PRODUCER_HEADER, *_producer_rows(answer["producers"])])
    return 0


def cmd_transactions_find_hanging(args: argparse.Namespace) -> int:
    """Open transactions on the partitions broker N leads that their coordinator does not
    know as ongoing (with this producer id), or that are older than the max timeout."""
    max_age_ms = args.max_transaction_timeout * 60_000
    now = int(time.time() * 1000)
    with client(args) as c:
        status = check(c.get("/cluster"))
        urls = {b["broker_id"]: b["http"] for b in status["brokers"]}
        if args.broker_id not in urls:
            raise CliError(f"broker {args.broker_id} is not alive")
        ongoing = {t["producer_id"] for t in _all_transactions(c) if t["state"] == "Ongoing"}
        rows = [["Topic", "Partition", "ProducerId", "ProducerEpoch", "StartOffset", "LastTimestamp", "Duration(min)"]]
        for p in status["partitions"]:
            if p["leader"] != args.broker_id:
                continue
            url = f"{urls[args.broker_id]}/topics/{p['topic']}/partitions/{p['partition']}/producers"
            for producer in check(c.get(url))["producers"]:
                start = producer["current_txn_start_offset"]
                age = now - producer["last_timestamp"]
                if start >= 0 and (producer["producer_id"] not in ongoing or age > max_age_ms):
                    rows.append(
                        [
                            p["topic"],
                            str(p["partition"]),
                            str(producer["producer_id"]),
                            str(producer["producer_epoch"]),
                            str(start),
                            str(producer["last_timestamp"]),
                            str(age // 60_000),
                        ]
                    )
    print_table(rows)
    return 0


def cmd_transactions_abort(args: argparse.Namespace) -> int:
    with client(args) as c:
        url = _leader_url(c, args.topic, args.partition)
        answer = check(
            c.post(
                f"{url}/topics/{args.topic}/partitions/{args.partition}/abort-transaction",
                json={"start_offset": args.start_offset},
            )
        )
    print(
        f"Aborted the transaction of producer {answer['producer_id']} (epoch {answer['producer_epoch']}) "
        f"starting at offset {args.start_offset} of {args.topic}-{args.partition}"
    )
    return 0


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    txns = command_group(
        subparsers, "transactions", "list, describe, find hanging and abort transactions (as kafka-transactions.sh)"
    )
    http_command(txns, "list", "every transactional id, its coordinator, producer id and state", cmd_transactions_list)
    p = http_command(txns, "describe", "one transactional id at its coordinator", cmd_transactions_describe)
    p.add_argument("--transactional-id", required=True)
    p = http_command(
        txns,
        "describe-producers",
        "the producers of a partition and their open transactions",
        cmd_transactions_describe_producers,
    )
    p.add_argument("--topic", required=True)
    p.add_argument("--partition", type=int, required=True)
    p = http_command(
        txns,
        "find-hanging",
        "open transactions on a broker's partitions that nothing will end",
        cmd_transactions_find_hanging,
    )
    p.add_argument("--broker-id", type=int, required=True)
    p.add_argument(
        "--max-transaction-timeout",
        type=int,
        default=DEFAULT_MAX_TRANSACTION_TIMEOUT_MINUTES,
        help=f"minutes after which an open transaction hangs (default {DEFAULT_MAX_TRANSACTION_TIMEOUT_MINUTES})",
    )
    p = http_command(txns, "abort", "write the ABORT marker of a hanging transaction", cmd_transactions_abort)
    p.add_argument("--topic", required=True)
    p.add_argument("--partition", type=int, required=True)
    p.add_argument("--start-offset", type=int, required=True)
