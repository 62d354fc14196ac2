"""A running broker writes its periodic checkpoints (HW, recovery points, log starts) on a
thread: each file takes two fsyncs, which on the event loop stalled every request in flight."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

import ingest_gateway.server.broker as broker_module
from harness.process import free_port
from ingest_gateway.server.broker import Broker
from loglake.config import BrokerConfig
from loglake.storage.checkpoints import OffsetCheckpointFile


def test_periodic_checkpoints_are_written_off_the_event_loop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(broker_module, "HIGH_WATERMARK_CHECKPOINT_INTERVAL_S", 0.05)
    written: list[tuple[str, threading.Thread]] = []
    real_write = OffsetCheckpointFile.write

    def recorded_write(self: OffsetCheckpointFile, offsets: dict) -> None:
        written.append((self.path.name, threading.current_thread()))
        real_write(self, offsets)

    monkeypatch.setattr(OffsetCheckpointFile, "write", recorded_write)
    config = BrokerConfig.from_properties(
        {
            "log.dirs": str(tmp_path / "logs"),
            "listeners": f"PLAINTEXT://127.0.0.1:{free_port()}",
            "http.listeners": f"http://127.0.0.1:{free_port()}",
        }
    )
    broker = Broker(config)
    broker.startup()

    async def main() -> None:
        await broker.start()
        loop_thread = threading.current_thread()
        written.clear()  # start-up's own writes
        names = {"replication-offset-checkpoint", "recovery-point-offset-checkpoint", "log-start-offset-checkpoint"}
        deadline = asyncio.get_running_loop().time() + 30
        while not names <= {name for name, _ in written}:
            assert asyncio.get_running_loop().time() < deadline, written
            await asyncio.sleep(0.01)
        assert all(thread is not loop_thread for _, thread in written), written
        await broker.stop()

    try:
        asyncio.run(main())
    finally:
        broker.shutdown()
