"""A streaming copy of one topic into another through the exactly-once loglake sink, run as
a child process by the crash tests (the driver is killed, restarted on its checkpoint):

    python tests/spark/topic_copy_job.py BOOTSTRAP SOURCE TARGET CHECKPOINT available-now|processing-time
"""

from __future__ import annotations

import sys

from loglake.spark import job_session

MAX_OFFSETS_PER_TRIGGER = 40


def main(bootstrap: str, source: str, target: str, checkpoint: str, trigger: str) -> None:
    with job_session("topic-copy") as spark:
        records = (
            spark.readStream.format("loglake")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", source)
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", MAX_OFFSETS_PER_TRIGGER)
            .load()
        )
        writer = (
            records.select("key", "value")
            .writeStream.format("loglake")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("topic", target)
            .option("checkpointLocation", checkpoint)
        )
        if trigger == "available-now":
            writer = writer.trigger(availableNow=True)
        else:
            writer = writer.trigger(processingTime="500 milliseconds")
        writer.start().awaitTermination()


if __name__ == "__main__":
    main(*sys.argv[1:])
