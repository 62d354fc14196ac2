"""`python -m ingest_gateway --config conf/server.properties [--override k=v ...]`"""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import os
import signal
import sys
from pathlib import Path

import uvloop
from loglake.broker_configs import BROKER_CONFIG_KEYS
from loglake.config import LOG_LEVELS, BrokerConfig, parse_overrides
from loglake.storage.meta_properties import InconsistentMetaPropertiesError

from ingest_gateway.observability.broker_logging import configure_logging
from ingest_gateway.observability.metrics import MetricsConfig
from ingest_gateway.server.broker import Broker


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="ingest_gateway", description="Run a loglake broker in the foreground.")
    parser.add_argument("--config", help="server.properties file")
    parser.add_argument("--override", action="append", default=[], metavar="KEY=VALUE", help="override a property")
    parser.add_argument("--log-level", default="INFO", type=str.upper, choices=LOG_LEVELS, help="default INFO")
    return parser.parse_args(argv)


async def run(config: BrokerConfig) -> None:
    # Connecting to ZooKeeper and reading the cluster id block: not on the event loop.
    broker = await asyncio.to_thread(Broker, config)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, broker.stop_requested.set)
    await broker.start()
    # What start-up made (modules, configuration, the logs' segments and indexes) lives as
    # long as the process. Frozen, a full collection does not walk it: one took 55-145 ms
    # (measured in brokers under the latency benchmark), a stall of every request in flight.
    gc.freeze()
    logging.getLogger("loglake.broker").info(
        "start-up objects moved out of the cyclic GC's reach: %d", gc.get_freeze_count()
    )
    print(f"loglake broker {config.broker_id} started", flush=True)
    await broker.stop_requested.wait()
    await broker.stop()
    if broker.fatal_error is not None:
        print(f"loglake broker {config.broker_id} stopped: {broker.fatal_error}", flush=True)
        raise SystemExit(1)
    print(f"loglake broker {config.broker_id} stopped cleanly", flush=True)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        config = BrokerConfig.load(args.config, parse_overrides(args.override))
        MetricsConfig.from_properties(config.raw)  # refused here rather than half-way through start-up
        log_format = config.raw.get("log.format", "text")
        BROKER_CONFIG_KEYS["log.format"].parse(log_format)
    except (OSError, ValueError) as exc:
        print(f"loglake: bad configuration: {exc}", file=sys.stderr)
        return 2
    configure_logging(args.log_level, log_format, config.broker_id)
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
