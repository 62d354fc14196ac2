"""Real, unmodified Kafka clients (kcat, confluent-kafka, kafka-python) against a broker process.

Each test module gets one broker subprocess on loopback ports of its own (module scope keeps
the directory fast); tests that restart the broker start one of their own. Topic names are
unique per test, so tests in a module do not see each other's records.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from client_helpers import make_broker, serve, unique_name
from harness.process import BrokerProcess


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    yield from serve(make_broker(tmp_path_factory.mktemp("broker") / "logs"))


@pytest.fixture
def topic(request: pytest.FixtureRequest) -> str:
    """A fresh topic name for this test (not created)."""
    return unique_name(request.node.name)
