"""`loglake cluster status`: brokers, controller, and each partition's leader and ISR."""

from __future__ import annotations

import argparse

from loglake.cli.common import cell, check, client, command_group, http_command, print_table


def cmd_cluster_status(args: argparse.Namespace) -> int:
    with client(args) as c:
        status = check(c.get("/cluster"))
    controller = status["controller"]
    print(f"Controller: broker {cell(controller['broker_id'])} (epoch {controller['epoch']})")
    print(f"Brokers: {len(status['brokers'])}")
    for b in status["brokers"]:
        print(f"\tbroker {b['broker_id']}\tkafka {b['kafka']}\thttp {b['http']}")
    print(
        f"Partitions: {len(status['partitions'])}\tUnderReplicated: {status['under_replicated_partitions']}"
        f"\tOffline: {status['offline_partitions']}"
    )
    rows = [["TOPIC", "PARTITION", "LEADER", "EPOCH", "REPLICAS", "ISR", "STATUS"]]
    for p in status["partitions"]:
        flag = "offline" if p["offline"] else "under-replicated" if p["under_replicated"] else "ok"
        if p.get("adding_replicas") or p.get("removing_replicas"):
            flag += ",reassigning"
        rows.append(
            [
                p["topic"],
                str(p["partition"]),
                str(p["leader"]),
                str(p["leader_epoch"]),
                ",".join(map(str, p["replicas"])),
                ",".join(map(str, p["isr"])),
                flag,
            ]
        )
    if len(rows) > 1:
        print_table(rows)
    return 0


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    cluster = command_group(subparsers, "cluster", "cluster state")
    http_command(
        cluster,
        "status",
        "brokers, controller, leaders, ISR, under-replicated and offline partitions",
        cmd_cluster_status,
    )
