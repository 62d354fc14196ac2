"""ACLs with unmodified clients: a broker with Kafka's AclAuthorizer setting, a SASL
listener, a super user who manages ACLs with confluent-kafka's AdminClient, and users who
are refused until an ACL lets them (literal and prefixed, deny over allow)."""

from __future__ import annotations

import asyncio
import os
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from bench.pki import Pki, make_pki
from client_helpers import add_users, make_broker, serve, unique_name
from ingest_gateway.network.kafka_client import KafkaClient
from harness.process import BrokerProcess, free_port
from loglake.errors import ErrorCode
from loglake.protocol import ApiKey

# viewer: the console's user, alone granted Describe on the cluster (which widens, e.g., what ListGroups shows).
USERS = {"admin": "admin-secret", "alice": "alice-secret", "bob": "bob-secret", "viewer": "viewer-secret"}
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
DENIED_TOPIC = KafkaError.TOPIC_AUTHORIZATION_FAILED
LITERAL, PREFIXED = ResourcePatternType.LITERAL, ResourcePatternType.PREFIXED


@pytest.fixture(scope="module")
def sasl_port() -> int:
    return free_port()


@pytest.fixture(scope="module")
def https_port() -> int:
    return free_port()


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def broker(
    tmp_path_factory: pytest.TempPathFactory, sasl_port: int, https_port: int, pki: Pki
) -> Iterator[BrokerProcess]:
    process = make_broker(tmp_path_factory.mktemp("acls") / "logs")
    process.overrides.update(
        {
            "listeners": process.overrides["listeners"] + f",SASL_PLAINTEXT://127.0.0.1:{sasl_port}",
        }
    )
    # The users first (over HTTP, before any security), then a restart with the authorizer,
    # HTTP Basic authentication on the plain HTTP listener, and an HTTPS one.
    process.start()
    add_users(process, USERS)
    assert process.stop() == 0
    process.overrides.update(
        {
            "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
            "super.users": "User:admin",
            "http.authentication.method": "BASIC",
            "http.listeners": process.overrides["http.listeners"] + f",https://127.0.0.1:{https_port}",
            "ssl.keystore.location": str(pki.server),
            "ssl.truststore.location": str(pki.ca),
            "listener.name.https.ssl.client.auth": "required",
            "listener.name.https.ssl.enabled.protocols": "TLSv1.3",
        }
    )
    yield from serve(process)


def tls(pki: Pki, certificate: tuple[Path, Path] | None) -> ssl.SSLContext:
    """httpx's TLS: the broker verified against the CA, with a client certificate (cert, key)."""
    context = ssl.create_default_context(cafile=pki.ca)
    if certificate is not None:
        context.load_cert_chain(*certificate)
    return context


def config(sasl_port: int, user: str) -> dict[str, str]:
    return {
        "bootstrap.servers": f"127.0.0.1:{sasl_port}",
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanisms": "SCRAM-SHA-512",
        "sasl.username": user,
        "sasl.password": USERS[user],
    }


@pytest.fixture(scope="module")
def admin(broker, sasl_port: int) -> AdminClient:
    return AdminClient(config(sasl_port, "admin"))


def grant(admin: AdminClient, *bindings: AclBinding) -> None:
    for future in admin.create_acls(list(bindings)).values():
        future.result(30)


def revoke(admin: AdminClient, acl_filter: AclBindingFilter) -> list[AclBinding]:
    (future,) = admin.delete_acls([acl_filter]).values()
    return future.result(30)


def topic_acl(name: str, principal: str, operation: AclOperation, permission=ALLOW, pattern=LITERAL) -> AclBinding:
    return AclBinding(ResourceType.TOPIC, name, pattern, principal, "*", operation, permission)


def produce_error(cfg: dict[str, str], topic: str) -> int | None:
    """Produce one record; the delivery error's code, or None."""
    errors: list[KafkaError | None] = []
    producer = Producer({**cfg, "message.timeout.ms": 10000})
    producer.produce(topic, b"v", on_delivery=lambda err, _m: errors.append(err))
    producer.flush(15)
    assert len(errors) == 1, "no delivery report"
    return None if errors[0] is None else errors[0].code()


