"""`loglake topics`: create, list, describe, alter, delete (as kafka-topics.sh)."""

from __future__ import annotations

import argparse
from typing import Any

import httpx

from loglake.cli.common import (
    CliError,
    broker_urls,
    check,
    client,
    command_group,
    http_client,
    http_command,
    print_json,
)
from loglake.cli.reassign import current_assignment, make_plan, replication_factor_plan, submit_plan
from loglake.cluster.leader_offsets import leaders_without_offsets, merge_leader_offsets
from loglake.config import parse_overrides


def cmd_topics_create(args: argparse.Namespace) -> int:
    body: dict[str, Any] = {"name": args.topic, "configs": parse_overrides(args.config)}
    if args.partitions is not None:
        body["partitions"] = args.partitions
    if args.replication_factor is not None:
        body["replication_factor"] = args.replication_factor
    with client(args) as c:
        check(c.post("/topics", json=body))
    print(f"Created topic {args.topic}.")
    return 0


def cmd_topics_list(args: argparse.Namespace) -> int:
    with client(args) as c:
        for name in check(c.get("/topics")):
            print(name)
    return 0


def _with_leader_offsets(c: httpx.Client, topic: dict[str, Any]) -> dict[str, Any]:
    """A broker describes the offsets of the partitions it leads; ask the other leaders
    (through their HTTP listeners) for theirs."""
    missing = leaders_without_offsets(topic)
    if not missing:
        return topic
    brokers = broker_urls(c)
    for leader in missing & brokers.keys():
        try:
            with http_client(brokers[leader], 10) as other:
                theirs = check(other.get(f"/topics/{topic['name']}"))
        except (httpx.HTTPError, CliError):
            continue  # that leader is unreachable: its partitions show no offsets
        topic = merge_leader_offsets(topic, leader, theirs)
    return topic


def cmd_topics_describe(args: argparse.Namespace) -> int:
    with client(args) as c:
        names = [args.topic] if args.topic else check(c.get("/topics"))
        for name in names:
            t = _with_leader_offsets(c, check(c.get(f"/topics/{name}")))
            configs = ",".join(f"{k}={v}" for k, v in sorted(t["configs"].items()))
            print(
                f"Topic: {t['name']}\tTopicId: {t['topic_id']}\tPartitionCount: {t['partitions_count']}\t"
                f"ReplicationFactor: {t['replication_factor']}\tConfigs: {configs}"
            )
            for p in t["partitions"]:
                replicas = ",".join(str(r["broker"]) for r in p["replicas"])
                isr = ",".join(str(r) for r in p["isr"])
                offsets = ""
                if "high_watermark" in p:
                    offsets = (
                        f"\tLogStartOffset: {p['log_start_offset']}\tHighWatermark: {p['high_watermark']}"
                        f"\tLogEndOffset: {p['log_end_offset']}\tSize: {p['size']}"
                    )
                compaction = p.get("compaction")
                if compaction is not None:
                    last = compaction["last_cleaning"]
                    offsets += f"\tDirtyRatio: {compaction['dirty_ratio']}\tLastCleaning: " + (
                        "never"
                        if last is None
                        else f"{last['age_ms'] // 1000}s ago by {last['executor']} up to offset {last['end_offset']} "
                        f"({last['bytes_read']} -> {last['bytes_written']} bytes, {last['duration_ms']} ms)"
                    )
                print(
                    f"\tTopic: {t['name']}\tPartition: {p['partition']}\tLeader: {p['leader']}\t"
                    f"Replicas: {replicas}\tIsr: {isr}{_moving(p)}{offsets}"
                )
    return 0


def _moving(p: dict[str, Any]) -> str:
    """kafka-topics.sh's columns of a reassignment in progress."""
    if not (p.get("adding_replicas") or p.get("removing_replicas")):
        return ""
    adding = ",".join(map(str, p["adding_replicas"]))
    removing = ",".join(map(str, p["removing_replicas"]))
    return f"\tAdding Replicas: {adding}\tRemoving Replicas: {removing}"


def cmd_topics_delete(args: argparse.Namespace) -> int:
    with client(args) as c:
        check(c.delete(f"/topics/{args.topic}"))
    print(f"Deleted topic {args.topic}.")
    return 0


def cmd_topics_alter(args: argparse.Namespace) -> int:
    body: dict[str, Any] = {}
    if args.partitions is not None:
        body["partitions"] = args.partitions
    if args.config or args.delete_config:
        body["configs"] = {**parse_overrides(args.config), **{k: "" for k in args.delete_config}}
    if not body and args.replication_factor is None:
        raise CliError("nothing to alter: give --partitions, --replication-factor, --config or --delete-config")
    with client(args) as c:
        if body:
            check(c.patch(f"/topics/{args.topic}", json=body))
            print(f"Altered topic {args.topic}.")
        if args.replication_factor is not None:
            # A reassignment of every partition: `loglake reassign verify` follows it.
            brokers = sorted(b["broker_id"] for b in check(c.get("/cluster"))["brokers"])
            plan = make_plan(
                replication_factor_plan(current_assignment(c), args.topic, args.replication_factor, brokers)
            )
            print(f"Reassigning {args.topic} to replication factor {args.replication_factor}:")
            print_json(plan)
            return submit_plan(c, plan)
    return 0


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    topics = command_group(subparsers, "topics", "create, list, describe, alter, delete topics")
    p = http_command(topics, "create", "create a topic", cmd_topics_create)
    p.add_argument("--topic", required=True)
    p.add_argument("--partitions", type=int)
    p.add_argument("--replication-factor", type=int)
    p.add_argument("--config", action="append", default=[], metavar="KEY=VALUE")
    http_command(topics, "list", "list topics", cmd_topics_list)
    p = http_command(topics, "describe", "describe topics", cmd_topics_describe)
    p.add_argument("--topic")
    p = http_command(topics, "delete", "delete a topic", cmd_topics_delete)
    p.add_argument("--topic", required=True)
    p = http_command(topics, "alter", "add partitions or change configs", cmd_topics_alter)
    p.add_argument("--topic", required=True)
    p.add_argument("--partitions", type=int)
    p.add_argument("--config", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--delete-config", action="append", default=[], metavar="KEY")
    p.add_argument("--replication-factor", type=int, help="reassign every partition to this many replicas")
