"""The `loglake` command: broker(s), topics, cluster, reassign, groups, transactions, produce, consume.

Flags follow kafka-topics.sh, kafka-reassign-partitions.sh, kafka-consumer-groups.sh,
kafka-transactions.sh and kafka-console-{producer,consumer}.sh. Everything but
`broker start` talks to a broker's HTTP API (`--bootstrap-http`, default the local one).
One module a command group, each adding its commands to the parser with `register`;
common.py holds what they share (the HTTP client, errors, printing).
"""

from __future__ import annotations

import argparse
import sys

import httpx

from loglake.cli import acls, broker, cluster, groups, quotas, reassign, records, topics, transactions, users
from loglake.cli.common import CliError

__all__ = ["build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="loglake", description="loglake: Kafka semantics, a Spark-native log.")
    sub = parser.add_subparsers(dest="command", required=True)
    # The order of `loglake --help`.
    for group in (broker, topics, cluster, groups, reassign, users, acls, quotas, transactions, records):
        group.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except CliError as exc:
        print(f"loglake: {exc}", file=sys.stderr)
        return 1
    except httpx.TransportError as exc:
        print(f"loglake: cannot reach the broker at {args.bootstrap_http}: {exc}", file=sys.stderr)
        return 1
    except (ValueError, KeyboardInterrupt) as exc:
        print(f"loglake: {exc}", file=sys.stderr)
        return 1