def consume_one(cfg: dict[str, str], topic: str, group: str) -> KafkaError | bytes:
    """The first record, or the first error the consumer reports."""
    consumer = Consumer({**cfg, "group.id": group, "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            msg = consumer.poll(1)
            if msg is None:
                continue
            return msg.error() if msg.error() else msg.value()
        raise AssertionError("neither a record nor an error")
    finally:
        consumer.close()


def create(admin: AdminClient, topic: str) -> None:
    for future in admin.create_topics([NewTopic(topic, 1, 1)]).values():
        future.result(30)


def test_produce_needs_write_and_a_literal_acl_grants_it(admin, broker, sasl_port, topic: str) -> None:
    create(admin, topic)
    alice = config(sasl_port, "alice")
    assert produce_error(alice, topic) == DENIED_TOPIC
    grant(admin, topic_acl(topic, "User:alice", AclOperation.WRITE))
    assert produce_error(alice, topic) is None
    assert produce_error(config(sasl_port, "bob"), topic) == DENIED_TOPIC  # alice's ACL only
    assert "Principal = User:bob is Denied operation = " in broker.log_file.read_text()


def test_consume_needs_read_on_topic_and_group_and_prefixes_match(admin, sasl_port) -> None:
    prefix = unique_name("orders")
    topic, group = f"{prefix}-eu", f"{prefix}-group"
    create(admin, topic)
    assert produce_error(config(sasl_port, "admin"), topic) is None  # the super user may
    bob = config(sasl_port, "bob")
    assert consume_one(bob, topic, group).code() == KafkaError.GROUP_AUTHORIZATION_FAILED
    grant(admin, AclBinding(ResourceType.GROUP, prefix, PREFIXED, "User:bob", "*", AclOperation.READ, ALLOW))
    refused = consume_one(bob, topic, group)
    assert isinstance(refused, KafkaError) and refused.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    grant(admin, topic_acl(prefix, "User:bob", AclOperation.READ, pattern=PREFIXED))
    assert consume_one(bob, topic, group) == b"v"


def test_deny_wins_over_allow(admin, sasl_port, topic: str) -> None:
    create(admin, topic)
    grant(admin, topic_acl(topic, "User:*", AclOperation.WRITE), topic_acl(topic, "User:bob", AclOperation.ALL, DENY))
    assert produce_error(config(sasl_port, "alice"), topic) is None
    assert produce_error(config(sasl_port, "bob"), topic) == DENIED_TOPIC


def test_metadata_shows_only_topics_the_principal_may_describe(admin, sasl_port) -> None:
    seen, hidden = unique_name("seen"), unique_name("hidden")
    create(admin, seen)
    create(admin, hidden)
    grant(admin, topic_acl(seen, "User:alice", AclOperation.READ))  # READ implies DESCRIBE
    topics = AdminClient(config(sasl_port, "alice")).list_topics(timeout=10).topics
    assert seen in topics and hidden not in topics
    assert hidden in AdminClient(config(sasl_port, "admin")).list_topics(timeout=10).topics


def test_creating_topics_needs_create_and_acls_need_alter_on_the_cluster(admin, sasl_port) -> None:
    alice_admin = AdminClient(config(sasl_port, "alice"))
    name = unique_name("made-by-alice")
    (future,) = alice_admin.create_topics([NewTopic(name, 1, 1)]).values()
    with pytest.raises(KafkaException) as refused:
        future.result(30)
    assert refused.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    grant(
        admin, AclBinding(ResourceType.BROKER, "kafka-cluster", LITERAL, "User:alice", "*", AclOperation.CREATE, ALLOW)
    )
    create(alice_admin, name)
    with pytest.raises(KafkaException) as not_allowed:
        grant(alice_admin, topic_acl(name, "User:alice", AclOperation.ALL))
    assert not_allowed.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED


def test_acls_are_described_and_deleted_by_filter(admin) -> None:
    name = unique_name("described")
    grant(
        admin, topic_acl(name, "User:alice", AclOperation.READ), topic_acl(name, "User:bob", AclOperation.WRITE, DENY)
    )
    everything = AclBindingFilter(
        ResourceType.TOPIC, name, LITERAL, None, None, AclOperation.ANY, AclPermissionType.ANY
    )
    found = admin.describe_acls(everything).result(30)
    assert {(b.principal, b.operation, b.permission_type) for b in found} == {
        ("User:alice", AclOperation.READ, ALLOW),
        ("User:bob", AclOperation.WRITE, DENY),
    }
    only_bob = AclBindingFilter(
        ResourceType.TOPIC, name, LITERAL, "User:bob", None, AclOperation.ANY, AclPermissionType.ANY
    )
    assert [b.principal for b in revoke(admin, only_bob)] == ["User:bob"]
    assert [b.principal for b in admin.describe_acls(everything).result(30)] == ["User:alice"]
    # Bad input: a principal without its type, a Cluster resource not named kafka-cluster.
    for bad in (
        AclBinding(ResourceType.TOPIC, name, LITERAL, "alice", "*", AclOperation.READ, ALLOW),
        AclBinding(ResourceType.BROKER, "my-cluster", LITERAL, "User:alice", "*", AclOperation.ALTER, ALLOW),
    ):
        with pytest.raises(KafkaException) as refused:
            grant(admin, bad)
        assert refused.value.args[0].code() == KafkaError.INVALID_REQUEST
    assert [b.principal for b in admin.describe_acls(everything).result(30)] == ["User:alice"]


def test_without_an_authorizer_the_acl_apis_say_security_is_disabled(tmp_path) -> None:
    plain = make_broker(tmp_path / "logs")
    for broker in serve(plain):
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        binding = AclBinding(ResourceType.TOPIC, "t", LITERAL, "User:alice", "*", AclOperation.READ, ALLOW)
        with pytest.raises(KafkaException) as disabled:
            grant(admin, binding)
        assert disabled.value.args[0].code() == KafkaError.SECURITY_DISABLED

        async def describe() -> dict:
            client = KafkaClient("127.0.0.1", broker.kafka_port)
            try:
                return await client.request(ApiKey.DESCRIBE_ACLS, 3, ANY_ACL, timeout_ms=10000)
            finally:
                client.close_nowait()

        # (librdkafka drops DescribeAcls' top-level error and answers an empty list.)
        assert asyncio.run(describe())["error_code"] == ErrorCode.SECURITY_DISABLED


ANY_ACL = {
    "resource_type_filter": 1,
    "resource_name_filter": None,
    "pattern_type_filter": 1,
    "principal_filter": None,
    "host_filter": None,
    "operation": 1,
    "permission_type": 1,
}


def test_the_http_api_authenticates_with_basic_and_authorizes_with_the_same_acls(
    admin, broker, https_port, pki
) -> None:
    topic = unique_name("http-acl")
    create(admin, topic)
    url = broker.http_url
    body = {"records": [{"value": "aGk="}]}  # base64 "hi"
    assert httpx.get(f"{url}/healthz").status_code == 200  # for probes, without credentials
    unauthenticated = httpx.post(f"{url}/topics/{topic}", json=body, headers=BINARY)
    assert unauthenticated.status_code == 401 and unauthenticated.json()["error_code"] == 40101
    assert unauthenticated.headers["www-authenticate"].startswith("Basic")
    wrong = httpx.post(f"{url}/topics/{topic}", json=body, headers=BINARY, auth=("alice", "nope"))
    assert wrong.status_code == 401
    refused = httpx.post(f"{url}/topics/{topic}", json=body, headers=BINARY, auth=("alice", USERS["alice"]))
    assert refused.status_code == 403 and refused.json()["kafka_error"] == "TOPIC_AUTHORIZATION_FAILED"
    grant(admin, topic_acl(topic, "User:alice", AclOperation.WRITE))
    produced = httpx.post(f"{url}/topics/{topic}", json=body, headers=BINARY, auth=("alice", USERS["alice"]))
    assert produced.status_code == 200, produced.text
    # Over HTTPS (which asks for a client certificate), verified against the CA; Basic
    # credentials name the principal over the certificate's; the super user may do anything.
    secure = f"https://127.0.0.1:{https_port}"
    read = httpx.get(
        f"{secure}/topics/{topic}/partitions/0/records",
        params={"offset": 0},
        headers={"accept": BINARY["content-type"]},
        auth=("admin", USERS["admin"]),
        verify=tls(pki, (pki.client_cert, pki.client_key)),
    )
    assert read.status_code == 200 and [r["value"] for r in read.json()] == ["aGk="]
    # Administration needs the cluster: alice may not list users; the CLI authenticates too.
    assert httpx.get(f"{url}/users", auth=("alice", USERS["alice"])).status_code == 403
    env = {**os.environ, "LOGLAKE_HTTP_USER": "admin", "LOGLAKE_HTTP_PASSWORD": USERS["admin"]}
    listed = subprocess.run(
        [sys.executable, "-m", "loglake.cli", "users", "list", "--bootstrap-http", url],
        capture_output=True, text=True, env=env,
    )  # fmt: skip
    assert listed.returncode == 0 and "'alice'" in listed.stdout, listed.stderr



def test_an_http_consumer_subscribes_only_to_topics_its_user_may_read(admin, broker) -> None:
    """The subscription route asks the authorizer itself, as the HTTP request's principal."""
    topic, group = unique_name("http-sub"), unique_name("http-sub-group")
    create(admin, topic)
    grant(admin, AclBinding(ResourceType.GROUP, group, LITERAL, "User:alice", "*", AclOperation.READ, ALLOW))
    alice = ("alice", USERS["alice"])
    created = httpx.post(f"{broker.http_url}/consumers/{group}", json={"name": "c"}, auth=alice)
    assert created.status_code == 200, created.text
    subscription = f"{broker.http_url}/consumers/{group}/instances/c/subscription"
    refused = httpx.post(subscription, json={"topics": [topic]}, auth=alice)
    assert refused.status_code == 403 and refused.json()["kafka_error"] == "TOPIC_AUTHORIZATION_FAILED", refused.text
    grant(admin, topic_acl(topic, "User:alice", AclOperation.READ))
    assert httpx.post(subscription, json={"topics": [topic]}, auth=alice).status_code == 204
    assert httpx.delete(f"{broker.http_url}/consumers/{group}/instances/c", auth=alice).status_code == 204


def test_the_console_asks_for_basic_credentials_and_the_cluster_acls(admin, broker) -> None:
    """docs/operations.md "Console": behind http.authentication.method=BASIC the console
    asks the browser for credentials (401 with WWW-Authenticate), then needs Describe on
    the cluster to show anything (403 without it)."""
    url = broker.http_url
    anonymous = httpx.get(f"{url}/ui")
    assert anonymous.status_code == 401 and anonymous.headers["www-authenticate"].startswith("Basic")
    assert httpx.get(f"{url}/ui", auth=("viewer", "wrong")).status_code == 401
    assert httpx.get(f"{url}/ui/topics", auth=("viewer", USERS["viewer"])).status_code == 403
    grant(
        admin,
        AclBinding(ResourceType.BROKER, "kafka-cluster", LITERAL, "User:viewer", "*", AclOperation.DESCRIBE, ALLOW),
    )
    for page in ("/ui", "/ui/topics", "/ui/groups"):
        shown = httpx.get(f"{url}{page}", auth=("viewer", USERS["viewer"]))
        assert shown.status_code == 200 and "<html" in shown.text.lower(), (page, shown.status_code)


BINARY = {"content-type": "application/vnd.kafka.binary.v2+json"}
ALICE_CERTIFICATE = "User:CN=alice,OU=eng,O=loglake"  # bench/pki.py's client certificate


def test_the_https_api_takes_a_client_certificate_as_the_principal(admin, broker, https_port, pki) -> None:
    """ssl.client.auth=required on the HTTPS listener: the verified certificate's RFC 2253
    subject is the principal, authorized by the same ACLs as on the Kafka listeners."""
    topic = unique_name("https-cert")
    create(admin, topic)
    records = f"https://127.0.0.1:{https_port}/topics/{topic}/partitions/0/records"
    body = {"records": [{"value": "aGk="}]}
    alice = tls(pki, (pki.client_cert, pki.client_key))
    refused = httpx.post(records.removesuffix("/partitions/0/records"), json=body, headers=BINARY, verify=alice)
    assert refused.status_code == 403, refused.text
    assert refused.json()["error_code"] == 40301 and refused.json()["kafka_error"] == "TOPIC_AUTHORIZATION_FAILED"
    assert ALICE_CERTIFICATE in refused.json()["message"]
    grant(
        admin,
        topic_acl(topic, ALICE_CERTIFICATE, AclOperation.WRITE),
        topic_acl(topic, ALICE_CERTIFICATE, AclOperation.READ),
    )
    produced = httpx.post(records.removesuffix("/partitions/0/records"), json=body, headers=BINARY, verify=alice)
    assert produced.status_code == 200, produced.text
    read = httpx.get(records, params={"offset": 0}, headers={"accept": BINARY["content-type"]}, verify=alice)
    assert read.status_code == 200 and [r["value"] for r in read.json()] == ["aGk="]
    # Basic credentials, when sent, name the principal instead (bob has no ACL), and wrong ones are refused.
    as_bob = httpx.get(records, params={"offset": 0}, auth=("bob", USERS["bob"]), verify=alice)
    assert as_bob.status_code == 403 and "User:bob " in as_bob.json()["message"]
    assert httpx.get(records, params={"offset": 0}, auth=("alice", "nope"), verify=alice).status_code == 401
    # Without a certificate, or with one the truststore does not vouch for, there is no TLS session.
    for certificate in (None, (pki.stranger_cert, pki.stranger_key)):
        with pytest.raises(httpx.HTTPError):
            httpx.get(records, params={"offset": 0}, auth=("admin", USERS["admin"]), verify=tls(pki, certificate))
    # Nor over TLS 1.2: the listener's ssl.enabled.protocols is TLSv1.3.
    old_tls = tls(pki, (pki.client_cert, pki.client_key))
    old_tls.maximum_version = ssl.TLSVersion.TLSv1_2
    with pytest.raises(httpx.HTTPError):
        httpx.get(records, params={"offset": 0}, verify=old_tls)


def test_the_acls_cli_adds_lists_and_removes(admin, broker) -> None:
    env = {**os.environ, "LOGLAKE_HTTP_USER": "admin", "LOGLAKE_HTTP_PASSWORD": USERS["admin"]}
    name = unique_name("cli-acl")

    def acls(*args: str) -> subprocess.CompletedProcess:
        argv = [sys.executable, "-m", "loglake.cli", "acls", *args, "--bootstrap-http", broker.http_url]
        return subprocess.run(argv, capture_output=True, text=True, timeout=60, env=env)

    added = acls(
        "add", "--resource-type", "Topic", "--resource-name", name, "--principal", "User:bob", "--operation", "Read"
    )
    assert added.returncode == 0, added.stderr
    listed = acls("list", "--principal", "User:bob", "--resource-name", name)
    assert f"Topic:{name}" in listed.stdout and "Read" in listed.stdout and "Allow" in listed.stdout
    everything = AclBindingFilter(
        ResourceType.TOPIC, name, LITERAL, None, None, AclOperation.ANY, AclPermissionType.ANY
    )
    assert [b.principal for b in admin.describe_acls(everything).result(30)] == ["User:bob"]  # the same ACLs
    refused = acls(
        "add", "--resource-type", "Topic", "--resource-name", name, "--principal", "User:bob", "--operation", "Juggle"
    )
    assert refused.returncode == 1 and "operation must be one of" in refused.stderr
    removed = acls("remove", "--resource-type", "Topic", "--resource-name", name)
    assert removed.returncode == 0, removed.stderr
    assert admin.describe_acls(everything).result(30) == []


def test_transactional_producers_need_write_on_their_transactional_id(admin, sasl_port, topic: str) -> None:
    create(admin, topic)
    txn_id = unique_name("txn")
    alice = {**config(sasl_port, "alice"), "transactional.id": txn_id}
    grant(admin, topic_acl(topic, "User:alice", AclOperation.WRITE))
    refused = Producer(alice)
    with pytest.raises(KafkaException) as denied:
        refused.init_transactions(15)
    assert denied.value.args[0].code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    grant(
        admin, AclBinding(ResourceType.TRANSACTIONAL_ID, txn_id, LITERAL, "User:alice", "*", AclOperation.WRITE, ALLOW)
    )
    producer = Producer(alice)
    producer.init_transactions(15)
    producer.begin_transaction()
    producer.produce(topic, b"committed")
    producer.commit_transaction(15)
    # Listing groups shows only those the principal may describe.
    seen = unique_name("bobs-group")
    grant(admin, AclBinding(ResourceType.GROUP, seen, LITERAL, "User:bob", "*", AclOperation.READ, ALLOW))
    grant(admin, topic_acl(topic, "User:bob", AclOperation.READ))
    assert consume_one(config(sasl_port, "bob"), topic, seen) == b"committed"
    hidden = unique_name("admins-group")
    assert consume_one(config(sasl_port, "admin"), topic, hidden) == b"committed"
    # (The AdminClient must outlive its futures: an inline one is destroyed before the answer.)
    admins = {user: AdminClient(config(sasl_port, user)) for user in ("admin", "bob")}
    listed = {user: {g.group_id for g in a.list_consumer_groups().result(30).valid} for user, a in admins.items()}
    assert {seen, hidden} <= listed["admin"]
    assert seen in listed["bob"] and hidden not in listed["bob"], listed["bob"]
