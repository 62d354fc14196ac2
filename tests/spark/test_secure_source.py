"""The Spark data source and sink over SASL_SSL, with Spark's Kafka option names
(kafka.security.protocol, kafka.sasl.mechanism, kafka.sasl.jaas.config,
kafka.ssl.truststore.location): reads, exactly-once and at-least-once writes; wrong
credentials fail with a clear error."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from clients.client_helpers import add_users, create_topic, sasl_ssl_broker, serve, unique_name

from bench.pki import make_pki
from harness.process import BrokerProcess


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, dict[str, str]]]:
    pki = make_pki(tmp_path_factory.mktemp("pki"))
    process, address = sasl_ssl_broker(tmp_path_factory.mktemp("secure") / "logs", pki)
    for broker in serve(process):
        add_users(broker, {"spark": "spark-secret"})
        options = {
            "kafka.bootstrap.servers": address,
            "kafka.security.protocol": "SASL_SSL",
            "kafka.sasl.mechanism": "SCRAM-SHA-512",
            "kafka.sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required "
            'username="spark" password="spark-secret";',
            "kafka.ssl.truststore.location": str(pki.ca),
        }
        yield broker, options


def test_reads_and_writes_over_sasl_ssl(loglake_spark, secure) -> None:
    broker, options = secure
    topic, copy = unique_name("secure-in"), unique_name("secure-out")
    create_topic(broker.bootstrap, topic)
    create_topic(broker.bootstrap, copy)
    rows = loglake_spark.createDataFrame([(f"v{i}",) for i in range(50)], "value string")
    rows.write.format("loglake").options(**options).option("topic", topic).option("exactly.once", "false").mode(
        "append"
    ).save()
    read = loglake_spark.read.format("loglake").options(**options).option("subscribe", topic).load()
    assert sorted(r.value.decode() for r in read.select("value").collect()) == sorted(f"v{i}" for i in range(50))
    # The exactly-once path speaks loglake's own protocol client: the same options.
    read.select("value").write.format("loglake").options(**options).option("topic", copy).mode("append").save()
    copied = loglake_spark.read.format("loglake").options(**options).option("subscribe", copy).load()
    assert copied.count() == 50


def test_wrong_credentials_fail_clearly(loglake_spark, secure) -> None:
    broker, options = secure
    wrong = {**options, "kafka.sasl.jaas.config": 'x required username="spark" password="nope";'}
    with pytest.raises(Exception, match="Authentication failed|authentication failed"):
        loglake_spark.read.format("loglake").options(**wrong).option("subscribe", "anything").load().count()
    with pytest.raises(Exception, match="kafka.sasl.jaas.config|sasl.jaas.config"):
        bad = {k: v for k, v in options.items() if k != "kafka.sasl.jaas.config"}
        loglake_spark.read.format("loglake").options(**bad).option("subscribe", "anything").load().count()
