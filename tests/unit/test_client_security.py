"""How clients (the Spark source, jobs) and brokers (to each other) secure their connections,
from Kafka's properties: SASL mechanism and JAAS credentials, each error naming its property."""

from __future__ import annotations

import pytest

from loglake.config import BrokerConfig
from loglake.security.client import client_security

from ingest_gateway.server.listener_security import inter_broker_security

JAAS = 'org.apache.kafka.common.security.scram.ScramLoginModule required username="alice" password="s3cr\\"t";'


def test_client_sasl_settings() -> None:
    plain = {"security.protocol": "sasl_plaintext", "sasl.mechanism": "scram-sha-256", "sasl.jaas.config": JAAS}
    security = client_security(plain)
    assert (security.tls, security.mechanism, security.username, security.password) == (
        None,
        "SCRAM-SHA-256",
        "alice",
        's3cr"t',
    )
    for props, message in (
        ({**plain, "sasl.mechanism": "OAUTHBEARER"}, "sasl.mechanism=OAUTHBEARER: one of"),
        ({k: v for k, v in plain.items() if k != "sasl.mechanism"}, "sasl.mechanism=GSSAPI"),  # Kafka's default
        ({**plain, "sasl.jaas.config": "required;"}, 'sasl.jaas.config needs username="..."'),
        ({"security.protocol": "TLS"}, "security.protocol=TLS"),
    ):
        with pytest.raises(ValueError, match=message):
            client_security(props)


def test_inter_broker_sasl_settings() -> None:
    base = {
        "listeners": "INTERNAL://127.0.0.1:9093,CLIENT://127.0.0.1:9092",
        "listener.security.protocol.map": "INTERNAL:SASL_PLAINTEXT,CLIENT:PLAINTEXT",
        "inter.broker.listener.name": "INTERNAL",
        "sasl.enabled.mechanisms": "PLAIN",
        "sasl.mechanism.inter.broker.protocol": "PLAIN",
    }
    # The listener's own JAAS line wins over sasl.jaas.config.
    config = BrokerConfig.from_properties(
        {
            **base,
            "listener.name.internal.plain.sasl.jaas.config": JAAS,
            "sasl.jaas.config": JAAS.replace("alice", "bob"),
        }
    )
    security = inter_broker_security(config)
    assert (security.mechanism, security.username) == ("PLAIN", "alice")
    assert inter_broker_security(BrokerConfig.from_properties({**base, "sasl.jaas.config": JAAS})).username == "alice"
    with pytest.raises(ValueError, match='listener.name.internal.plain.sasl.jaas.config needs username="..."'):
        inter_broker_security(BrokerConfig.from_properties(base))
