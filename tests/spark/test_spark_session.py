"""The test SparkSession runs Python workers with this interpreter (pyarrow importable)."""

from __future__ import annotations


def test_python_workers_have_pyarrow(spark) -> None:
    rows = spark.range(4).rdd.map(lambda _: __import__("pyarrow").__version__).distinct().collect()
    assert len(rows) == 1
