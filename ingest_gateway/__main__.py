"""`python -m ingest_gateway --config conf/server.properties [--override k=v ...]`"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from pathlib import Path

import uvloop

from ingest_gateway.broker import Broker
from loglake.config import BrokerConfig, parse_overrides
from loglake.storage.meta_properties import InconsistentMetaPropertiesError


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="ingest_gateway", description="Run a loglake broker in the foreground.")
    parser.add_argument("--config", help="server.properties file")
    parser.add_argument("--override", action="append", default=[], metavar="KEY=VALUE", help="override a property")
    parser.add_argument("--log-level", default="INFO")
    return parser.parse_args(argv)


async def run(config: BrokerConfig) -> None:
    broker = Broker(config)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await broker.start()
    print(f"loglake broker {config.broker_id} started", flush=True)
    await stop.wait()
    await broker.stop()
    print(f"loglake broker {config.broker_id} stopped cleanly", flush=True)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        config = BrokerConfig.load(args.config, parse_overrides(args.override))
    except (OSError, ValueError) as exc:
        print(f"loglake: bad configuration: {exc}", file=sys.stderr)
        return 2
    profile_path = os.environ.get("LOGLAKE_PROFILE")
    if profile_path:
        # bench/http_produce.py --profile: where the broker spends its time.
        from pyinstrument import Profiler

        with Profiler(async_mode="enabled") as profiler:
            uvloop.run(run(config))
        Path(profile_path).write_text(profiler.output_text(unicode=False, color=False))
    else:
        try:
            uvloop.run(run(config))
        except InconsistentMetaPropertiesError as exc:
            print(f"loglake: refusing to start: {exc}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
