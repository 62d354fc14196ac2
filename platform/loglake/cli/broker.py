"""`loglake broker start`: a broker in the foreground (the ingest_gateway process)."""

from __future__ import annotations

import argparse
import os
import sys

from loglake.cli.common import command_group
from loglake.config import LOG_LEVELS


def cmd_broker_start(args: argparse.Namespace) -> int:
    argv = [sys.executable, "-m", "ingest_gateway"]
    if args.config:
        argv += ["--config", args.config]
    for item in args.override:
        argv += ["--override", item]
    argv += ["--log-level", args.log_level]
    os.execv(sys.executable, argv)
    return 0  # not reached


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    broker = command_group(subparsers, "broker", "run a broker")
    start = broker.add_parser("start", help="run a broker in the foreground")
    start.add_argument("--config", help="server.properties")
    start.add_argument("--override", action="append", default=[], metavar="KEY=VALUE")
    start.add_argument(
        "--log-level",
        default="INFO",
        type=str.upper,
        choices=LOG_LEVELS,
        help="the broker's log level (default INFO)",
    )
    start.set_defaults(func=cmd_broker_start)
