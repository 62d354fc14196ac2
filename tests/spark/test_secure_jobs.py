"""The jobs of jobs/ against a secured broker: Kafka only over SASL_SSL for them, and the HTTP
API over https with Basic authentication and required client certificates. The security
options, named as Spark's Kafka source names them (`--option kafka.security.protocol=...`,
the JAAS password in an `--options-file`), reach every connection a job makes: the loglake
source and sink, its group commits and metadata requests, and its calls of the brokers'
HTTP API (compaction plans)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from confluent_kafka import Producer
from test_group_commits import committed

from bench.pki import Pki, make_pki
from clients.client_helpers import add_users, create_topic, produce_keyed, read_all, sasl_ssl_broker, serve, unique_name
from harness.process import BrokerProcess, free_port
from jobs import compact, consume_group
from loglake.spark.job_cluster import ClusterAccess
from source_helpers import produce

JAAS = 'org.apache.kafka.common.security.scram.ScramLoginModule required username="job" password="job-secret";'
SPARK_COMPACTED = {"cleanup.policy": "compact", "loglake.compaction.executor": "spark", "segment.bytes": "8192"}


@dataclass(frozen=True)
class Secure:
    broker: BrokerProcess  # its PLAINTEXT listener is for the tests' own setup and checks
    sasl_ssl: str  # the bootstrap servers the jobs get
    https: str
    pki: Pki
    options: list[str]  # the jobs' security arguments


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secure]:
    pki = make_pki(tmp_path_factory.mktemp("pki"))
    https_port = free_port()
    process, address = sasl_ssl_broker(tmp_path_factory.mktemp("secure-jobs") / "logs", pki)
    process.start()  # the job's user first, then HTTP authentication
    add_users(process, {"job": "job-secret"})
    assert process.stop() == 0
    process.overrides.update(
        {
            # The first HTTP listener is the one the jobs find (DescribeConfigs http.listeners);
            # the plain one answers the tests' readiness probe (GET /healthz) only.
            "http.listeners": f"https://127.0.0.1:{https_port}," + process.overrides["http.listeners"],
            "http.authentication.method": "BASIC",
            "listener.name.https.ssl.client.auth": "required",
        }
    )
    options_file = tmp_path_factory.mktemp("job") / "job.properties"
    options_file.write_text(f"# the job's secret\nkafka.sasl.jaas.config={JAAS}\n")
    options = [
        *("--option", "kafka.security.protocol=SASL_SSL"),
        *("--option", "kafka.sasl.mechanism=SCRAM-SHA-512"),
        *("--option", f"kafka.ssl.truststore.location={pki.ca}"),
        *("--option", f"kafka.ssl.keystore.location={pki.client}"),  # the HTTP API's client certificate
        *("--options-file", str(options_file)),
    ]
    for broker in serve(process):
        yield Secure(broker, address, f"https://127.0.0.1:{https_port}", pki, options)


def test_consume_group_reads_writes_and_commits_over_sasl_ssl(loglake_spark, secure: Secure) -> None:
    plain = secure.broker.bootstrap
    source, target, group = unique_name("secure-src"), unique_name("secure-dst"), unique_name("secure-cg")
    create_topic(plain, source, partitions=2)
    create_topic(plain, target, partitions=2)  # the output keeps each record's partition
    produce(secure.broker, source, [{"value": b"v%d" % i, "partition": i % 2} for i in range(30)])
    argv = ["--bootstrap-servers", secure.sasl_ssl, "--group", group, "--topics", source, "--topic", target]

    made = consume_group.run(loglake_spark, consume_group.parse_args([*argv, *secure.options]))

    assert made is not None and made.run_id == 1
    assert sorted(v for _, _, _, v in read_all(plain, target, partitions=2)) == sorted(b"v%d" % i for i in range(30))
    assert committed(secure.broker, group, source, 2) == {0: 15, 1: 15}


def test_compact_plans_and_posts_over_https_with_basic_and_a_client_certificate(loglake_spark, secure: Secure) -> None:
    plain = secure.broker.bootstrap
    topic = unique_name("secure-compact")
    create_topic(plain, topic, partitions=1, config=SPARK_COMPACTED)
    rows = [(b"key-%02d" % k, b"value-%d-%02d" % (r, k) * 8) for r in range(4) for k in range(40)]
    producer = Producer({"bootstrap.servers": plain, "acks": "all", "linger.ms": 5, "batch.size": 4000})
    produced = produce_keyed(plain, topic, rows, producer)
    end = produce_keyed(plain, topic, [(b"filler", bytes(200)) for _ in range(60)], producer)[0][0]

    answers = compact.run(
        loglake_spark, compact.parse_args(["--bootstrap-servers", secure.sasl_ssl, "--topics", topic, *secure.options])
    )

    assert [a["broker_id"] for a in answers] == [0] and answers[0]["cleaned_up_to"] >= end
    latest = {key: (offset, value) for offset, key, value in produced}
    cleaned = [(o, k, v) for _, o, k, v in read_all(plain, topic) if o < end]
    assert cleaned == sorted((offset, key, value) for key, (offset, value) in latest.items())


def test_basic_credentials_travel_over_plain_http_only_without_tls(secure: Secure) -> None:
    args = consume_group.parse_args(["--bootstrap-servers", secure.sasl_ssl, "--group", "g", "--topics", "t",
                                     "--parquet", "p", *secure.options])  # fmt: skip
    with args.cluster.http_client() as http:
        assert http.get(f"{secure.https}/users").status_code == 200  # Basic + the client certificate
        assert http.get(f"{secure.broker.http_url}/users").status_code == 401  # not sent in the clear
    sasl_plaintext = dict(args.cluster.security) | {"security.protocol": "SASL_PLAINTEXT"}
    with ClusterAccess(secure.sasl_ssl, tuple(sasl_plaintext.items())).http_client() as http:
        assert http.get(f"{secure.broker.http_url}/users").status_code == 200  # no TLS anywhere: sent


def test_option_mistakes_stop_the_job_before_it_connects(tmp_path: Path, capsys) -> None:
    base = ["--bootstrap-servers", "b:9093", "--topics", "t"]
    for wrong, message in (
        (["--option", "kafka.request.timeout.ms=5"], "kafka.request.timeout.ms: the jobs take the options"),
        (["--option", "kafka.security.protocol"], "expected key=value"),
        (["--options-file", str(tmp_path / "missing.properties")], "missing.properties"),
        (
            ["--option", "kafka.security.protocol=SASL_SSL", "--option", "kafka.sasl.mechanism=PLAIN"],
            "sasl.jaas.config",
        ),
    ):
        with pytest.raises(SystemExit) as refused:
            compact.parse_args([*base, *wrong])
        assert refused.value.code == 2 and message in capsys.readouterr().err


def test_a_wrong_password_fails_the_job_with_the_brokers_answer(loglake_spark, secure: Secure, tmp_path) -> None:
    wrong = tmp_path / "wrong.properties"
    wrong.write_text(f"kafka.sasl.jaas.config={JAAS.replace('job-secret', 'nope')}\n")
    args = compact.parse_args(
        ["--bootstrap-servers", secure.sasl_ssl, "--topics", "t", *secure.options, "--options-file", str(wrong)]
    )
    with pytest.raises(Exception, match="[Aa]uthentication failed"):
        compact.run(loglake_spark, args)
    assert httpx.get(f"{secure.broker.http_url}/healthz").status_code == 200  # the broker serves on
