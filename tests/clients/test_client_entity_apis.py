"""SCRAM credentials and client quotas over the Kafka protocol (KIP-554, KIP-546), as
`kafka-configs.sh` and AdminClient's alter_user_scram_credentials use them: the users are
created through the protocol itself, then a broker with an authorizer lets only its super
user change them; new credentials authenticate at once, deleted ones no longer do."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import httpx
import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)

from client_helpers import make_broker, serve
from ingest_gateway.network.kafka_client import KafkaClient, KafkaConnectionError
from harness.process import BrokerProcess, free_port
from loglake.errors import ErrorCode
from loglake.protocol import ApiKey
from loglake.security.client import client_security

SHA256, SHA512 = ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512
USERS = {"admin": "admin-secret", "alice": "alice-secret"}


@pytest.fixture(scope="module")
def sasl_port() -> int:
    return free_port()


def sasl(port: int, user: str, password: str, mechanism: str = "SCRAM-SHA-512") -> dict[str, str]:
    return {
        "bootstrap.servers": f"127.0.0.1:{port}",
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanisms": mechanism,
        "sasl.username": user,
        "sasl.password": password,
    }


def upsert(admin: AdminClient, user: str, password: str, mechanism: ScramMechanism = SHA512, iterations: int = 8192):
    (future,) = admin.alter_user_scram_credentials(
        [UserScramCredentialUpsertion(user, ScramCredentialInfo(mechanism, iterations), password.encode())]
    ).values()
    return future.result(30)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory, sasl_port: int) -> Iterator[BrokerProcess]:
    process = make_broker(tmp_path_factory.mktemp("entities") / "logs")
    process.overrides["listeners"] += f",SASL_PLAINTEXT://127.0.0.1:{sasl_port}"
    # Before any authorizer: the users are created with AlterUserScramCredentials.
    process.start()
    open_admin = AdminClient({"bootstrap.servers": process.bootstrap})
    for user, password in USERS.items():
        upsert(open_admin, user, password)
    del open_admin  # its connections would retry through the restart
    assert process.stop() == 0
    process.overrides.update(
        {
            "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
            "super.users": "User:admin",
            "http.authentication.method": "BASIC",
        }
    )
    yield from serve(process)


@pytest.fixture(scope="module")
def admin(broker: BrokerProcess, sasl_port: int) -> AdminClient:
    return AdminClient(sasl(sasl_port, "admin", USERS["admin"]))


def request(
    port: int,
    user: str,
    api_key: ApiKey,
    version: int,
    body: dict,
    password: str | None = None,
    mechanism: str = "SCRAM-SHA-512",
) -> dict:
    """One request over SASL as `user` (its password from USERS unless given)."""
    props = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": mechanism}
    secret = USERS[user] if password is None else password
    props |= {"sasl.jaas.config": f'ScramLoginModule required username="{user}" password="{secret}";'}

    async def send() -> dict:
        client = KafkaClient("127.0.0.1", port, security=client_security(props))
        try:
            return await client.request(api_key, version, body)
        finally:
            await client.close()

    return asyncio.run(send())


def authenticates(port: int, user: str, password: str, mechanism: str = "SCRAM-SHA-512") -> bool:
    """Whether SCRAM with these credentials succeeds (a failure is refused at once, no retries)."""
    try:
        request(
            port, user, ApiKey.METADATA, 12, {"topics": [], "allow_auto_topic_creation": False}, password, mechanism
        )
        return True
    except KafkaConnectionError as exc:
        assert "SASL" in str(exc) or "Sasl" in str(exc), exc
        return False


def test_credentials_added_described_used_and_deleted(
    broker: BrokerProcess, admin: AdminClient, sasl_port: int
) -> None:
    described = {u: f.result(30) for u, f in admin.describe_user_scram_credentials(["admin", "alice"]).items()}
    assert {u: [(i.mechanism, i.iterations) for i in d.scram_credential_infos] for u, d in described.items()} == {
        "admin": [(SHA512, 8192)],
        "alice": [(SHA512, 8192)],
    }

    assert not authenticates(sasl_port, "carol", "carol-secret", "SCRAM-SHA-256")
    upsert(admin, "carol", "carol-secret", SHA256, 4096)
    assert authenticates(sasl_port, "carol", "carol-secret", "SCRAM-SHA-256")
    # librdkafka too: carol lists the topics with her new credential.
    carol = AdminClient(sasl(sasl_port, "carol", "carol-secret", "SCRAM-SHA-256"))
    assert carol.list_topics(timeout=30).brokers
    assert not authenticates(sasl_port, "carol", "wrong", "SCRAM-SHA-256")
    assert not authenticates(sasl_port, "carol", "carol-secret", "SCRAM-SHA-512")  # no such credential
    upsert(admin, "carol", "carol-512", SHA512)
    assert authenticates(sasl_port, "carol", "carol-512")

    # kafka-python sees the same, all users when none is named.
    from kafka import KafkaAdminClient

    kp = KafkaAdminClient(
        bootstrap_servers=f"127.0.0.1:{sasl_port}",
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="SCRAM-SHA-512",
        sasl_plain_username="admin",
        sasl_plain_password=USERS["admin"],
    )
    try:
        everyone = kp.describe_user_scram_credentials()
    finally:
        kp.close()
    # (its own mechanism enum: compared by the protocol's numbers, 1 and 2)
    assert {
        u: [(int(i["mechanism"]), i["iterations"]) for i in d["credential_infos"]] for u, d in everyone.items()
    } == {
        "admin": [(2, 8192)],
        "alice": [(2, 8192)],
        "carol": [(1, 4096), (2, 8192)],
    }

    (future,) = admin.alter_user_scram_credentials([UserScramCredentialDeletion("carol", SHA256)]).values()
    future.result(30)
    assert not authenticates(sasl_port, "carol", "carol-secret", "SCRAM-SHA-256")
    assert authenticates(sasl_port, "carol", "carol-512")
    (future,) = admin.alter_user_scram_credentials([UserScramCredentialDeletion("carol", SHA512)]).values()
    future.result(30)
    assert not authenticates(sasl_port, "carol", "carol-512")
    with pytest.raises(KafkaException) as info:
        admin.describe_user_scram_credentials(["carol"])["carol"].result(30)
    assert "does not exist" in str(info.value)


def test_bad_alterations_get_kafkas_errors(broker: BrokerProcess, sasl_port: int) -> None:
    salted = {"salt": b"s" * 16, "salted_password": b"p" * 64}
    body = {
        "deletions": [{"name": "nobody", "mechanism": 1}, {"name": "", "mechanism": 1}],
        "upsertions": [
            {"name": "few", "mechanism": 1, "iterations": 1000, **salted},
            {"name": "many", "mechanism": 2, "iterations": 20000, **salted},
            {"name": "strange", "mechanism": 9, "iterations": 4096, **salted},
            {"name": "twice", "mechanism": 1, "iterations": 4096, **salted},
            {"name": "twice", "mechanism": 1, "iterations": 8192, **salted},
        ],
    }
    answer = request(sasl_port, "admin", ApiKey.ALTER_USER_SCRAM_CREDENTIALS, 0, body)
    assert {r["user"]: r["error_code"] for r in answer["results"]} == {
        "nobody": ErrorCode.RESOURCE_NOT_FOUND,
        "": ErrorCode.UNACCEPTABLE_CREDENTIAL,
        "few": ErrorCode.UNACCEPTABLE_CREDENTIAL,
        "many": ErrorCode.UNACCEPTABLE_CREDENTIAL,
        "strange": ErrorCode.UNSUPPORTED_SASL_MECHANISM,
        "twice": ErrorCode.DUPLICATE_RESOURCE,
    }
    assert not authenticates(sasl_port, "twice", "whatever", "SCRAM-SHA-256")

    # Only the cluster's Alter lets a principal change credentials, Describe list them.
    denied = request(sasl_port, "alice", ApiKey.ALTER_USER_SCRAM_CREDENTIALS, 0, {**body, "deletions": []})
    assert {r["error_code"] for r in denied["results"]} == {ErrorCode.CLUSTER_AUTHORIZATION_FAILED}
    listing = request(sasl_port, "alice", ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, 0, {"users": None})
    assert listing["error_code"] == ErrorCode.CLUSTER_AUTHORIZATION_FAILED and listing["results"] == []
    twice = request(sasl_port, "admin", ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, 0, {"users": [{"name": "alice"}] * 2})
    assert [(r["user"], r["error_code"]) for r in twice["results"]] == [("alice", ErrorCode.DUPLICATE_RESOURCE)]


def entity(**names: str | None) -> list[dict]:
    return [{"entity_type": t.replace("_", "-"), "entity_name": n} for t, n in names.items()]


def quota_ops(**values: float | None) -> list[dict]:
    return [{"key": k, "value": v or 0.0, "remove": v is None} for k, v in values.items()]


def describe(port: int, components: list[dict], strict: bool = False, user: str = "admin") -> dict:
    return request(port, user, ApiKey.DESCRIBE_CLIENT_QUOTAS, 1, {"components": components, "strict": strict})


def described(answer: dict) -> dict[tuple, dict[str, float]]:
    assert answer["error_code"] == 0, answer
    return {
        tuple((e["entity_type"], e["entity_name"]) for e in entry["entity"]): {
            v["key"]: v["value"] for v in entry["values"]
        }
        for entry in answer["entries"]
    }


def test_client_quotas_altered_and_described_with_filters(broker: BrokerProcess, sasl_port: int) -> None:
    changes = [
        {"entity": entity(user="alice"), "ops": quota_ops(producer_byte_rate=1048576.0)},
        {"entity": entity(user="alice", client_id="etl"), "ops": quota_ops(consumer_byte_rate=2048.0)},
        {"entity": entity(client_id=None), "ops": quota_ops(producer_byte_rate=4096.0, request_percentage=12.5)},
    ]
    answer = request(sasl_port, "admin", ApiKey.ALTER_CLIENT_QUOTAS, 1, {"entries": changes, "validate_only": False})
    assert [e["error_code"] for e in answer["entries"]] == [0, 0, 0], answer

    everything = described(describe(sasl_port, []))
    assert everything == {
        (("user", "alice"),): {"producer_byte_rate": 1048576.0},
        (("user", "alice"), ("client-id", "etl")): {"consumer_byte_rate": 2048.0},
        (("client-id", None),): {"producer_byte_rate": 4096.0, "request_percentage": 12.5},
    }
    exact_user = [{"entity_type": "user", "match_type": 0, "match": "alice"}]
    assert set(described(describe(sasl_port, exact_user))) == {
        (("user", "alice"),),
        (("user", "alice"), ("client-id", "etl")),
    }
    assert set(described(describe(sasl_port, exact_user, strict=True))) == {(("user", "alice"),)}
    default_client = [{"entity_type": "client-id", "match_type": 1, "match": None}]
    assert set(described(describe(sasl_port, default_client))) == {(("client-id", None),)}
    any_client = [{"entity_type": "client-id", "match_type": 2, "match": None}]
    assert set(described(describe(sasl_port, any_client))) == {
        (("user", "alice"), ("client-id", "etl")),
        (("client-id", None),),
    }
    # The HTTP API reads the same store.
    http = httpx.get(f"{broker.http_url}/quotas", auth=("admin", USERS["admin"]), timeout=10).json()
    assert http["users/alice"] == {"producer_byte_rate": "1048576"}
    assert http["clients/<default>"] == {"producer_byte_rate": "4096", "request_percentage": "12.5"}

    # Removing a quota; validate_only changes nothing.
    remove = [{"entity": entity(user="alice"), "ops": quota_ops(producer_byte_rate=None)}]
    checked = request(sasl_port, "admin", ApiKey.ALTER_CLIENT_QUOTAS, 1, {"entries": remove, "validate_only": True})
    assert checked["entries"][0]["error_code"] == 0
    assert (("user", "alice"),) in described(describe(sasl_port, exact_user, strict=True))
    request(sasl_port, "admin", ApiKey.ALTER_CLIENT_QUOTAS, 0, {"entries": remove, "validate_only": False})
    assert described(describe(sasl_port, exact_user, strict=True)) == {}


def test_bad_quota_requests_get_kafkas_errors(broker: BrokerProcess, sasl_port: int) -> None:
    bad = [
        {"entity": entity(user="x"), "ops": quota_ops(producer_byte_rate=10.5)},  # a LONG config
        {"entity": entity(user="x"), "ops": quota_ops(no_such_quota=1.0)},
        {"entity": entity(user="x"), "ops": quota_ops(consumer_byte_rate=-5.0)},
        {"entity": [], "ops": quota_ops(producer_byte_rate=1.0)},
        {"entity": entity(user=""), "ops": quota_ops(producer_byte_rate=1.0)},
        {"entity": entity(ip="10.0.0.1"), "ops": quota_ops(connection_creation_rate=1.0)},
        {"entity": entity(group="g"), "ops": quota_ops(producer_byte_rate=1.0)},
    ]
    answer = request(sasl_port, "admin", ApiKey.ALTER_CLIENT_QUOTAS, 1, {"entries": bad, "validate_only": False})
    assert [e["error_code"] for e in answer["entries"]] == [ErrorCode.INVALID_REQUEST] * len(bad)
    assert all(e["error_message"] for e in answer["entries"])
    assert (("user", "x"),) not in described(describe(sasl_port, []))

    twice = [{"entity_type": "user", "match_type": 2, "match": None}] * 2
    assert describe(sasl_port, twice)["error_code"] == ErrorCode.INVALID_REQUEST
    custom = [{"entity_type": "group", "match_type": 2, "match": None}]
    assert describe(sasl_port, custom)["error_code"] == ErrorCode.UNSUPPORTED_VERSION
    assert describe(sasl_port, [], user="alice")["error_code"] == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    change = [{"entity": entity(user="alice"), "ops": quota_ops(producer_byte_rate=1.0)}]
    denied = request(sasl_port, "alice", ApiKey.ALTER_CLIENT_QUOTAS, 1, {"entries": change, "validate_only": False})
    assert denied["entries"][0]["error_code"] == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
