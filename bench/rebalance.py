"""Rebalance pauses: KIP-848 (group.protocol=consumer) against the classic protocol, eager
(range) and cooperative-sticky, in the same run against one loglake broker process.

Scenario: one 24-partition topic gets a steady stream of records (one every 5 ms, round
robin over the partitions: one every 120 ms per partition). Three groups, one per
protocol, consume it side by side, so that they share the machine's load: each starts
with 6 members, grows to 12 one member at a time, and shrinks back to 6 one member at a
time (the newest closed first), 12 steps. Every member commits each record synchronously
before taking the next. A step starts when a member is started or closed and ends once
the assignment is balanced again and every member has received a record on each partition
it owns since its assignment last changed; between steps each group idles a random time
up to one heartbeat interval (membership changes do not come in phase with heartbeats).
Both protocols heartbeat at the same interval (`--heartbeat-ms`: the broker's
group.consumer.heartbeat.interval.ms and the classic members' heartbeat.interval.ms): under
either, a member learns of a change at its next heartbeat.

Two measures of the time spent not consuming. Members idle (the issue's measure: the total
time members spend not consuming): for every member, the time it was in the group during a
step without consuming anything, from when it owned no partition (a new member before its
first assignment; every member of an eager group from the rebalance's revocation of all its
partitions) until its first record once it owned partitions again; member-seconds.

Partitions stopped (stricter: it also counts the hand-over of the partitions that move, which
no protocol avoids): the time between a partition being revoked from a member and records
of it flowing again: for every revocation during the steps (an eager rebalance revokes
every partition, including those handed straight back to the same member; cooperative and
KIP-848 revoke only the partitions that move; a closing member revokes its own), the time
from the revocation until the partition's next record is delivered to a member of the
group, less any part of it during which that record had not been produced yet
(delivery - max(revocation, production)). Summed over revocations: partition-seconds. It
is split into the partitions that stayed with their member through the step ("kept": what
an eager rebalance stops needlessly) and those that moved (the hand-over, which waits for
heartbeats under every protocol). Also printed: the longest gap between records any member
had on the partitions it kept.

Every record is checked to be consumed exactly once per group (a record counts once its
commit succeeded; one whose commit a rebalance refused is read again from the committed
offset). The figures are printed with their ratio to classic eager (the baseline); target:
KIP-848 <= 0.2 x eager for the time members spend not consuming.

    python -m bench.rebalance [--heartbeat-ms 1000] [--low 6] [--high 12]
"""

from __future__ import annotations

import argparse
import bisect
import contextlib
import itertools
import os
import random
import threading
import time
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

# The consumer settings of each protocol compared (with group.id and bootstrap.servers).
PROTOCOLS: dict[str, dict[str, object]] = {
    "consumer": {"group.protocol": "consumer"},
    "eager": {"group.protocol": "classic", "partition.assignment.strategy": "range"},
    "cooperative": {"group.protocol": "classic", "partition.assignment.strategy": "cooperative-sticky"},
}
PARTITIONS = 24
PRODUCE_INTERVAL_S = 0.005
# What a commit fails with when a rebalance overtook it: the record was not consumed, and is
# read again from the committed offset (the partition is revoked, or the member seeks back).
_REBALANCE_ERRORS = frozenset(
    {
        KafkaError.REBALANCE_IN_PROGRESS,
        KafkaError.ILLEGAL_GENERATION,
        KafkaError.UNKNOWN_MEMBER_ID,
        KafkaError.STALE_MEMBER_EPOCH,
        KafkaError.FENCED_MEMBER_EPOCH,
        KafkaError._ASSIGNMENT_LOST,
        KafkaError._STATE,
    }
)


