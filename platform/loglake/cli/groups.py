"""`loglake groups`: list, describe, reset offsets of, delete consumer groups (as kafka-consumer-groups.sh)."""

from __future__ import annotations

import argparse
from typing import Any

from loglake.cli.common import cell, check, client, command_group, http_command, print_table


def cmd_groups_list(args: argparse.Namespace) -> int:
    with client(args) as c:
        for g in check(c.get("/groups")):
            print(g["group_id"])
    return 0


def cmd_groups_describe(args: argparse.Namespace) -> int:
    with client(args) as c:
        groups = [args.group] if args.group else [g["group_id"] for g in check(c.get("/groups"))]
        for group_id in groups:
            g = check(c.get(f"/groups/{group_id}"))
            members = {m["member_id"]: m for m in g["members"]}
            if g["group_protocol"] == "consumer":
                _print_consumer_group_members(group_id, g)
            else:
                print(
                    f"\nGroup {group_id} is {g['state']} with {len(members)} member(s) "
                    f"(classic protocol, assignor {g['protocol'] or '-'}).\n"
                )
            rows = [
                [
                    "GROUP",
                    "TOPIC",
                    "PARTITION",
                    "CURRENT-OFFSET",
                    "LOG-END-OFFSET",
                    "LAG",
                    "CONSUMER-ID",
                    "HOST",
                    "CLIENT-ID",
                ]
            ]
            for o in g["offsets"]:
                member = members.get(o["member_id"] or "", {})
                rows.append(
                    [
                        group_id,
                        o["topic"],
                        str(o["partition"]),
                        cell(o["committed_offset"]),
                        cell(o["log_end_offset"]),
                        cell(o["lag"]),
                        cell(o["member_id"]),
                        cell(member.get("client_host")),
                        cell(member.get("client_id")),
                    ]
                )
            print_table(rows)
    return 0


def _print_consumer_group_members(group_id: str, g: dict[str, Any]) -> None:
    """A KIP-848 group: epochs, and each member's protocol (classic members join a consumer
    group while it migrates) and current assignment against its target (they differ while
    the group reconciles), as kafka-consumer-groups.sh --members --verbose."""
    print(
        f"\nGroup {group_id} is {g['state']} with {len(g['members'])} member(s) (consumer protocol, "
        f"assignor {g['protocol'] or '-'}, group epoch {g['group_epoch']}, assignment epoch {g['assignment_epoch']}).\n"
    )
    if not g["members"]:
        return

    def parts(assignment: list[dict[str, Any]]) -> str:
        return ",".join(f"{a['topic']}-{a['partition']}" for a in assignment) or "-"

    rows = [["CONSUMER-ID", "PROTOCOL", "EPOCH", "HOST", "CLIENT-ID", "ASSIGNMENT", "TARGET-ASSIGNMENT"]]
    for m in g["members"]:
        rows.append(
            [
                m["member_id"],
                m["member_type"],
                str(m["member_epoch"]),
                cell(m["client_host"]),
                cell(m["client_id"]),
                parts(m["assignment"]),
                parts(m["target_assignment"]),
            ]
        )
    print_table(rows)
    print()


def cmd_groups_reset_offsets(args: argparse.Namespace) -> int:
    body: dict[str, Any] = {"topic": args.topic}
    if args.to_earliest:
        body["to"] = "earliest"
    elif args.to_latest:
        body["to"] = "latest"
    else:
        body.update(to="offset", offset=args.to_offset)
    if args.partitions:
        body["partitions"] = [int(p) for p in args.partitions.split(",")]
    with client(args) as c:
        result = check(c.post(f"/groups/{args.group}/reset-offsets", json=body))
    rows = [["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"]]
    rows += [[args.group, o["topic"], str(o["partition"]), str(o["offset"])] for o in result["offsets"]]
    print_table(rows)
    return 0


def cmd_groups_delete(args: argparse.Namespace) -> int:
    with client(args) as c:
        check(c.delete(f"/groups/{args.group}"))
    print(f"Deleted group {args.group}.")
    return 0


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    groups = command_group(subparsers, "groups", "list, describe, reset offsets of, delete consumer groups")
    http_command(groups, "list", "list consumer groups", cmd_groups_list)
    p = http_command(groups, "describe", "members, committed offsets, log end offsets and lag", cmd_groups_describe)
    p.add_argument("--group")
    p = http_command(groups, "reset-offsets", "move an inactive group's committed offsets", cmd_groups_reset_offsets)
    p.add_argument("--group", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--partitions", help="comma-separated partitions (default: all)")
    to = p.add_mutually_exclusive_group(required=True)
    to.add_argument("--to-earliest", action="store_true")
    to.add_argument("--to-latest", action="store_true")
    to.add_argument("--to-offset", type=int)
    p = http_command(groups, "delete", "delete an inactive group and its offsets", cmd_groups_delete)
    p.add_argument("--group", required=True)
