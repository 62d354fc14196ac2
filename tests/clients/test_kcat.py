"""kcat (librdkafka) against the broker: metadata, produce with keys, headers and every
codec, consume from beginning / an offset / the end, and a balanced consumer group."""

from __future__ import annotations

import subprocess
import time

import pytest

from client_helpers import KCAT, create_topic, kcat, read_all

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


def test_metadata_lists_broker_and_topics(broker, topic):
    create_topic(broker.bootstrap, topic, partitions=3)
    out = kcat(broker.bootstrap, "-L").stdout.decode()
    assert f"broker 0 at {broker.bootstrap}" in out
    assert f'topic "{topic}" with 3 partitions:' in out
    for p in range(3):
        assert f"partition {p}, leader 0, replicas: 0, isrs: 0" in out

    # -L -t: one topic; -J: the same as JSON.
    import json

    doc = json.loads(kcat(broker.bootstrap, "-L", "-J", "-t", topic).stdout)
    assert [b["id"] for b in doc["brokers"]] == [0]
    (t,) = doc["topics"]
    assert t["topic"] == topic
    assert sorted(p["partition"] for p in t["partitions"]) == [0, 1, 2]
    assert all(p["leader"] == 0 and p["isrs"] == [{"id": 0}] for p in t["partitions"])


@pytest.mark.parametrize("codec", CODECS)
def test_produce_keys_headers_codec_and_consume_formats(broker, topic, codec):
    lines = [f"key{i}:value-{codec}-{i}" for i in range(50)]
    kcat(
        broker.bootstrap,
        "-P",
        "-t",
        topic,
        "-p",
        "0",
        "-K:",
        "-H",
        "h1=v1",
        "-H",
        "h2=two words",
        "-z",
        codec,
        input=("\n".join(lines) + "\n").encode(),
    )
    out = kcat(broker.bootstrap, "-C", "-t", topic, "-o", "beginning", "-e", "-f", "%k %s %h %o %p\n").stdout.decode()
    got = out.splitlines()
    assert got == [f"key{i} value-{codec}-{i} h1=v1,h2=two words {i} 0" for i in range(50)]
    # And what kcat wrote is what another client reads back (codec decoded by librdkafka in
    # confluent-kafka as well).
    rows = read_all(broker.bootstrap, topic)
    assert [(r[1], r[2], r[3]) for r in rows] == [
        (i, f"key{i}".encode(), f"value-{codec}-{i}".encode()) for i in range(50)
    ]


