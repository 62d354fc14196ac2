"""Spark tests: marked `spark`; their session is tests/conftest.py's (one per test session)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

# Spark's Python workers must run this interpreter (it has pyarrow and loglake).
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/spark/" in str(item.fspath):
            item.add_marker(pytest.mark.spark)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """A broker process per test module (tests/clients/client_helpers)."""
    from clients.client_helpers import make_broker, serve

    yield from serve(make_broker(tmp_path_factory.mktemp("broker") / "logs"))


@pytest.fixture
def topic(request: pytest.FixtureRequest) -> str:
    """A fresh topic name for this test (not created)."""
    from clients.client_helpers import unique_name

    return unique_name(request.node.name)


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The lake root of `tiering_broker`."""
    return tmp_path_factory.mktemp("lake")


@pytest.fixture(scope="module")
def tiering_broker(tmp_path_factory: pytest.TempPathFactory, lake: Path) -> Iterator[object]:
    """A broker process per module whose lake root is `lake` and whose retention runs often."""
    from clients.client_helpers import make_broker, serve
    from clients.tiering_helpers import tiering_overrides

    # Few __transaction_state partitions keep the first FindCoordinator quick.
    overrides = tiering_overrides(lake) | {"transaction.state.log.num.partitions": "2"}
    yield from serve(make_broker(tmp_path_factory.mktemp("tiering") / "logs", **overrides))
