"""`loglake cluster status`: brokers, controller, and each partition's leader and ISR."""

from __future__ import annotations

import argparse

import httpx

from loglake.cli.common import cell, check, client, command_group, http_client, http_command, print_table


def cmd_cluster_status(args: argparse.Namespace) -> int:
    with client(args) as c:
        status = check(c.get("/cluster"))
    controller = status["controller"]
    print(f"Controller: broker {cell(controller['broker_id'])} (epoch {controller['epoch']})")
    print(f"Brokers: {len(status['brokers'])}")
    for b in status["brokers"]:
        print(f"\tbroker {b['broker_id']}\tkafka {b['kafka']}\thttp {b['http']}\tlog dirs: {log_dir_health(b['http'])}")
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


def log_dir_health(http_url: str) -> str:
    """What a broker's /healthz says of its log dirs: "ok", or each offline dir and why."""
    try:
        with http_client(http_url, 5) as c:
            health = c.get("/healthz").json()
    except (httpx.HTTPError, ValueError) as exc:
        return f"unknown ({exc})"
    offline = health.get("offline_log_dirs") or {}
    if not offline:
        return "ok"
    return "; ".join(f"OFFLINE {path} ({reason})" for path, reason in sorted(offline.items()))


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    cluster = command_group(subparsers, "cluster", "cluster state")
    http_command(
        cluster,
        "status",
        "brokers, controller, leaders, ISR, under-replicated and offline partitions",
        cmd_cluster_status,
    )
