"""The web console (/ui) against an in-process broker: pages, changes with confirmation, the
message browser, groups and their lag, metrics charts, and bad input answered with an HTML
error page that changes nothing."""

from __future__ import annotations

import base64
import re
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from console_helpers import error_message, table_cells
from ingest_gateway.server.broker import Broker
from ingest_gateway.http.console.render import LagHistory, TrafficHistory, render_bytes, traffic_sample
from loglake.config import BrokerConfig

BINARY_V2 = "application/vnd.kafka.binary.v2+json"


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def create(client: TestClient, name: str, partitions: int = 1) -> None:
    r = client.post("/topics", json={"name": name, "partitions": partitions})
    assert r.status_code == 201, r.text


def produce(client: TestClient, topic: str, records: list[dict], partition: int = 0) -> None:
    r = client.post(
        f"/topics/{topic}/partitions/{partition}", json={"records": records}, headers={"content-type": BINARY_V2}
    )
    assert r.status_code == 200, r.text


def test_overview_shows_brokers_controller_and_health(client: TestClient) -> None:
    create(client, "overview")
    r = client.get("/ui")
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/html")
    assert table_cells(r.text, "brokers")[0][0] == "0"
    assert "alive" in table_cells(r.text, "brokers")[0]
    assert re.search(r'id="controller">broker 0<', r.text)
    assert "All partitions are fully replicated" in r.text
    assert client.get("/ui/static/htmx.min.js").status_code == 200
    assert client.get("/ui/static/console.css").status_code == 200


