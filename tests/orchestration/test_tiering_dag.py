"""`dag.test()` of loglake_tiering against a live broker with a lake root: the run's
spark-submit of jobs/tier.py copies the rolled segments of a remote-storage topic into its
Delta table, each offset once, and the broker then deletes them locally."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from deltalake import DeltaTable

from airflow_helpers import AirflowRunner
from clients.client_helpers import create_topic, make_broker, serve, unique_name
from clients.tiering_helpers import TIERED, produce, tiering_overrides, wait_for_local_deletion
from harness.process import BrokerProcess

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("lake")


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory, lake: Path) -> Iterator[BrokerProcess]:
    yield from serve(make_broker(tmp_path_factory.mktemp("broker") / "logs", **tiering_overrides(lake)))


def test_a_run_tiers_rolled_segments_into_delta(airflow: AirflowRunner, broker: BrokerProcess, lake: Path) -> None:
    topic = unique_name("airflow-tier")
    create_topic(broker.bootstrap, topic, partitions=1, config=TIERED)
    produce(broker, topic, 0, 400)

    run = airflow.run_dag(
        "loglake_tiering", {"bootstrap.servers": broker.bootstrap, "tiering.topics": topic, "retries": "0"}
    )
    assert run.state == "success", run.log[-8000:]

    state = wait_for_local_deletion(broker, topic)  # local retention deletes what is tiered
    offsets = sorted(DeltaTable(str(lake / topic)).to_pyarrow_table(columns=["offset"])["offset"].to_pylist())
    assert offsets == list(range(state["tiered_offset"]))  # each tiered offset exactly once
