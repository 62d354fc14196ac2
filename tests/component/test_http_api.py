"""The HTTP API against an in-process broker (real storage, FastAPI's test client)."""

from __future__ import annotations

import asyncio
import base64
import time

import httpx
import orjson
import pytest
from fastapi.testclient import TestClient

from ingest_gateway.server.broker import Broker
from loglake.partitioner import partition_for_key

JSON_V2 = "application/vnd.kafka.json.v2+json"
BINARY_V2 = "application/vnd.kafka.binary.v2+json"


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def create(client: TestClient, name: str, partitions: int = 1, **configs: str) -> None:
    r = client.post("/topics", json={"name": name, "partitions": partitions, "configs": configs})
    assert r.status_code == 201, r.text


def produce_json(client: TestClient, topic: str, records: list[dict], **params) -> httpx.Response:
    return client.post(f"/topics/{topic}", json={"records": records}, headers={"content-type": JSON_V2}, params=params)


def fetch(client: TestClient, topic: str, partition: int, offset: int, fmt: str = BINARY_V2, **params) -> list[dict]:
    r = client.get(
        f"/topics/{topic}/partitions/{partition}/records", params={"offset": offset, **params}, headers={"accept": fmt}
    )
    assert r.status_code == 200, r.text
    return r.json()


def end_offset(client: TestClient, topic: str, partition: int) -> int:
    return client.get(f"/topics/{topic}/partitions/{partition}/offsets").json()["end_offset"]


def test_healthz_and_openapi(client: TestClient) -> None:
    assert client.get("/healthz").json()["status"] == "ok"
    spec = client.get("/openapi.json").json()
    assert "/topics/{topic}" in spec["paths"]
    assert client.get("/docs").status_code == 200


def test_create_describe_list(client: TestClient) -> None:
    create(client, "events", 3, **{"retention.ms": "60000"})
    assert client.get("/topics").json() == ["events"]
    t = client.get("/topics/events").json()
    assert t["partitions_count"] == 3
    assert t["configs"] == {"retention.ms": "60000"}
    assert [p["leader"] for p in t["partitions"]] == [0, 0, 0]
    assert t["partitions"][1]["replicas"] == [{"broker": 0, "leader": True, "in_sync": True}]


def test_json_produce_uses_the_java_partitioner_and_reads_back(client: TestClient) -> None:
    create(client, "events", 3)
    records = [{"key": f"user-{i}", "value": {"n": i, "tags": ["a", "b"]}} for i in range(50)]
    r = produce_json(client, "events", records)
    assert r.status_code == 200, r.text
    offsets = r.json()["offsets"]
    assert len(offsets) == 50
    for rec, o in zip(records, offsets):
        assert o["partition"] == partition_for_key(orjson.dumps(rec["key"]), 3)
        assert o["error_code"] is None
    seen = {}
    for p in range(3):
        for rec in fetch(client, "events", p, 0, JSON_V2):
            seen[rec["value"]["n"]] = (rec["partition"], rec["offset"], rec["key"])
    assert sorted(seen) == list(range(50))
    for i, o in enumerate(offsets):
        assert seen[i] == (o["partition"], o["offset"], f"user-{i}")


def test_binary_produce_with_headers_and_null_values(client: TestClient) -> None:
    create(client, "bin", 1)
    records = [
        {"key": b64(b"\x00k"), "value": b64(b"\xffvalue"), "headers": [{"key": "h1", "value": b64(b"x")}]},
        {"key": None, "value": None},
        {"value": b64(b""), "headers": [{"key": "n", "value": None}]},
    ]
    r = client.post("/topics/bin", json={"records": records}, headers={"content-type": BINARY_V2})
    assert r.status_code == 200, r.text
    assert [o["offset"] for o in r.json()["offsets"]] == [0, 1, 2]
    got = fetch(client, "bin", 0, 0)
    assert [(g["key"], g["value"], g["headers"]) for g in got] == [
        (b64(b"\x00k"), b64(b"\xffvalue"), [{"key": "h1", "value": b64(b"x")}]),
        (None, None, []),
        (None, "", [{"key": "n", "value": None}]),
    ]
    assert all(g["timestamp"] > 0 for g in got)


def test_null_keys_stick_to_one_partition_per_request(client: TestClient) -> None:
    create(client, "sticky", 4)
    r = produce_json(client, "sticky", [{"value": i} for i in range(20)])
    assert len({o["partition"] for o in r.json()["offsets"]}) == 1


def test_explicit_partition_and_fetch_from_middle(client: TestClient) -> None:
    create(client, "p", 2)
    r = client.post(
        "/topics/p/partitions/1", json={"records": [{"value": i} for i in range(10)]}, headers={"content-type": JSON_V2}
    )
    assert {o["partition"] for o in r.json()["offsets"]} == {1}
    produce_json(client, "p", [{"value": 99, "partition": 0}])
    assert [g["value"] for g in fetch(client, "p", 1, 7, JSON_V2)] == [7, 8, 9]
    assert [g["value"] for g in fetch(client, "p", 0, 0, JSON_V2)] == [99]
    assert fetch(client, "p", 1, 10) == []
    assert [g["value"] for g in fetch(client, "p", 1, 2, JSON_V2, max_records=3)] == [2, 3, 4]


