"""loglake_compaction: the Spark executor of log compaction over the topics left to it."""

from __future__ import annotations

from loglake_maintenance import maintenance_dag

DOC = """
Runs `jobs/compact.py`: Spark builds the latest-offset-per-key plan of each partition's dirty
range of the topics in `compaction.topics` and hands it to every replica's broker, which rewrites
its own segments (log compaction with Kafka's semantics: offsets never change, tombstones kept for
`delete.retention.ms`). A rerun after a failure cleans what is still dirty. Settings:
`compaction.*` in conf/airflow.properties or the Airflow Variable `loglake`.
"""

dag = maintenance_dag(
    "compaction",
    "compact.py",
    required={"--bootstrap-servers": "bootstrap.servers", "--topics": "topics"},
    doc_md=DOC,
)
