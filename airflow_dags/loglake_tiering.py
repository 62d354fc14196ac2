"""loglake_tiering: rolled segments past the local retention into the topics' Delta tables."""

from __future__ import annotations

from loglake_maintenance import maintenance_dag

DOC = """
Runs `jobs/tier.py`: segments of the topics in `tiering.topics` (with `remote.storage.enable=true`)
that are past `local.retention.ms` / `local.retention.bytes` are copied into the topic's Delta
table exactly once and their tiered offset recorded with the broker, which may then delete them
locally; rows past `retention.ms` / `retention.bytes` leave the table. Settings: `tiering.*` in
conf/airflow.properties or the Airflow Variable `loglake`.
"""

dag = maintenance_dag(
    "tiering",
    "tier.py",
    required={"--bootstrap-servers": "bootstrap.servers", "--topics": "topics"},
    doc_md=DOC,
)
