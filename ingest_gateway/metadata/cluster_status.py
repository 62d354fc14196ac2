"""The cluster as the metadata store has it (GET /cluster, the console's overview): brokers,
the controller and its epoch, and every partition's leader, replicas and ISR. Read from the
store, fresher than this broker's metadata image."""

from __future__ import annotations

from typing import Any

from loglake.coordination.store import MetadataStore


def cluster_status(store: MetadataStore) -> dict[str, Any]:
    """Brokers, the controller and its epoch, every partition's leader, replicas and ISR,
    and the counts of under-replicated and offline partitions."""
    brokers = store.brokers()
    partitions = []
    for name, topic in sorted(store.topics().items()):
        states = store.partition_states(name)
        for p, replicas in sorted(topic.assignment.items()):
            state = states.get(p)
            if state is None:
                continue
            partitions.append(
                {
                    "topic": name,
                    "partition": p,
                    "leader": state.leader,
                    "leader_epoch": state.leader_epoch,
                    "replicas": list(replicas),
                    "isr": list(state.isr),
                    "adding_replicas": list(topic.adding.get(p, ())),
                    "removing_replicas": list(topic.removing.get(p, ())),
                    # Replicas being added do not count until they have caught up (Kafka's rule).
                    "under_replicated": len(state.isr) < len(replicas) - len(topic.adding.get(p, ())),
                    "offline": state.leader not in brokers,
                }
            )
    controller_id = store.controller_id()
    return {
        "controller": {"broker_id": controller_id, "epoch": store.controller_epoch()},
        "brokers": [
            {
                "broker_id": b.broker_id,
                "kafka": f"{b.host}:{b.port}",
                "http": f"http://{b.http_host}:{b.http_port}",
                "rack": b.rack,
            }
            for b in sorted(brokers.values(), key=lambda b: b.broker_id)
        ],
        "partitions": partitions,
        "under_replicated_partitions": sum(p["under_replicated"] for p in partitions),
        "offline_partitions": sum(p["offline"] for p in partitions),
    }