def test_many_segments_read_back_in_order(client: TestClient) -> None:
    create(client, "seg", 1, **{"segment.bytes": "20000", "index.interval.bytes": "512"})
    for batch in range(20):
        produce_json(client, "seg", [{"value": {"i": batch * 50 + j, "pad": "x" * 40}} for j in range(50)])
    out, offset = [], 0
    while True:
        got = fetch(client, "seg", 0, offset, JSON_V2, max_bytes=7000)
        if not got:
            break
        out += [g["value"]["i"] for g in got]
        offset = got[-1]["offset"] + 1
    assert out == list(range(1000))


def test_offsets_by_timestamp(client: TestClient) -> None:
    create(client, "ts", 1)
    produce_json(client, "ts", [{"value": 1, "timestamp": 1000}, {"value": 2, "timestamp": 2000}])
    produce_json(client, "ts", [{"value": 3, "timestamp": 3000}])
    base = "/topics/ts/partitions/0/offsets"
    assert client.get(base).json() == {"beginning_offset": 0, "end_offset": 3, "log_end_offset": 3}
    assert client.get(base, params={"timestamp": 1500}).json() == {"offset": 1, "timestamp": 2000}
    assert client.get(base, params={"timestamp": 3000}).json() == {"offset": 2, "timestamp": 3000}
    assert client.get(base, params={"timestamp": 5000}).json() == {"offset": None, "timestamp": None}


def test_alter_and_delete_topic(client: TestClient) -> None:
    create(client, "a", 1)
    r = client.patch("/topics/a", json={"partitions": 3, "configs": {"cleanup.policy": "compact"}})
    assert r.status_code == 200, r.text
    assert r.json()["partitions_count"] == 3
    assert r.json()["configs"] == {"cleanup.policy": "compact"}
    produce_json(client, "a", [{"value": 1, "partition": 2}])
    assert client.patch("/topics/a", json={"partitions": 2}).status_code == 422
    assert client.delete("/topics/a").status_code == 204
    assert client.get("/topics/a").status_code == 404
    create(client, "a", 1)
    assert end_offset(client, "a", 0) == 0


@pytest.mark.parametrize(
    "call, status, kafka_error",
    [
        (lambda c: produce_json(c, "nope", [{"value": 1}]), 404, "UNKNOWN_TOPIC_OR_PARTITION"),
        (lambda c: produce_json(c, "t", [{"value": 1, "partition": 5}]), 404, "UNKNOWN_TOPIC_OR_PARTITION"),
        (lambda c: c.post("/topics/t", content=b"{not json", headers={"content-type": JSON_V2}), 400, None),
        (lambda c: c.post("/topics/t", json={"recs": []}, headers={"content-type": JSON_V2}), 422, None),
        (
            lambda c: c.post("/topics/t", json={"records": [{"value": "%%%"}]}, headers={"content-type": BINARY_V2}),
            422,
            None,
        ),
        (
            lambda c: c.post("/topics/t", json={"records": [{"value": 1}]}, headers={"content-type": "text/plain"}),
            415,
            None,
        ),
        (lambda c: produce_json(c, "t", [{"value": "x" * 2_000_000}]), 413, "MESSAGE_TOO_LARGE"),
        (lambda c: produce_json(c, "t", [{"value": 1}], acks="2"), 422, None),
        (lambda c: c.get("/topics/t/partitions/0/records", params={"offset": 99}), 416, "OFFSET_OUT_OF_RANGE"),
        (lambda c: c.get("/topics/t/partitions/9/records", params={"offset": 0}), 404, "UNKNOWN_TOPIC_OR_PARTITION"),
        (lambda c: c.get("/topics/t/partitions/0/records", params={"max_records": 0}), 422, None),
        (lambda c: c.post("/topics", json={"name": "bad name!"}), 422, "INVALID_TOPIC_EXCEPTION"),
        (lambda c: c.post("/topics", json={"name": "t"}), 409, "TOPIC_ALREADY_EXISTS"),
        (lambda c: c.post("/topics", json={"name": "u", "configs": {"segment.bytes": "big"}}), 422, "INVALID_CONFIG"),
    ],
)
def test_bad_input_is_a_clear_4xx_and_stored_data_survives(client: TestClient, call, status, kafka_error) -> None:
    create(client, "t", 1)
    produce_json(client, "t", [{"value": "kept"}])
    r = call(client)
    assert r.status_code == status, r.text
    body = r.json()
    assert body["message"]
    assert body["error_code"] // 100 == status
    if kafka_error:
        assert body["kafka_error"] == kafka_error
    assert [g["value"] for g in fetch(client, "t", 0, 0, JSON_V2)] == ["kept"]
    assert client.get("/healthz").status_code == 200


