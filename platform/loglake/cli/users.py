"""`loglake users`: SASL/SCRAM credentials (as kafka-configs.sh --entity-type users)."""

from __future__ import annotations

import argparse
import base64
import os
import sys

from loglake.cli.common import CliError, check, client, command_group, http_command
from loglake.security import scram


def cmd_users_add(args: argparse.Namespace) -> int:
    """A SCRAM credential for a user (as kafka-configs.sh --add-config 'SCRAM-SHA-512=[...]'):
    salted here, so the password never leaves this process."""
    password = sys.stdin.readline().rstrip("\n") if args.password == "-" else args.password
    if not password:
        raise CliError("the password is empty")
    if args.zookeeper_connect:
        return _add_user_in_zookeeper(args, password)
    salt = os.urandom(32)
    try:
        salted = scram.salted_password(args.mechanism, password, salt, args.iterations)
    except KeyError:
        raise CliError(f"unknown mechanism {args.mechanism}: {', '.join(scram.MECHANISMS)}") from None
    body = {
        "mechanism": args.mechanism,
        "iterations": args.iterations,
        "salt": base64.b64encode(salt).decode(),
        "salted_password": base64.b64encode(salted).decode(),
    }
    with client(args) as c:
        check(c.put(f"/users/{args.user}", json=body))
    print(f"Completed updating config for user {args.user}.")
    return 0


def _add_user_in_zookeeper(args: argparse.Namespace, password: str) -> int:
    """Before the brokers run (the inter-broker user, the first admin): write the
    credential to ZooKeeper directly, as `kafka-configs.sh --zookeeper` does."""
    from loglake.coordination.zookeeper import ZooKeeperMetadataStore

    try:
        credential = scram.new_credential(args.mechanism, password, args.iterations)
    except ValueError as exc:
        raise CliError(str(exc)) from None
    store = ZooKeeperMetadataStore(args.zookeeper_connect)
    try:
        store.update_user_credentials(args.user, lambda current: current | {args.mechanism: credential.to_config()})
    finally:
        store.close()
    print(f"Completed updating config for user {args.user}.")
    return 0


def cmd_users_list(args: argparse.Namespace) -> int:
    with client(args) as c:
        users = check(c.get("/users"))
    for u in users:
        described = ", ".join(f"{x['mechanism']}=iterations={x['iterations']}" for x in u["credentials"])
        print(f"SCRAM credential configs for user-principal '{u['user']}' are {described}")
    return 0


def cmd_users_delete(args: argparse.Namespace) -> int:
    with client(args) as c:
        check(c.delete(f"/users/{args.user}", params={"mechanism": args.mechanism} if args.mechanism else None))
    print(f"Completed updating config for user {args.user}.")
    return 0


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    users = command_group(subparsers, "users", "SASL/SCRAM users (as kafka-configs.sh --entity-type users)")
    p = http_command(users, "add", "add or replace a user's SCRAM credential", cmd_users_add)
    p.add_argument("--user", required=True)
    p.add_argument("--password", required=True, help="the password, or - to read one line from stdin")
    p.add_argument("--mechanism", default="SCRAM-SHA-512", choices=sorted(scram.MECHANISMS))
    p.add_argument("--iterations", type=int, default=scram.DEFAULT_ITERATIONS)
    p.add_argument("--zookeeper-connect", help="write to ZooKeeper directly (before the brokers run)")
    http_command(users, "list", "users and their SCRAM mechanisms", cmd_users_list)
    p = http_command(users, "delete", "remove a user's credential (one mechanism, or all)", cmd_users_delete)
    p.add_argument("--user", required=True)
    p.add_argument("--mechanism", choices=sorted(scram.MECHANISMS))
