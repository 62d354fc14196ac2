"""Topic and partition administration from any broker (the role of Kafka's ZkAdminManager
with request forwarding).

Creating and deleting topics goes through the controller code against the store, which
any broker may do in ZooKeeper mode. Changes that the controller must act on at once
(new partitions, elections, reassignments, topic configs) run on the active controller:
a broker that is not the controller forwards them there over the inter-broker listener.
After a change it made, the broker answers once the controller's UpdateMetadata has
brought the change into its own metadata image (as Kafka's CreateTopics waits for the
new partitions' leaders in the broker's metadata cache), so that its next answers
already include it: the change's documents and states are read from the store (those
only) and the image is awaited until it holds them, up to the request's timeout
(REQUEST_TIMED_OUT after it; the change itself is made).

Every store and controller call runs on the metadata thread, never on the event loop. A
request waits for it up to its `timeout_ms` (Kafka's timeout of the admin APIs; without
one, `ADMIN_TIMEOUT_MS`) and is then answered REQUEST_TIMED_OUT, as Kafka answers an
admin request it could not complete in time; the change itself still happens, in order,
once the store answers.
"""

from __future__ import annotations

from typing import Any

from loglake.cluster.metadata_image import MetadataImage
from loglake.config import BrokerConfig
from loglake.coordination.controller import Controller, ElectionType
from loglake.coordination.model import BrokerEndpoint, PartitionState, TopicDescription
from loglake.coordination.store import MetadataStore
from loglake.errors import ErrorCode, KafkaError
from loglake.protocol import ApiKey
from loglake.security.client import ClientSecurity

from ingest_gateway.metadata.metadata_cache import MetadataCache
from ingest_gateway.metadata.metadata_thread import Deadline, MetadataThread
from ingest_gateway.network.kafka_client import KafkaClient, RequestTimedOut

# How long a forwarded request may take on the controller.
FORWARD_TIMEOUT_MS = 30000
# How long a request without a timeout of its own (timeout_ms <= 0: Kafka then waits only
# for the store's writes; the HTTP API) waits for the store.
ADMIN_TIMEOUT_MS = 30000


def _wait_ms(timeout_ms: int) -> int:
    return timeout_ms if timeout_ms > 0 else ADMIN_TIMEOUT_MS


def _raise_for(result: dict[str, Any]) -> None:
    if result["error_code"]:
        code = ErrorCode(result["error_code"])
        raise KafkaError(code, result.get("error_message") or code.name)


def _partition_errors(
    response: dict[str, Any], topics: str, name: str, partitions: str, index: str
) -> dict[tuple[str, int], KafkaError | None]:
    """Per-partition results of a forwarded answer: error or None, by (topic, partition)."""
    return {
        (r[name], p[index]): KafkaError(ErrorCode(p["error_code"]), p["error_message"] or "")
        if p["error_code"]
        else None
        for r in response[topics]
        for p in r[partitions]
    }


