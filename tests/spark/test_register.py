"""loglake.spark.register: the format, and Spark's Python workers on this interpreter."""

from __future__ import annotations

import sys
from types import SimpleNamespace

import loglake.spark
import pytest


class FakeSession:
    def __init__(self, conf: dict[str, str]) -> None:
        self.registered: list[type] = []
        self.sparkContext = SimpleNamespace(pythonExec="python3", getConf=lambda: conf)
        self.dataSource = SimpleNamespace(register=self.registered.append)


def test_workers_run_this_interpreter_unless_one_was_chosen(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    session = FakeSession({})
    loglake.spark.register(session)  # type: ignore[arg-type]
    assert session.sparkContext.pythonExec == sys.executable
    assert [source.name() for source in session.registered] == ["loglake"]

    chosen = FakeSession({"spark.pyspark.python": "/opt/python"})
    loglake.spark.register(chosen)  # type: ignore[arg-type]
    assert chosen.sparkContext.pythonExec == "python3"


def test_the_format_is_registered_with_a_real_session(loglake_spark) -> None:
    with pytest.raises(Exception, match="kafka.bootstrap.servers must be given"):
        loglake_spark.read.format("loglake").option("subscribe", "t").load().collect()
