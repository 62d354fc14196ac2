"""The session's Airflow (tests/orchestration/airflow_helpers.py): migrated and imported once."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from airflow_helpers import AIRFLOW_PYTHON, AirflowRunner


@pytest.fixture(scope="session")
def airflow(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AirflowRunner]:
    if not AIRFLOW_PYTHON.exists():
        pytest.fail(f"{AIRFLOW_PYTHON} is missing: run `make setup`")
    runner = AirflowRunner(tmp_path_factory.mktemp("airflow-home"))
    yield runner
    runner.close()
