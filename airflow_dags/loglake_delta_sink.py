"""loglake_delta_sink: topics into a Delta table, exactly once, one catch-up per scheduled run."""

from __future__ import annotations

from loglake_maintenance import maintenance_dag

DOC = """
Runs `jobs/delta_sink.py` with `--trigger available-now`: each run copies every record produced
since the previous run into the Delta table (`delta_sink.table`) and stops. The table itself
records where each partition ends (a Delta app transaction per topic partition), so a retried
or killed run, or two runs at once, write nothing twice (docs/spark-delta-sink.md). Settings: `delta_sink.*` in conf/airflow.properties or the Airflow
Variable `loglake`; `delta_sink.args` adds job options such as `--partition-by-date`.
"""

dag = maintenance_dag(
    "delta_sink",
    "delta_sink.py",
    required={
        "--bootstrap-servers": "bootstrap.servers",
        "--topics": "topics",
        "--table": "table",
    },
    fixed=["--trigger", "available-now"],
    doc_md=DOC,
)
