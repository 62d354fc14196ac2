"""The consume-transform-produce loop of Kafka Streams' exactly-once mode, with confluent-kafka:
read `input` as group `group` (read_committed), write each record's value prefixed with
"out-" to `output`, and commit the consumed offsets in the same transaction as the output.
Exits 0 once the group has consumed `total` records. Killed and restarted by the tests.

    python eos_processor.py BOOTSTRAP INPUT OUTPUT GROUP TOTAL
"""

from __future__ import annotations

import sys

from confluent_kafka import Consumer, Producer


def main(bootstrap: str, source: str, target: str, group: str, total: int) -> int:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            # Static membership: a restarted instance takes its predecessor's place at once.
            "group.instance.id": f"{group}-instance",
            "session.timeout.ms": 6000,
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"{group}-txn", "linger.ms": 5})
    producer.init_transactions(30)  # fences a killed predecessor and aborts its open transaction
    consumer.subscribe([source])
    try:
        while True:
            messages = [m for m in consumer.consume(200, 0.5) if m.error() is None]
            if messages:
                producer.begin_transaction()
                for m in messages:
                    producer.produce(target, key=m.key(), value=b"out-" + m.value(), partition=m.partition())
                positions = consumer.position(consumer.assignment())
                producer.send_offsets_to_transaction(positions, consumer.consumer_group_metadata(), 30)
                producer.commit_transaction(30)
            committed = consumer.committed(consumer.assignment(), timeout=30) if consumer.assignment() else []
            if sum(max(tp.offset, 0) for tp in committed) >= total:
                return 0
    finally:
        consumer.close()


if __name__ == "__main__":
    bootstrap, source, target, group, total = sys.argv[1:6]
    sys.exit(main(bootstrap, source, target, group, int(total)))
