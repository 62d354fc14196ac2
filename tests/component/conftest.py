from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest
from fastapi.testclient import TestClient

from ingest_gateway.server.broker import Broker
from loglake.config import BrokerConfig


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    config = BrokerConfig.from_properties({"log.dirs": str(tmp_path / "logs"), "num.partitions": "1"})
    b = Broker(config)
    b.startup()
    yield b
    b.shutdown()


@pytest.fixture
def client(broker: Broker) -> Iterator[TestClient]:
    with TestClient(broker.create_http_app()) as c:
        yield c
