from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest

from harness.process import BrokerProcess

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def broker_process(tmp_path: Path) -> Iterator[BrokerProcess]:
    broker = BrokerProcess(tmp_path / "logs", config=ROOT / "conf/server.properties")
    yield broker
    if broker.proc is not None:
        broker.kill()