class AdminManager:
    def __init__(
        self,
        config: BrokerConfig,
        store: MetadataStore,
        controller: Controller,
        cache: MetadataCache,
        inter_broker_security: ClientSecurity,
        metadata_thread: MetadataThread,
    ) -> None:
        self._config = config
        self._store = store
        self._controller = controller
        self._cache = cache
        self._inter_broker_security = inter_broker_security
        self._thread = metadata_thread
        self._clustered = bool(config.zookeeper_connect)

    @property
    def _runs_here(self) -> bool:
        return self._controller.is_active or not self._clustered

    async def live_brokers(self, timeout_ms: int = 0) -> dict[int, BrokerEndpoint]:
        """The brokers registered in the store now (ZooKeeper's /brokers/ids), not those of
        this broker's image, which may not list a broker that joined a moment ago."""
        return await self._thread.run(self._store.brokers, timeout_ms=_wait_ms(timeout_ms))

    async def create_topic(
        self,
        name: str,
        num_partitions: int,
        replication_factor: int,
        config: dict[str, str],
        assignment: dict[int, tuple[int, ...]] | None = None,
        validate_only: bool = False,
        timeout_ms: int = 0,
    ) -> TopicDescription:
        deadline = Deadline.after_ms(_wait_ms(timeout_ms))
        topic = await self._thread.run(
            self._controller.create_topic,
            name,
            num_partitions,
            replication_factor,
            config,
            assignment,
            validate_only,
            timeout_ms=deadline.remaining_ms(),
        )
        if not validate_only:
            await self._await_metadata([name], deadline)
        return topic

    async def delete_topic(self, name: str, timeout_ms: int = 0) -> None:
        if not self._config.delete_topic_enable:
            raise KafkaError(ErrorCode.TOPIC_DELETION_DISABLED, "delete.topic.enable is false on this broker")
        await self._thread.run(self._controller.delete_topic, name, timeout_ms=_wait_ms(timeout_ms))

    async def create_partitions(
        self,
        name: str,
        total: int,
        validate_only: bool = False,
        assignment: list[tuple[int, ...]] | None = None,
        timeout_ms: int = 0,
    ) -> None:
        """Grow a topic (`assignment`: the new partitions' replicas, else round-robin)."""
        if self._runs_here:
            await self._thread.run(
                self._controller.create_partitions,
                name,
                total,
                validate_only,
                assignment,
                timeout_ms=_wait_ms(timeout_ms),
            )
            return
        assignments = None if assignment is None else [{"broker_ids": list(replicas)} for replicas in assignment]
        body = {
            "topics": [{"name": name, "count": total, "assignments": assignments}],
            "timeout_ms": FORWARD_TIMEOUT_MS,
            "validate_only": validate_only,
        }
        response = await self._forward_to_controller(ApiKey.CREATE_PARTITIONS, 3, body)
        _raise_for(response["results"][0])
        if not validate_only:
            await self._await_metadata([name], Deadline.after_ms(_wait_ms(timeout_ms)))

    async def elect_leaders(
        self, partitions: list[tuple[str, int]] | None, election_type: ElectionType, timeout_ms: int = 0
    ) -> dict[tuple[str, int], KafkaError | None]:
        if self._runs_here:
            return await self._thread.run(
                self._controller.elect_leaders, partitions, election_type, timeout_ms=_wait_ms(timeout_ms)
            )
        by_topic: dict[str, list[int]] = {}
        for topic, p in partitions or ():
            by_topic.setdefault(topic, []).append(p)
        body = {
            "election_type": election_type,
            "topic_partitions": None
            if partitions is None
            else [{"topic": t, "partitions": ps} for t, ps in by_topic.items()],
            "timeout_ms": timeout_ms or FORWARD_TIMEOUT_MS,
        }
        # The request's own timeout_ms: how long the forwarded election may wait (then REQUEST_TIMED_OUT).
        response = await self._forward_to_controller(ApiKey.ELECT_LEADERS, 2, body, timeout_ms or None)
        _raise_for(response)
        results = _partition_errors(response, "replica_election_results", "topic", "partition_result", "partition_id")
        elected = sorted({topic for (topic, _), error in results.items() if error is None})
        await self._await_metadata(elected, Deadline.after_ms(_wait_ms(timeout_ms)))
        return results

    async def alter_partition_reassignments(
        self, targets: dict[tuple[str, int], tuple[int, ...] | None], timeout_ms: int = 0
    ) -> dict[tuple[str, int], KafkaError | None]:
        if self._runs_here:
            return await self._thread.run(
                self._controller.alter_partition_reassignments, targets, timeout_ms=_wait_ms(timeout_ms)
            )
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for (topic, p), replicas in targets.items():
            by_topic.setdefault(topic, []).append(
                {"partition_index": p, "replicas": None if replicas is None else list(replicas)}
            )
        body = {
            "timeout_ms": timeout_ms or FORWARD_TIMEOUT_MS,
            "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()],
        }
        response = await self._forward_to_controller(ApiKey.ALTER_PARTITION_REASSIGNMENTS, 0, body, timeout_ms or None)
        _raise_for(response)
        return _partition_errors(response, "responses", "name", "partitions", "partition_index")

    async def list_partition_reassignments(
        self, partitions: list[tuple[str, int]] | None, timeout_ms: int = 0
    ) -> dict[tuple[str, int], Any]:
        return await self._thread.run(
            self._controller.list_partition_reassignments, partitions, timeout_ms=_wait_ms(timeout_ms)
        )

    async def alter_topic_config(
        self, name: str, config: dict[str, str], validate_only: bool = False, timeout_ms: int = 0
    ) -> None:
        """Change a topic's overrides ("" removes one); forwarded as an AlterConfigs of the
        whole resulting set."""
        if self._runs_here:
            await self._thread.run(
                self._controller.alter_topic_config, name, config, validate_only, timeout_ms=_wait_ms(timeout_ms)
            )
            return
        current = (await self._thread.run(self._store.topics_named, [name], timeout_ms=_wait_ms(timeout_ms))).get(name)
        if current is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} does not exist")
        merged = {k: v for k, v in {**current.config, **config}.items() if v != ""}
        resource = {
            "resource_type": 2,
            "resource_name": name,
            "configs": [{"name": k, "value": v} for k, v in merged.items()],
        }
        response = await self._forward_to_controller(
            ApiKey.ALTER_CONFIGS, 2, {"resources": [resource], "validate_only": validate_only}
        )
        _raise_for(response["responses"][0])
        if not validate_only:
            await self._await_metadata([name], Deadline.after_ms(_wait_ms(timeout_ms)))

    async def _await_metadata(self, names: list[str], deadline: Deadline) -> None:
        """Wait until this broker's image holds the topics as the store has them now (their
        documents, and each partition state at least at its stored version)."""
        if not names:
            return
        topics, states = await self._thread.run(self._read_topics, names, timeout_ms=deadline.remaining_ms())

        def arrived(image: MetadataImage) -> bool:
            for name, topic in topics.items():
                known = image.topics.get(name)
                if known is None or known.topic_id != topic.topic_id or known.config != topic.config:
                    return False
                if known.assignment != topic.assignment:
                    return False
            have = image.partition_states
            return all(
                (current := have.get(name, {}).get(p)) is not None and current.version >= state.version
                for (name, p), state in states.items()
            )

        if not await self._cache.wait_until(arrived, deadline.remaining_ms() / 1000):
            raise KafkaError(
                ErrorCode.REQUEST_TIMED_OUT,
                f"the change to {', '.join(names)} is stored, but it had not reached broker "
                f"{self._config.broker_id}'s metadata when the request timed out",
            )

    def _read_topics(
        self, names: list[str]
    ) -> tuple[dict[str, TopicDescription], dict[tuple[str, int], PartitionState]]:
        topics = self._store.topics_named(names)
        partitions = [(name, p) for name, topic in topics.items() for p in topic.assignment]
        return topics, self._store.partition_states_of(partitions)

    def _controller_endpoint(self) -> tuple[int | None, BrokerEndpoint | None]:
        controller_id = self._store.controller_id()
        return controller_id, None if controller_id is None else self._store.brokers().get(controller_id)

    async def _forward_to_controller(
        self, api_key: ApiKey, version: int, body: dict[str, Any], timeout_ms: int | None = None
    ) -> dict[str, Any]:
        """The controller's answer; a request that carries its own `timeout_ms` waits that
        long (else the client's request timeout) and then fails REQUEST_TIMED_OUT, as Kafka's."""
        controller_id, endpoint = await self._thread.run(self._controller_endpoint, timeout_ms=FORWARD_TIMEOUT_MS)
        if endpoint is None:
            raise KafkaError(ErrorCode.NOT_CONTROLLER, "no controller is elected right now; retry")
        client = KafkaClient(endpoint.host, endpoint.port, security=self._inter_broker_security)
        try:
            return await client.request(api_key, version, body, timeout_ms=timeout_ms)
        except RequestTimedOut as exc:
            if timeout_ms is None:
                raise KafkaError(
                    ErrorCode.NOT_CONTROLLER, f"the controller (broker {controller_id}) did not answer: {exc}"
                ) from exc
            raise KafkaError(
                ErrorCode.REQUEST_TIMED_OUT,
                f"the controller (broker {controller_id}) did not answer within {timeout_ms} ms",
            ) from exc
        except (ConnectionError, TimeoutError) as exc:
            raise KafkaError(
                ErrorCode.NOT_CONTROLLER, f"the controller (broker {controller_id}) did not answer: {exc}"
            ) from exc
        finally:
            await client.close()