def test_create_topic_asks_for_confirmation_first(client: TestClient) -> None:
    form = {"name": "made", "partitions": "3", "replication_factor": "1", "configs": "retention.ms=60000"}
    r = client.post("/ui/topics", data=form)
    assert r.status_code == 200 and "Create topic made?" in r.text
    assert "made" not in client.get("/topics").json()
    r = client.post("/ui/topics", data={**form, "confirm": "yes"}, follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/ui/topics/made"
    described = client.get("/topics/made").json()
    assert described["partitions_count"] == 3 and described["configs"] == {"retention.ms": "60000"}
    assert [row[0] for row in table_cells(client.get("/ui/topics").text, "topics")] == ["made"]


@pytest.mark.parametrize(
    ("form", "status", "message"),
    [
        ({"name": "bad", "partitions": "abc", "replication_factor": "1"}, 422, "partitions must be an integer"),
        ({"name": "bad", "partitions": "0", "replication_factor": "1"}, 422, "partitions must be at least 1"),
        ({"name": "bad", "partitions": "1", "replication_factor": "x"}, 422, "replication factor must be an integer"),
        ({"name": "bad", "partitions": "1", "replication_factor": "3"}, 422, "INVALID_REPLICATION_FACTOR"),
        ({"name": "bad", "partitions": "1", "configs": "no.such.config=1"}, 422, "Unknown topic config name"),
        ({"name": "bad", "partitions": "1", "configs": "retention.ms=soon"}, 422, "retention.ms"),
        ({"name": "bad", "partitions": "1", "configs": "novalue"}, 422, "expected key=value"),
        ({"name": "", "partitions": "1"}, 422, "a topic name is required"),
        ({"name": "no/slash", "partitions": "1"}, 422, "INVALID_TOPIC_EXCEPTION"),
    ],
)
def test_bad_create_forms_change_nothing(client: TestClient, form: dict, status: int, message: str) -> None:
    form = {"replication_factor": "1", **form, "confirm": "yes"}
    r = client.post("/ui/topics", data=form)
    assert r.status_code == status
    assert message in error_message(r.text)
    assert "Traceback" not in r.text
    assert client.get("/topics").json() == []


def test_unknown_topic_and_group_are_404_pages(client: TestClient) -> None:
    for path in ("/ui/topics/nope", "/ui/topics/nope/messages", "/ui/groups/nope", "/ui/static/nope.js"):
        r = client.get(path)
        assert r.status_code == 404, path
        assert r.headers["content-type"].startswith("text/html")
        assert "nope" in error_message(r.text)
    for action, form in (("delete", {}), ("config", {"name": "retention.ms", "value": "1"})):
        r = client.post(f"/ui/topics/nope/{action}", data={**form, "confirm": "yes"})
        assert r.status_code == 404 and "nope" in error_message(r.text)
    assert client.get("/topics").json() == []


def test_topic_page_partitions_offsets_and_configs(client: TestClient) -> None:
    create(client, "described", 2)
    produce(client, "described", [{"value": b64(b"x" * 10)}] * 5, partition=1)
    r = client.get("/ui/topics/described")
    assert r.status_code == 200
    rows = table_cells(r.text, "partitions")
    # partition, leader, replicas, ISR, log start, high watermark, log end, size, status
    assert [row[:7] for row in rows] == [["0", "0", "0", "0", "0", "0", "0"], ["1", "0", "0", "0", "0", "5", "5"]]
    assert int(rows[1][7]) > 50 and rows[1][8] == "ok"
    assert table_cells(r.text, "configs") == [["None: the broker defaults apply."]]


def test_alter_config_and_delete_with_confirmation(client: TestClient) -> None:
    create(client, "altered")
    r = client.post("/ui/topics/altered/config", data={"name": "retention.ms", "value": "1234"})
    assert r.status_code == 200 and "Change retention.ms of topic altered?" in r.text
    assert client.get("/topics/altered").json()["configs"] == {}
    r = client.post("/ui/topics/altered/config", data={"name": "retention.ms", "value": "1234", "confirm": "yes"})
    assert r.status_code == 200  # the redirect to the topic page, followed
    assert table_cells(r.text, "configs") == [["retention.ms", "1234"]]
    for bad, message in (
        ({"name": "bogus.config", "value": "1"}, "Unknown topic config name"),
        ({"name": "retention.ms", "value": "abc"}, "retention.ms"),
        ({"name": "", "value": "1"}, "a config name is required"),
    ):
        r = client.post("/ui/topics/altered/config", data={**bad, "confirm": "yes"})
        assert r.status_code == 422 and message in error_message(r.text)
    assert client.get("/topics/altered").json()["configs"] == {"retention.ms": "1234"}
    # An empty value removes the override.
    client.post("/ui/topics/altered/config", data={"name": "retention.ms", "value": "", "confirm": "yes"})
    assert client.get("/topics/altered").json()["configs"] == {}

    r = client.post("/ui/topics/altered/delete", data={})
    assert r.status_code == 200 and "Delete topic altered?" in r.text
    assert client.get("/topics").json() == ["altered"]
    r = client.post("/ui/topics/altered/delete", data={"confirm": "yes"}, follow_redirects=False)
    assert r.status_code == 303
    assert client.get("/topics").json() == []


def test_message_browser_renders_json_text_and_hex(client: TestClient) -> None:
    create(client, "shown")
    produce(
        client,
        "shown",
        [
            {"key": b64(b'{"id": 7}'), "value": b64(b'{"a": [1, 2]}'), "headers": [{"key": "h", "value": b64(b"v1")}]},
            {"key": b64(b"plain"), "value": b64(b"hello world")},
            {"key": None, "value": b64(b"\x00\x01\xfe")},
        ],
    )
    r = client.get("/ui/topics/shown/messages", params={"partition": "0", "offset": "0"})
    assert r.status_code == 200
    rows = table_cells(r.text, "records")
    assert [row[0] for row in rows] == ["0", "1", "2"]
    assert rows[0][2] == 'json{\n  "id": 7\n}'
    assert '"a": [' in rows[0][3] and rows[0][4] == "h: textv1"
    assert rows[1][2:4] == ["textplain", "texthello world"]
    assert rows[2][2:4] == ["nullnull", "hex00 01 fe"]
    hexed = table_cells(client.get("/ui/topics/shown/messages?offset=1&render=hex").text, "records")
    assert hexed[0][2] == "hex" + b"plain".hex(" ")


def test_message_browser_pages_and_times(client: TestClient) -> None:
    create(client, "paged")
    produce(client, "paged", [{"value": b64(str(i).encode()), "timestamp": 1_000_000 + i} for i in range(120)])
    # No offset: the last page.
    last = table_cells(client.get("/ui/topics/paged/messages").text, "records")
    assert [int(r[0]) for r in last] == list(range(70, 120))
    page = client.get("/ui/topics/paged/messages?offset=10").text
    assert [int(r[0]) for r in table_cells(page, "records")] == list(range(10, 60))
    assert 'id="next" href="?partition=0&amp;offset=60' in page
    assert 'id="previous" href="?partition=0&amp;offset=0' in page
    # By time: the first record at or after it (epoch ms or a UTC datetime).
    by_time = table_cells(client.get("/ui/topics/paged/messages?time=1000100").text, "records")
    assert int(by_time[0][0]) == 100 and len(by_time) == 20
    assert table_cells(client.get("/ui/topics/paged/messages?time=1970-01-01T00:16:40").text, "records")[0][0] == "0"
    late = client.get("/ui/topics/paged/messages?time=2100-01-01T00:00").text
    assert "no record at or after" in late and table_cells(late, "records") == [["No records here."]]


@pytest.mark.parametrize(
    ("query", "status", "message"),
    [
        ("offset=121", 416, "offset 121 is out of range"),
        ("offset=-1", 416, "out of range"),
        ("offset=abc", 422, "offset must be an integer"),
        ("partition=5", 404, "has no partition 5"),
        ("partition=x", 422, "partition must be an integer"),
        ("time=yesterday", 422, "time must be like"),
        ("render=braille", 422, "render must be one of"),
    ],
)
def test_message_browser_bad_input(client: TestClient, query: str, status: int, message: str) -> None:
    create(client, "browsed")
    produce(client, "browsed", [{"value": b64(b"x")}] * 3)
    r = client.get(f"/ui/topics/browsed/messages?{query}")
    assert r.status_code == status
    assert message in error_message(r.text)


def test_group_page_lag_equals_the_groups_api(client: TestClient) -> None:
    create(client, "lagging", 2)
    produce(client, "lagging", [{"value": b64(b"x")}] * 7, partition=0)
    produce(client, "lagging", [{"value": b64(b"y")}] * 4, partition=1)
    # The first use of a group creates __consumer_offsets: its coordinator loads for a moment.
    deadline = time.monotonic() + 10
    while True:
        r = client.post("/groups/watchers/reset-offsets", json={"topic": "lagging", "to": "offset", "offset": 2})
        if r.status_code != 503 or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert r.status_code == 200, r.text
    groups = table_cells(client.get("/ui/groups").text, "groups")
    assert groups == [["watchers", "Empty", "-", "0"]]  # offsets only: no protocol type yet
    described = client.get("/groups/watchers").json()  # what `loglake groups describe` prints
    html = client.get("/ui/groups/watchers").text
    shown = [(row[0], int(row[1]), int(row[2]), int(row[3]), int(row[4])) for row in table_cells(html, "offsets")]
    expected = [
        (o["topic"], o["partition"], o["committed_offset"], o["log_end_offset"], o["lag"]) for o in described["offsets"]
    ]
    assert shown == expected == [("lagging", 0, 2, 7, 5), ("lagging", 1, 2, 4, 2)]
    assert 'id="total-lag">7<' in html
    fragment = client.get("/ui/groups/watchers/lag").text
    assert "<polyline" in fragment and "<html" not in fragment


def test_metrics_charts(broker: Broker, client: TestClient) -> None:
    page = client.get("/ui/metrics").text
    assert 'hx-get="/ui/metrics/charts"' in page
    first = client.get("/ui/metrics/charts").text
    assert first.count("<svg") == 2 and "collecting samples" in first
    create(client, "counted")
    produce(client, "counted", [{"value": b64(b"x" * 100)}])
    client.get("/topics/counted/partitions/0/records", params={"offset": 0})
    sample = traffic_sample(broker.metrics.exposition(), 0.0)
    assert sample.bytes_in > 100 and sample.bytes_out > 100


@pytest.fixture
def client_with(tmp_path: Path) -> Iterator[Callable[..., TestClient]]:
    """A client of a broker with these broker configs."""
    brokers: list[Broker] = []
    with ExitStack() as clients:

        def make(**props: str) -> TestClient:
            config = BrokerConfig.from_properties({"log.dirs": str(tmp_path / f"logs-{len(brokers)}"), **props})
            brokers.append(Broker(config))
            brokers[-1].startup()
            return clients.enter_context(TestClient(brokers[-1].create_http_app()))

        yield make
    for broker in brokers:
        broker.shutdown()


def test_metrics_disabled_is_said(client_with: Callable[..., TestClient]) -> None:
    client = client_with(**{"metrics.enabled": "false"})
    assert "metrics.enabled=false" in client.get("/ui/metrics").text
    r = client.get("/ui/metrics/charts")
    assert r.status_code == 404 and "metrics.enabled=false" in error_message(r.text)


def test_deletion_disabled_is_403(client_with: Callable[..., TestClient]) -> None:
    client = client_with(**{"delete.topic.enable": "false"})
    create(client, "kept")
    r = client.post("/ui/topics/kept/delete", data={"confirm": "yes"})
    assert r.status_code == 403 and "delete.topic.enable=false" in error_message(r.text)
    assert client.get("/topics").json() == ["kept"]


def test_render_bytes() -> None:
    assert render_bytes(b'{"b":1}', "auto").text == '{\n  "b": 1\n}'
    assert render_bytes(b'{"b":1}', "text").text == '{"b":1}'
    assert render_bytes(b"line\nnext", "auto").kind == "text"
    assert render_bytes(b"\x1b[0m", "auto").kind == "hex"
    assert render_bytes(b"\xff", "text").kind == "hex"
    assert render_bytes(b"not json", "json").kind == "text"
    assert render_bytes(None, "hex").kind == "null"


def test_traffic_and_lag_histories() -> None:
    exposition = (
        "# TYPE kafka_server_broker_topic_bytes_in counter\n"
        'kafka_server_broker_topic_bytes_in_total{{topic="a"}} {bytes_in}\n'
        "# TYPE kafka_server_broker_topic_bytes_out counter\n"
        'kafka_server_broker_topic_bytes_out_total{{topic="a"}} 0\n'
        "# TYPE kafka_network_request_total_time_seconds histogram\n"
        'kafka_network_request_total_time_seconds_bucket{{request="Produce",le="+Inf"}} {count}\n'
        'kafka_network_request_total_time_seconds_count{{request="Produce"}} {count}\n'
        'kafka_network_request_total_time_seconds_sum{{request="Produce"}} {total}\n'
    )
    history = TrafficHistory()
    history.add(exposition.format(bytes_in=0, count=0, total=0).encode(), now=100.0)
    history.add(exposition.format(bytes_in=5, count=0, total=0).encode(), now=100.5)  # too soon: skipped
    history.add(exposition.format(bytes_in=1000, count=4, total=0.02).encode(), now=102.0)
    assert "collecting samples" in history.charts()[0]  # one rate is no line yet
    history.add(exposition.format(bytes_in=1000, count=5, total=0.03).encode(), now=104.0)
    assert len(history.samples) == 3
    bytes_chart, latency_chart = history.charts()
    # 1000 bytes in the first 2 s: the top of the y axis is 500/s.
    assert "<polyline" in bytes_chart and 'text-anchor="end">500<' in bytes_chart
    # 20 ms over 4 requests, then 10 ms over 1.
    assert 'text-anchor="end">10<' in latency_chart
    lags = LagHistory()
    for i in range(70):
        lags.add(f"g{i}", i, now=float(i))
    assert len(lags.groups) == 64 and "g0" not in lags.groups
    assert lags.add("g69", 3, now=99.0) == [(69.0, 69.0), (99.0, 3.0)]