def test_non_json_value_asked_as_json_is_406(client: TestClient) -> None:
    create(client, "raw", 1)
    client.post("/topics/raw", json={"records": [{"value": b64(b"\xff\xfe")}]}, headers={"content-type": BINARY_V2})
    r = client.get("/topics/raw/partitions/0/records", params={"offset": 0}, headers={"accept": JSON_V2})
    assert r.status_code == 406
    assert "binary" in r.json()["message"]


def test_acks_zero_answers_202_and_still_appends(client: TestClient) -> None:
    create(client, "z", 1)
    r = produce_json(client, "z", [{"value": 1}], acks="0")
    assert r.status_code == 202
    deadline = time.monotonic() + 5
    while end_offset(client, "z", 0) < 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert end_offset(client, "z", 0) == 1


def test_fetch_long_polls_until_data_arrives(broker: Broker) -> None:
    async def scenario() -> tuple[list, float, list, float]:
        transport = httpx.ASGITransport(app=broker.create_http_app())
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as c:
            await c.post("/topics", json={"name": "lp", "partitions": 1})
            loop = asyncio.get_running_loop()

            t0 = loop.time()
            empty = (await c.get("/topics/lp/partitions/0/records", params={"offset": 0, "timeout_ms": 300})).json()
            waited_empty = loop.time() - t0

            async def produce_later() -> None:
                await asyncio.sleep(0.2)
                await c.post("/topics/lp", json={"records": [{"value": "late"}]}, headers={"content-type": JSON_V2})

            t1 = loop.time()
            task = asyncio.create_task(produce_later())
            got = (
                await c.get(
                    "/topics/lp/partitions/0/records",
                    params={"offset": 0, "timeout_ms": 10000},
                    headers={"accept": JSON_V2},
                )
            ).json()
            await task
            return empty, waited_empty, got, loop.time() - t1

    empty, waited_empty, got, waited = asyncio.run(scenario())
    assert empty == [] and waited_empty >= 0.25
    assert [g["value"] for g in got] == ["late"]
    assert 0.15 <= waited < 5


@pytest.mark.parametrize(
    "method, path, allow",
    [
        ("PUT", "/topics/t", "GET"),
        ("PUT", "/topics/t/partitions/0", "GET"),
        ("POST", "/topics/t/partitions/0/records", "GET"),
        ("GET", "/topics/t/partitions/0/tiered-offset", "POST"),
    ],
)
def test_a_method_a_path_does_not_serve_is_405(client: TestClient, method: str, path: str, allow: str) -> None:
    """Routes are matched in the order their routers are included (the produce routes near
    the front): a wrong method meets the same route first whatever that order."""
    r = client.request(method, path)
    assert r.status_code == 405, r.text
    assert r.headers["allow"] == allow


@pytest.mark.parametrize("content_type", [BINARY_V2, JSON_V2])
def test_a_request_over_max_message_bytes_is_split_into_batches_that_fit(client: TestClient, content_type) -> None:
    """Both produce paths (binary keys and values take the native one) store every record,
    in order, in batches within the topic's max.message.bytes."""
    create(client, "split", 1, **{"max.message.bytes": "3000"})
    values = [bytes([i]) * 200 for i in range(40)]
    if content_type == BINARY_V2:
        records = [{"key": b64(b"k"), "value": b64(v)} for v in values]
    else:
        records = [{"key": "k", "value": v.hex()} for v in values]
    r = client.post("/topics/split", json={"records": records}, headers={"content-type": content_type})
    assert r.status_code == 200, r.text
    assert [o["offset"] for o in r.json()["offsets"]] == list(range(40))
    got = fetch(client, "split", 0, 0)
    expected = values if content_type == BINARY_V2 else [orjson.dumps(v.hex()) for v in values]
    assert [base64.b64decode(g["value"]) for g in got] == expected
    assert client.get("/topics/split/partitions/0/offsets").json()["end_offset"] == 40


def test_binary_records_without_keys_stick_to_one_partition_and_a_compacted_topic_refuses_them(
    client: TestClient,
) -> None:
    create(client, "nokeys", 4)
    records = [{"value": b64(b"v%d" % i)} for i in range(20)]
    r = client.post("/topics/nokeys", json={"records": records}, headers={"content-type": BINARY_V2})
    assert r.status_code == 200, r.text
    offsets = r.json()["offsets"]
    (partition,) = {o["partition"] for o in offsets}
    assert [o["offset"] for o in offsets] == list(range(20))
    got = fetch(client, "nokeys", partition, 0)
    assert [(g["key"], base64.b64decode(g["value"])) for g in got] == [(None, b"v%d" % i) for i in range(20)]
    create(client, "compacted", 1, **{"cleanup.policy": "compact"})
    r = client.post("/topics/compacted", json={"records": records}, headers={"content-type": BINARY_V2})
    assert r.status_code == 422, r.text
    assert r.json()["kafka_error"] == "INVALID_RECORD" and "without key" in r.json()["message"]
    assert end_offset(client, "compacted", 0) == 0