def test_consume_from_offset_and_end(broker, topic):
    create_topic(broker.bootstrap, topic, partitions=1)
    kcat(broker.bootstrap, "-P", "-t", topic, input=b"".join(b"m%d\n" % i for i in range(20)))

    out = kcat(broker.bootstrap, "-C", "-t", topic, "-o", "13", "-e", "-f", "%o:%s\n").stdout.decode()
    assert out.splitlines() == [f"{i}:m{i}" for i in range(13, 20)]

    # A negative -o is relative to the end.
    out = kcat(broker.bootstrap, "-C", "-t", topic, "-o", "-3", "-e", "-f", "%o:%s\n").stdout.decode()
    assert out.splitlines() == [f"{i}:m{i}" for i in range(17, 20)]

    # -o end -e: nothing, and kcat exits at the end.
    proc = kcat(broker.bootstrap, "-C", "-t", topic, "-o", "end", "-e", "-f", "%o:%s\n")
    assert proc.stdout == b""
    assert b"Reached end of topic" in proc.stderr and b"at offset 20" in proc.stderr

    # -o end without -e: waits at the end and gets records produced afterwards.
    consumer = subprocess.Popen(
        [KCAT, "-b", broker.bootstrap, "-C", "-t", topic, "-o", "end", "-c", "2", "-f", "%o:%s\n"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        time.sleep(1.0)  # let it reach the end first
        kcat(broker.bootstrap, "-P", "-t", topic, input=b"late1\nlate2\n")
        out_b, _ = consumer.communicate(timeout=20)
    finally:
        if consumer.poll() is None:
            consumer.kill()
            consumer.wait()
    assert consumer.returncode == 0
    assert out_b.decode().splitlines() == ["20:late1", "21:late2"]


def test_produce_to_explicit_partitions_and_consume_each(broker, topic):
    create_topic(broker.bootstrap, topic, partitions=3)
    for p in range(3):
        kcat(
            broker.bootstrap,
            "-P",
            "-t",
            topic,
            "-p",
            str(p),
            input=b"".join(b"p%d-%d\n" % (p, i) for i in range(p + 2)),
        )
    for p in range(3):
        out = kcat(broker.bootstrap, "-C", "-t", topic, "-p", str(p), "-o", "beginning", "-e", "-f", "%p %o %s\n")
        assert out.stdout.decode().splitlines() == [f"{p} {i} p{p}-{i}" for i in range(p + 2)]


def test_null_key_and_empty_value(broker, topic):
    # -K: with no key part yields an empty key; -Z sends empty values as NULL.
    kcat(broker.bootstrap, "-P", "-t", topic, "-K:", "-Z", input=b"k1:\n:v2\n")
    rows = read_all(broker.bootstrap, topic)
    assert [(r[2], r[3]) for r in rows] == [(b"k1", None), (None, b"v2")]
    out = kcat(broker.bootstrap, "-C", "-t", topic, "-o", "beginning", "-e", "-Z", "-f", "[%k|%s|%S]\n").stdout.decode()
    assert out.splitlines() == ["[k1|NULL|-1]", "[NULL|v2|2]"]


def _group_consume(bootstrap: str, group: str, topic: str) -> list[str]:
    proc = kcat(
        bootstrap, "-G", group, "-X", "topic.auto.offset.reset=earliest", "-e", "-f", "%p:%o:%s\n", topic, timeout=60
    )
    return proc.stdout.decode().splitlines()


def test_balanced_group_consumes_everything_then_resumes_from_commits(broker, topic):
    create_topic(broker.bootstrap, topic, partitions=4)
    for p in range(4):
        kcat(broker.bootstrap, "-P", "-t", topic, "-p", str(p), input=b"".join(b"a%d-%d\n" % (p, i) for i in range(25)))
    group = f"{topic}-g"
    got = _group_consume(broker.bootstrap, group, topic)
    expected = {f"{p}:{i}:a{p}-{i}" for p in range(4) for i in range(25)}
    assert len(got) == 100
    assert set(got) == expected

    # kcat -G commits what it consumed (auto commit, and on close): a second run of the
    # same group reads only what was produced since.
    for p in range(4):
        kcat(broker.bootstrap, "-P", "-t", topic, "-p", str(p), input=b"b%d\n" % p)
    got = _group_consume(broker.bootstrap, group, topic)
    assert sorted(got) == [f"{p}:25:b{p}" for p in range(4)]


class _KcatMember:
    """A `kcat -G` process; threads collect its records (stdout) and its log (stderr)."""

    def __init__(self, bootstrap: str, group: str, topic: str) -> None:
        import threading

        self.proc = subprocess.Popen(
            [
                KCAT,
                "-b",
                bootstrap,
                "-u",
                "-G",
                group,
                "-X",
                "topic.auto.offset.reset=earliest",
                "-X",
                "heartbeat.interval.ms=300",
                "-f",
                "%p:%o:%s\n",
                topic,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.records: list[str] = []
        self.log: list[str] = []
        for stream, sink in ((self.proc.stdout, self.records), (self.proc.stderr, self.log)):
            threading.Thread(
                target=lambda st=stream, si=sink: [si.append(line.rstrip("\n")) for line in st], daemon=True
            ).start()

    def assignment(self) -> set[int] | None:
        """The partitions of its latest "assigned:" log line (None before the first)."""
        lines = [line for line in list(self.log) if "rebalanced" in line and "assigned:" in line]
        if not lines:
            return None
        # "... assigned: topic [0], topic [2]"
        return {
            int(part.split("[")[1].rstrip("]")) for part in lines[-1].split("assigned:")[1].split(",") if "[" in part
        }

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.mark.timeout(120)
def test_two_balanced_kcat_consumers_split_partitions(broker, topic):
    """Two kcat -G members in one group: the partitions are split between them and every
    record is read by exactly one of them."""
    create_topic(broker.bootstrap, topic, partitions=4)
    group = f"{topic}-g"
    members = [_KcatMember(broker.bootstrap, group, topic) for _ in range(2)]
    try:
        # Both members hold a share of the partitions ...
        deadline = time.monotonic() + 60
        while True:
            parts = [m.assignment() for m in members]
            if all(parts) and not parts[0] & parts[1] and parts[0] | parts[1] == {0, 1, 2, 3}:
                break
            assert time.monotonic() < deadline, f"no balanced assignment: {[m.log for m in members]}"
            assert all(m.proc.poll() is None for m in members), [m.log for m in members]
            time.sleep(0.1)
        # ... then records are produced, and each is read once.
        for p in range(4):
            kcat(
                broker.bootstrap,
                "-P",
                "-t",
                topic,
                "-p",
                str(p),
                input=b"".join(b"r%d-%d\n" % (p, i) for i in range(10)),
            )
        deadline = time.monotonic() + 30
        while sum(len(m.records) for m in members) < 40 and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(0.5)  # anything more would be a duplicate
    finally:
        for m in members:
            m.stop()
    seen = members[0].records + members[1].records
    assert sorted(seen) == sorted(f"{p}:{i}:r{p}-{i}" for p in range(4) for i in range(10))
    for m, mine in zip(members, parts):
        assert {int(line.split(":")[0]) for line in m.records} == mine, "a member read outside its assignment"
