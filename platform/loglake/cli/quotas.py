"""`loglake quotas`: client quotas of users and client ids (as kafka-configs.sh --entity-type users|clients)."""

from __future__ import annotations

import argparse

from loglake.cli.common import CliError, check, client, command_group, http_command
from loglake.config import parse_overrides


def _quota_entity(args: argparse.Namespace) -> str:
    if args.user and args.client_id:
        return f"users/{args.user}/clients/{args.client_id}"
    if args.user:
        return f"users/{args.user}"
    if args.client_id:
        return f"clients/{args.client_id}"
    raise CliError("give --user and/or --client-id (<default> for the defaults)")


def cmd_quotas_alter(args: argparse.Namespace) -> int:
    """As kafka-configs.sh --alter --entity-type users|clients --add-config producer_byte_rate=..."""
    changes = {**parse_overrides(args.add_config), **{k: "" for k in args.delete_config}}
    if not changes:
        raise CliError("nothing to alter: give --add-config k=v or --delete-config k")
    entity = _quota_entity(args)
    with client(args) as c:
        check(c.patch(f"/quotas/{entity}", json={"configs": changes}))
    print(f"Completed updating config for entity {entity}.")
    return 0


def cmd_quotas_describe(args: argparse.Namespace) -> int:
    with client(args) as c:
        quotas = check(c.get("/quotas"))
    for entity, configs in quotas.items():
        print(f"Quota configs for {entity} are " + ", ".join(f"{k}={v}" for k, v in sorted(configs.items())))
    return 0


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    quotas = command_group(
        subparsers, "quotas", "client quotas: producer_byte_rate, consumer_byte_rate (as kafka-configs.sh)"
    )
    p = http_command(quotas, "alter", "set or remove quotas of a user and/or client id", cmd_quotas_alter)
    p.add_argument("--user", help="a user name, or <default>")
    p.add_argument("--client-id", help="a client id, or <default>")
    p.add_argument("--add-config", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--delete-config", action="append", default=[], metavar="KEY")
    http_command(quotas, "describe", "every quota set", cmd_quotas_describe)
