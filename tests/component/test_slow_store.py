"""A slow metadata store (ZooKeeper) delays what needs it, not the broker's answers: ACL,
SCRAM and quota requests are answered REQUEST_TIMED_OUT once their time is up (however many
store calls they make), and so are the HTTP tiering and broker-config routes (504); a
Metadata request that auto-creates a topic is answered LEADER_NOT_AVAILABLE at once and the
topic comes once the store answers; a stopping broker closes the store off its event loop."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI, Request, Response
from protocol_helpers import plaintext_connection

from harness.process import free_port
from ingest_gateway.apis.acl_apis import AclApis
from ingest_gateway.apis.client_entity_apis import ClientEntityApis
from ingest_gateway.apis.request_router import RequestRouter
from ingest_gateway.http.broker_configs import broker_config_routes
from ingest_gateway.http.errors import kafka_error_response
from ingest_gateway.http.tiering import tiering_routes
from ingest_gateway.server.broker import Broker
from loglake.config import BrokerConfig
from loglake.coordination.store import LOOP_GUARD_ENV
from loglake.errors import ErrorCode, KafkaError
from loglake.faults import STORE_DELAY_ENV
from loglake.protocol import ApiKey, decode_response, encode_request

# How long each store call takes while the store is slow, and how long the requests of the
# test's API modules wait for it: the requests must be answered long before the calls end.
STORE_DELAY_MS = 4000
STORE_TIMEOUT_MS = 200
ANSWERED_WITHIN_S = 3.0


@pytest.fixture
def broker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Broker]:
    monkeypatch.setenv(STORE_DELAY_ENV, str(tmp_path / "store-delay-{broker_id}"))
    monkeypatch.setenv(LOOP_GUARD_ENV, "1")  # a store call on the event loop raises
    config = BrokerConfig.from_properties(
        {
            "log.dirs": str(tmp_path / "logs"),
            "num.partitions": "1",
            "listeners": f"PLAINTEXT://127.0.0.1:{free_port()}",
            "http.listeners": f"http://127.0.0.1:{free_port()}",
            "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
            "super.users": "User:ANONYMOUS",
        }
    )
    b = Broker(config)
    b.startup()
    yield b
    b.shutdown()


def _slow(broker: Broker, tmp_path: Path, delay_ms: int) -> Path:
    path = tmp_path / f"store-delay-{broker.config.broker_id}"
    path.write_text(str(delay_ms))
    return path


async def _call(router: RequestRouter, key: ApiKey, version: int, body: dict) -> dict:
    frame = encode_request(key, version, 1, "slow-store", body)
    chunks = await router.handle(plaintext_connection(), memoryview(frame)[4:])
    assert chunks is not None
    return decode_response(key, version, b"".join(chunks)[4:])[1]


async def _timed(router: RequestRouter, key: ApiKey, version: int, body: dict) -> dict:
    started = time.monotonic()
    answer = await _call(router, key, version, body)
    assert time.monotonic() - started < ANSWERED_WITHIN_S, (key.name, answer)
    return answer


ACL = {
    "resource_type": 2,  # TOPIC
    "resource_name": "orders",
    "resource_pattern_type": 3,  # LITERAL
    "principal": "User:alice",
    "host": "*",
    "operation": 3,  # READ
    "permission_type": 3,  # ALLOW
}
SCRAM = {"mechanism": 1, "iterations": 8192, "salt": b"salt", "salted_password": b"x" * 32}


def test_acl_scram_and_quota_requests_time_out_on_a_slow_store(broker: Broker, tmp_path: Path) -> None:
    router = RequestRouter(broker.authorization, None, "INTERNAL")
    thread = broker.metadata_thread
    router.register_module(AclApis(broker.authorization, broker.store, thread, STORE_TIMEOUT_MS))
    router.register_module(ClientEntityApis(broker.store, broker.authorization, thread, STORE_TIMEOUT_MS))

    async def main() -> None:
        delay = _slow(broker, tmp_path, STORE_DELAY_MS)
        # The valid creation times out; the invalid one keeps its own error.
        created = await _timed(router, ApiKey.CREATE_ACLS, 3, {"creations": [ACL, {**ACL, "operation": 0}]})
        assert [r["error_code"] for r in created["results"]] == [ErrorCode.REQUEST_TIMED_OUT, ErrorCode.INVALID_REQUEST]
        # Three users, one deadline: all time out together, not one timeout after another.
        users = [{"name": u, **SCRAM} for u in ("a", "b", "c")]
        altered = await _timed(router, ApiKey.ALTER_USER_SCRAM_CREDENTIALS, 0, {"deletions": [], "upsertions": users})
        assert [(r["user"], r["error_code"]) for r in altered["results"]] == [
            (u, ErrorCode.REQUEST_TIMED_OUT) for u in ("a", "b", "c")
        ]
        described = await _timed(router, ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, 0, {"users": None})
        assert described["error_code"] == ErrorCode.REQUEST_TIMED_OUT
        quotas = await _timed(router, ApiKey.DESCRIBE_CLIENT_QUOTAS, 1, {"components": [], "strict": False})
        assert quotas["error_code"] == ErrorCode.REQUEST_TIMED_OUT
        # Once the store answers again, so do the requests.
        delay.unlink()
        await thread.run(lambda: None)  # the slow calls queued before have ended
        listed = await _call(router, ApiKey.DESCRIBE_CLIENT_QUOTAS, 1, {"components": [], "strict": False})
        assert listed["error_code"] == ErrorCode.NONE

    asyncio.run(main())


def test_tiering_and_broker_config_routes_time_out_on_a_slow_store(broker: Broker, tmp_path: Path) -> None:
    thread = broker.metadata_thread
    app = FastAPI()
    app.include_router(tiering_routes(broker.replica_manager, broker.store, thread, STORE_TIMEOUT_MS))
    app.include_router(
        broker_config_routes(broker.dynamic_config, broker.metadata_cache, broker.store, thread, STORE_TIMEOUT_MS)
    )

    @app.exception_handler(KafkaError)
    async def _kafka_error(request: Request, exc: KafkaError) -> Response:
        return kafka_error_response(exc)

    topic = {"name": "tiered", "num_partitions": 1, "replication_factor": 1, "assignments": [], "timeout_ms": 5000}
    topic["configs"] = [{"name": "remote.storage.enable", "value": "true"}]
    tiering = "/topics/tiered/partitions/0/tiering"
    config = "/brokers/<default>/configs"

    async def main() -> None:
        await broker.start()
        created = await _call(broker.requests, ApiKey.CREATE_TOPICS, 5, {"topics": [topic], "timeout_ms": 5000})
        assert created["topics"][0]["error_code"] == ErrorCode.NONE
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://broker") as client:
            while (await client.get(tiering)).status_code != 200:  # the broker becomes its leader
                await asyncio.sleep(0.05)

            async def timed(method: str, path: str, **kwargs: object) -> httpx.Response:
                started = time.monotonic()
                answer = await client.request(method, path, **kwargs)  # type: ignore[arg-type]
                assert time.monotonic() - started < ANSWERED_WITHIN_S, (method, path, answer.text)
                return answer

            delay = _slow(broker, tmp_path, STORE_DELAY_MS)
            answers = [
                await timed("GET", tiering),
                await timed("POST", "/topics/tiered/partitions/0/tiered-offset", json={"offset": 0}),
                await timed("GET", config),
                await timed("PATCH", config, json={"configs": {"log.retention.ms": "60000"}}),
            ]
            assert [(a.status_code, a.json()["kafka_error"]) for a in answers] == [(504, "REQUEST_TIMED_OUT")] * 4
            # Once the store answers again, so do the routes.
            delay.unlink()
            await thread.run(lambda: None)  # the slow calls queued before have ended
            assert (await client.get(tiering)).json()["tiered_offset"] == 0
            # The timed-out PATCH (one compare-and-set on the store) is made once the store
            # answers, as an admin request answered REQUEST_TIMED_OUT is.
            assert (await client.get(config)).json()["configs"] == {"log.retention.ms": "60000"}
            patched = await client.patch(config, json={"configs": {"log.retention.ms": "70000"}})
            assert patched.status_code == 200, patched.text
            assert (await client.get(config)).json()["configs"] == {"log.retention.ms": "70000"}
        await broker.stop()

    asyncio.run(main())


def test_metadata_auto_creation_answers_at_once(broker: Broker, tmp_path: Path) -> None:
    body = {"topics": [{"name": "fresh"}], "allow_auto_topic_creation": True}

    async def main() -> None:
        delay = _slow(broker, tmp_path, STORE_DELAY_MS)
        for _ in range(2):  # asking again while it is being created starts no second creation
            (topic,) = (await _timed(broker.requests, ApiKey.METADATA, 9, body))["topics"]
            assert (topic["name"], topic["error_code"]) == ("fresh", ErrorCode.LEADER_NOT_AVAILABLE)
        delay.unlink()
        while True:  # the creation completes in the background once the store answers
            (topic,) = (await _call(broker.requests, ApiKey.METADATA, 9, body))["topics"]
            if topic["error_code"] == ErrorCode.NONE:
                break
            assert topic["error_code"] == ErrorCode.LEADER_NOT_AVAILABLE
            await asyncio.sleep(0.05)
        assert [p["partition_index"] for p in topic["partitions"]] == [0]

    asyncio.run(main())


def test_a_stopping_broker_closes_the_store_off_its_loop(broker: Broker) -> None:
    """Under the loop guard a store call on the event loop raises: stop() must not close the
    store (a ZooKeeper round trip) there."""

    async def main() -> None:
        await broker.start()
        await broker.stop()

    asyncio.run(main())