def protocol_config(bootstrap: str, group: str, protocol: str, heartbeat_ms: int) -> dict[str, object]:
    """Consumer settings for a member of `group` under `protocol` (a PROTOCOLS key); a classic
    member heartbeats every `heartbeat_ms` (a KIP-848 one at the broker's interval)."""
    config: dict[str, object] = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        **PROTOCOLS[protocol],
    }
    if config["group.protocol"] == "classic":
        config |= {"heartbeat.interval.ms": heartbeat_ms, "session.timeout.ms": max(10 * heartbeat_ms, 6000)}
    return config


class Member(threading.Thread):
    """A consumer polling in a thread: records every value it gets (with the time) and
    commits each one synchronously before taking the next, so none is delivered twice. A
    record whose commit a rebalance refused is not counted and is read again."""

    def __init__(self, config: Mapping[str, object], topic: str) -> None:
        super().__init__(daemon=True)
        self.consumer = Consumer(dict(config))
        # Kept by the rebalance callbacks (run within poll): asking the consumer for its
        # assignment from another thread while it polls can block. `changed_at` is set
        # before `owned`, so a reader never pairs a new assignment with an older time.
        self.changed_at = time.monotonic()
        self.owned: frozenset[int] = frozenset()
        self.ownership: list[tuple[float, frozenset[int]]] = [(self.changed_at, self.owned)]  # every change
        self.stopped_at: float | None = None  # when it was asked to leave
        self.revocations: list[tuple[float, frozenset[int]]] = []
        self.lost_at: list[float] = []  # when its assignment was lost (fenced: its session expired)
        self.consumer.subscribe([topic], on_assign=self._assigned, on_revoke=self._revoked, on_lost=self._lost)
        self.received: list[tuple[float, int, bytes]] = []  # (time, partition, value)
        self.positions: list[tuple[int, int]] = []  # (partition, offset) of each received record
        self.last_at: dict[int, float] = {}  # partition -> time of its latest record here
        self.stopping = threading.Event()
        self.errors: list[str] = []

    def _change(self, owned: frozenset[int]) -> None:
        self.changed_at = time.monotonic()
        self.owned = owned
        self.ownership.append((self.changed_at, owned))

    def _assigned(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self._change(self.owned | {p.partition for p in partitions})

    def _revoked(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        gone = frozenset(p.partition for p in partitions)
        self.revocations.append((time.monotonic(), gone))
        self._change(self.owned - gone)

    def _lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        # A record polled before and committed after the loss may be read again by the
        # rejoined member: exactly once holds only while no assignment is lost.
        self.lost_at.append(time.monotonic())
        self._revoked(consumer, partitions)

    def run(self) -> None:
        try:
            while not self.stopping.is_set():
                msg = self.consumer.poll(0.1)
                if msg is None:
                    continue
                error = msg.error()
                if error is not None:
                    if not error.retriable():
                        self.errors.append(str(error))
                    continue
                topic, partition, offset, value = msg.topic(), msg.partition(), msg.offset(), msg.value()
                # A record (not an event) has all four; the bench's values are never null.
                assert topic is not None and partition is not None and offset is not None and value is not None
                try:
                    self.consumer.commit(message=msg, asynchronous=False)
                except KafkaException as exc:
                    if exc.args[0].code() not in _REBALANCE_ERRORS:
                        raise
                    # Still ours: read it again. Revoked: the next owner reads it from the committed offset.
                    with contextlib.suppress(KafkaException):
                        self.consumer.seek(TopicPartition(topic, partition, offset))
                    continue
                now = time.monotonic()
                self.received.append((now, partition, value))
                self.positions.append((partition, offset))
                self.last_at[partition] = now
        except Exception as exc:  # noqa: BLE001 - reported by the caller
            self.errors.append(repr(exc))
        finally:
            self.consumer.close()

    def partitions(self) -> frozenset[int]:
        return self.owned

    def consuming(self) -> bool:
        """Whether it received a record on each partition it owns since its assignment last changed."""
        owned, since = self.owned, self.changed_at
        return all(self.last_at.get(p, -1.0) >= since for p in owned)

    def idle_s(self, start: float, end: float) -> float:
        """Seconds within [start, end] that it was a member without consuming: from when it
        owned no partition (it had just joined, or a rebalance took them all) until its first
        record once it had partitions again."""
        end = min(end, self.stopped_at or end)
        receipts = [t for t, _, _ in self.received]
        idle = 0.0
        for i, (since, owned) in enumerate(self.ownership):
            if owned or (i > 0 and not self.ownership[i - 1][1]):
                continue  # consuming, or already idle since an earlier entry
            back = next((t for t, o in self.ownership[i + 1 :] if o), None)
            first = bisect.bisect_left(receipts, back) if back is not None else len(receipts)
            resumed = receipts[first] if first < len(receipts) else end
            idle += max(0.0, min(resumed, end) - max(since, start))
        return idle

    def stop(self) -> None:
        self.stopped_at = time.monotonic()
        self.stopping.set()
        self.join(timeout=30)


class SteadyProducer(threading.Thread):
    """Produces numbered values round robin over the partitions, one every `interval_s`, until stopped."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, interval_s: float = PRODUCE_INTERVAL_S) -> None:
        super().__init__(daemon=True)
        self.producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
        self.topic = topic
        self.partitions = partitions
        self.interval_s = interval_s
        self.stopping = threading.Event()
        self.sent = 0
        self.produced_at: list[float] = []  # by value: when it was handed to the producer

    def run(self) -> None:
        start = time.monotonic()
        while not self.stopping.is_set():
            self.produced_at.append(time.monotonic())
            self.producer.produce(self.topic, value=b"%d" % self.sent, partition=self.sent % self.partitions)
            self.sent += 1
            self.producer.poll(0)
            # On a schedule, so that a slow iteration does not lower the rate.
            time.sleep(max(0.0, start + self.sent * self.interval_s - time.monotonic()))
        assert self.producer.flush(30) == 0

    def stop(self) -> None:
        self.stopping.set()
        self.join(timeout=30)


def wait_until(condition, timeout: float = 15.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        time.sleep(0.01)


@dataclass(frozen=True)
class Step:
    """One change of the group's size: from `started` until it consumed everywhere again."""

    started: float
    settled: float
    before: dict[Member, frozenset[int]]  # every member's partitions when the step started
    after: dict[Member, frozenset[int]]  # and once it settled

    def kept(self) -> Iterator[tuple[Member, frozenset[int]]]:
        """The members there before and after, with the partitions they owned at both ends."""
        for m, owned in self.after.items():
            if m in self.before and owned & self.before[m]:
                yield m, owned & self.before[m]


@dataclass(frozen=True)
class Pauses:
    """How long consumption stopped during the steps of a run (see the module's docstring)."""

    idle_member_s: float  # member-seconds without consuming (see Member.idle_s)
    stopped_s: float  # partition-seconds from revocations until records flowed again
    kept_stopped_s: float  # the part on partitions that stayed with their member through the step
    revoked: int  # revocations during the steps
    kept_revoked: int  # of partitions that stayed with their member through the step
    kept_max_gap_s: float  # a member's longest gap between records of the partitions it kept
    change_s: float  # from the first step's start to the last step's end


def _gaps(times: Iterable[float], start: float, end: float) -> list[float]:
    points = [start, *sorted(t for t in times if start <= t <= end), end]
    return [b - a for a, b in itertools.pairwise(points)]


@dataclass
class ScalingGroup:
    """A consumer group resized step by step under a steady produce, recording every step."""

    config: Mapping[str, object]
    topic: str
    partitions: int
    members: list[Member] = field(default_factory=list)  # the current members, oldest first
    everyone: list[Member] = field(default_factory=list)  # every member it ever had
    steps: list[Step] = field(default_factory=list)

    def resize(self, size: int, timeout: float = 60.0, record: bool = True) -> None:
        """Start or close members (the newest first) until it has `size`, then wait until
        it settles: balanced, and consuming every partition it owns."""
        before = {m: m.owned for m in self.members}
        started = time.monotonic()
        while len(self.members) > size:
            self.members.pop().stop()
        while len(self.members) < size:
            member = Member(self.config, self.topic)
            member.start()
            self.members.append(member)
            self.everyone.append(member)
        wait_until(self.settled, timeout, f"{size} members of {self.config['group.id']} balanced and consuming")
        if record:
            self.steps.append(Step(started, time.monotonic(), before, {m: m.owned for m in self.members}))

    def scale(self, sizes: Iterable[int], spacing_s: float = 0.0, seed: int = 0) -> None:
        """Resize through `sizes`, one step each, idling a random time up to `spacing_s`
        before each (a step right after the last one settled would find the members'
        heartbeats at the phase that last change gave them)."""
        spacing = random.Random(seed)
        for size in sizes:
            time.sleep(spacing.uniform(0.0, spacing_s))
            self.resize(size)

    def settled(self) -> bool:
        owned = [m.owned for m in self.members]
        fair = self.partitions // len(owned)
        return (
            sum(map(len, owned)) == self.partitions
            and len(frozenset().union(*owned)) == self.partitions
            and all(fair <= len(o) <= fair + 1 for o in owned)
            and all(m.consuming() for m in self.members)
        )

    def received(self) -> int:
        return sum(len(m.received) for m in self.everyone)

    def values(self) -> list[bytes]:
        return [v for m in self.everyone for _, _, v in m.received]

    def errors(self) -> list[str]:
        return [e for m in self.everyone for e in m.errors]

    def close(self) -> None:
        while self.members:
            self.members.pop().stop()

    def pauses(self, produced_at: Sequence[float]) -> Pauses:
        """The pauses of its steps; `produced_at`: each value's production time, by value."""
        deliveries: dict[int, list[tuple[float, bytes]]] = {}  # partition -> (time, value), in time order
        for m in self.everyone:
            for t, p, value in m.received:
                deliveries.setdefault(p, []).append((t, value))
        for d in deliveries.values():
            d.sort()
        stopped = kept_stopped = longest = 0.0
        revoked = kept_revoked = 0
        for step in self.steps:
            kept = dict(step.kept())
            for m in self.everyone:
                for at, gone in m.revocations:
                    if not step.started <= at <= step.settled:
                        continue
                    for p in gone:
                        d = deliveries[p]
                        delivered, value = d[bisect.bisect_right(d, (at, b""))]
                        wait = delivered - max(at, produced_at[int(value)])
                        stopped += wait
                        revoked += 1
                        if p in kept.get(m, ()):
                            kept_stopped += wait
                            kept_revoked += 1
            for m, partitions in kept.items():
                times = (t for t, p, _ in m.received if p in partitions)
                longest = max(longest, *_gaps(times, step.started, step.settled))
        idle = sum(m.idle_s(step.started, step.settled) for step in self.steps for m in self.everyone)
        return Pauses(
            idle,
            stopped,
            kept_stopped,
            revoked,
            kept_revoked,
            longest,
            self.steps[-1].settled - self.steps[0].started,
        )


def drain(producer: SteadyProducer, groups: Iterable[ScalingGroup], timeout: float = 60.0) -> None:
    """Stop the producer and wait until each group consumed everything; check exactly once."""
    producer.stop()
    for g in groups:
        # wait_until calls the condition before the loop moves on: `g` is this iteration's.
        wait_until(lambda: g.received() >= producer.sent, timeout, f"{g.config['group.id']} consumed every record")  # noqa: B023
        values = g.values()
        if sorted(values, key=int) != [b"%d" % i for i in range(producer.sent)] or g.errors():
            raise AssertionError(
                f"{g.config['group.id']}: {len(values)} records consumed for {producer.sent} sent, "
                f"{len(values) - len(set(values))} twice, {producer.sent - len(set(values))} missing; "
                f"errors {g.errors()}"
            )


def compare(
    bootstrap: str,
    topic: str,
    partitions: int,
    protocols: Collection[str],
    sizes: Sequence[int],
    heartbeat_ms: int,
    spacing_s: float = 0.0,
) -> dict[str, Pauses]:
    """One group per protocol on `topic` (created with `partitions`) under one steady
    producer, side by side: each starts with sizes[0] members and goes through the other
    sizes one step each. Checks that every group consumed every record exactly once."""
    from bench.kafka_common import create_topic

    create_topic(bootstrap, topic, partitions)
    producer = SteadyProducer(bootstrap, topic, partitions)
    groups = {
        p: ScalingGroup(protocol_config(bootstrap, f"{topic}-{p}", p, heartbeat_ms), topic, partitions)
        for p in protocols
    }
    producer.start()
    try:
        with ThreadPoolExecutor(len(groups)) as pool:
            for done in [pool.submit(g.resize, sizes[0], record=False) for g in groups.values()]:
                done.result()
            scaling = [pool.submit(g.scale, sizes[1:], spacing_s, seed) for seed, g in enumerate(groups.values())]
            for done in scaling:
                done.result()
        drain(producer, groups.values())
        return {p: g.pauses(producer.produced_at) for p, g in groups.items()}
    finally:
        producer.stop()
        for g in groups.values():
            g.close()


def main() -> None:
    from bench.kafka_common import loglake_broker

    parser = argparse.ArgumentParser()
    parser.add_argument("--heartbeat-ms", type=int, default=1000)
    parser.add_argument("--low", type=int, default=6)
    parser.add_argument("--high", type=int, default=12)
    args = parser.parse_args()
    overrides = {
        "group.initial.rebalance.delay.ms": "0",
        "group.min.session.timeout.ms": "1000",
        "group.consumer.heartbeat.interval.ms": str(args.heartbeat_ms),
        "group.consumer.min.heartbeat.interval.ms": str(min(args.heartbeat_ms, 5000)),
    }
    sizes = [*range(args.low, args.high + 1), *range(args.high - 1, args.low - 1, -1)]
    load_before = os.getloadavg()[0]
    with loglake_broker(overrides) as broker:
        results = compare(
            broker.bootstrap,
            "bench-rebalance",
            PARTITIONS,
            PROTOCOLS,
            sizes,
            args.heartbeat_ms,
            args.heartbeat_ms / 1000,
        )
    print(
        f"{args.low} -> {args.high} -> {args.low} members one at a time ({len(sizes) - 1} steps), {PARTITIONS} "
        f"partitions, a record every {PRODUCE_INTERVAL_S * 1000:g} ms, heartbeats every {args.heartbeat_ms} ms; "
        # Eager rebalances wait for every member: they stretch with the machine's load.
        f"load average {load_before:.1f} -> {os.getloadavg()[0]:.1f}"
    )
    print(
        f"{'protocol':12} {'change s':>8} {'members idle s':>14} {'ratio':>5} {'revoked':>7} "
        f"{'partitions stopped s':>20} {'ratio':>5} {'kept revoked':>12} {'kept s':>6} {'moved s':>7} "
        f"{'kept max gap s':>14}"
    )
    eager = results["eager"]
    for protocol, p in results.items():
        print(
            f"{protocol:12} {p.change_s:8.1f} {p.idle_member_s:14.2f} {p.idle_member_s / eager.idle_member_s:5.2f} "
            f"{p.revoked:7} {p.stopped_s:20.2f} {p.stopped_s / eager.stopped_s:5.2f} {p.kept_revoked:12} "
            f"{p.kept_stopped_s:6.2f} {p.stopped_s - p.kept_stopped_s:7.2f} {p.kept_max_gap_s:14.2f}"
        )
    print("target: consumer <= 0.2 x eager (members idle)")


if __name__ == "__main__":
    main()
