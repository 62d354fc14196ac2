"""`loglake acls`: list, add, remove ACLs (as kafka-acls.sh)."""

from __future__ import annotations

import argparse

from loglake.cli.common import check, client, command_group, http_command, print_table

_ACL_FIELDS = ("resource_type", "resource_name", "pattern_type", "principal", "host", "operation", "permission")


def _acl_args(args: argparse.Namespace) -> dict[str, str]:
    return {f: getattr(args, f) for f in _ACL_FIELDS if getattr(args, f, None) is not None}


def cmd_acls_list(args: argparse.Namespace) -> int:
    with client(args) as c:
        acls = check(c.get("/acls", params=_acl_args(args)))
    rows = [["RESOURCE", "PATTERN", "PRINCIPAL", "HOST", "OPERATION", "PERMISSION"]]
    for a in acls:
        rows.append(
            [
                f"{a['resource_type']}:{a['resource_name']}",
                a["pattern_type"],
                a["principal"],
                a["host"],
                a["operation"],
                a["permission"],
            ]
        )
    print_table(rows)
    return 0


def cmd_acls_add(args: argparse.Namespace) -> int:
    with client(args) as c:
        added = check(c.post("/acls", json=_acl_args(args)))
    print(
        f"Added ACL: {added['permission']} {added['principal']} {added['operation']} on {added['resource_type']}:{added['resource_name']} ({added['pattern_type']})"
    )
    return 0


def cmd_acls_remove(args: argparse.Namespace) -> int:
    with client(args) as c:
        check(c.delete("/acls", params=_acl_args(args)))
    print("Removed the matching ACLs.")
    return 0


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    acls = command_group(subparsers, "acls", "list, add, remove ACLs (as kafka-acls.sh)")
    for name, help_text, func in (
        ("list", "the ACLs matching the filter given", cmd_acls_list),
        ("add", "add one ACL", cmd_acls_add),
        ("remove", "remove the ACLs matching the filter given", cmd_acls_remove),
    ):
        p = http_command(acls, name, help_text, func)
        p.add_argument("--resource-type", dest="resource_type", help="Topic, Group, Cluster, TransactionalId")
        p.add_argument("--resource-name", dest="resource_name", help="a name (kafka-cluster for the Cluster), or *")
        p.add_argument("--pattern-type", dest="pattern_type", help="literal (default) or prefixed")
        p.add_argument("--principal", help="User:alice, or User:*")
        p.add_argument("--host", help="* (default) or an address")
        p.add_argument("--operation", help="Read, Write, Create, Delete, Alter, Describe, ClusterAction, ... or All")
        p.add_argument("--permission", help="allow (default) or deny")
