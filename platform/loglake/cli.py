"""The `loglake` command: broker(s), topics, cluster, reassign, groups, transactions, produce, consume.

Flags follow kafka-topics.sh, kafka-reassign-partitions.sh, kafka-consumer-groups.sh,
kafka-transactions.sh and kafka-console-{producer,consumer}.sh. Everything but
`broker start` talks to a broker's HTTP API (`--bootstrap-http`, default the local one).
"""

from __future__ import annotations

import argparse
import base64
import os
import sys
import time
from typing import Any, Iterator

import httpx
import orjson

from loglake.broker_configs import REPLICATION_THROTTLE_RATES
from loglake.cluster.assignment import assign_replicas
from loglake.cluster.leader_offsets import leaders_without_offsets, merge_leader_offsets
from loglake.config import parse_overrides
from loglake.security import scram

DEFAULT_HTTP = os.environ.get("LOGLAKE_HTTP", "http://127.0.0.1:8082")
BINARY_V2 = "application/vnd.kafka.binary.v2+json"
PRODUCE_CHUNK = 1000


class CliError(Exception):
    pass


def _client(args: argparse.Namespace) -> httpx.Client:
    return _http(args.bootstrap_http, 60)


def _http(base_url: str, timeout: float) -> httpx.Client:
    """A broker's HTTP API; with LOGLAKE_HTTP_USER / LOGLAKE_HTTP_PASSWORD set, as that user
    (http.authentication.method=BASIC), LOGLAKE_HTTP_CA naming the CA bundle of https://."""
    user = os.environ.get("LOGLAKE_HTTP_USER")
    auth = (user, os.environ.get("LOGLAKE_HTTP_PASSWORD", "")) if user else None
    return httpx.Client(base_url=base_url, timeout=timeout, auth=auth, verify=os.environ.get("LOGLAKE_HTTP_CA", True))


def _check(resp: httpx.Response) -> Any:
    if resp.status_code >= 400:
        try:
            message = resp.json().get("message", resp.text)
        except ValueError:
            message = resp.text
        raise CliError(f"{resp.status_code}: {message}")
    return resp.json() if resp.content else None


# broker ------------------------------------------------------------------------------------

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def cmd_broker_start(args: argparse.Namespace) -> int:
    argv = [sys.executable, "-m", "ingest_gateway"]
    if args.config:
        argv += ["--config", args.config]
    for item in args.override:
        argv += ["--override", item]
    argv += ["--log-level", args.log_level]
    os.execv(sys.executable, argv)
    return 0  # not reached


# topics ------------------------------------------------------------------------------------


def cmd_topics_create(args: argparse.Namespace) -> int:
    body: dict[str, Any] = {"name": args.topic, "configs": parse_overrides(args.config)}
    if args.partitions is not None:
        body["partitions"] = args.partitions
    if args.replication_factor is not None:
        body["replication_factor"] = args.replication_factor
    with _client(args) as c:
        _check(c.post("/topics", json=body))
    print(f"Created topic {args.topic}.")
    return 0


def cmd_topics_list(args: argparse.Namespace) -> int:
    with _client(args) as c:
        for name in _check(c.get("/topics")):
            print(name)
    return 0


def _with_leader_offsets(c: httpx.Client, topic: dict[str, Any]) -> dict[str, Any]:
    """A broker describes the offsets of the partitions it leads; ask the other leaders
    (through their HTTP listeners) for theirs."""
    missing = leaders_without_offsets(topic)
    if not missing:
        return topic
    brokers = _broker_urls(c)
    for leader in missing & brokers.keys():
        try:
            with _http(brokers[leader], 10) as other:
                theirs = _check(other.get(f"/topics/{topic['name']}"))
        except (httpx.HTTPError, CliError):
            continue  # that leader is unreachable: its partitions show no offsets
        topic = merge_leader_offsets(topic, leader, theirs)
    return topic


def cmd_topics_describe(args: argparse.Namespace) -> int:
    with _client(args) as c:
        names = [args.topic] if args.topic else _check(c.get("/topics"))
        for name in names:
            t = _with_leader_offsets(c, _check(c.get(f"/topics/{name}")))
            configs = ",".join(f"{k}={v}" for k, v in sorted(t["configs"].items()))
            print(
                f"Topic: {t['name']}\tTopicId: {t['topic_id']}\tPartitionCount: {t['partitions_count']}\t"
                f"ReplicationFactor: {t['replication_factor']}\tConfigs: {configs}"
            )
            for p in t["partitions"]:
                replicas = ",".join(str(r["broker"]) for r in p["replicas"])
                isr = ",".join(str(r) for r in p["isr"])
                offsets = ""
                if "high_watermark" in p:
                    offsets = (
                        f"\tLogStartOffset: {p['log_start_offset']}\tHighWatermark: {p['high_watermark']}"
                        f"\tLogEndOffset: {p['log_end_offset']}\tSize: {p['size']}"
                    )
                compaction = p.get("compaction")
                if compaction is not None:
                    last = compaction["last_cleaning"]
                    offsets += f"\tDirtyRatio: {compaction['dirty_ratio']}\tLastCleaning: " + (
                        "never"
                        if last is None
                        else f"{last['age_ms'] // 1000}s ago by {last['executor']} up to offset {last['end_offset']} "
                        f"({last['bytes_read']} -> {last['bytes_written']} bytes, {last['duration_ms']} ms)"
                    )
                print(
                    f"\tTopic: {t['name']}\tPartition: {p['partition']}\tLeader: {p['leader']}\t"
                    f"Replicas: {replicas}\tIsr: {isr}{_moving(p)}{offsets}"
                )
    return 0


def _moving(p: dict[str, Any]) -> str:
    """kafka-topics.sh's columns of a reassignment in progress."""
    if not (p.get("adding_replicas") or p.get("removing_replicas")):
        return ""
    adding = ",".join(map(str, p["adding_replicas"]))
    removing = ",".join(map(str, p["removing_replicas"]))
    return f"\tAdding Replicas: {adding}\tRemoving Replicas: {removing}"


def cmd_topics_delete(args: argparse.Namespace) -> int:
    with _client(args) as c:
        _check(c.delete(f"/topics/{args.topic}"))
    print(f"Deleted topic {args.topic}.")
    return 0


def cmd_topics_alter(args: argparse.Namespace) -> int:
    body: dict[str, Any] = {}
    if args.partitions is not None:
        body["partitions"] = args.partitions
    if args.config or args.delete_config:
        body["configs"] = {**parse_overrides(args.config), **{k: "" for k in args.delete_config}}
    if not body and args.replication_factor is None:
        raise CliError("nothing to alter: give --partitions, --replication-factor, --config or --delete-config")
    with _client(args) as c:
        if body:
            _check(c.patch(f"/topics/{args.topic}", json=body))
            print(f"Altered topic {args.topic}.")
        if args.replication_factor is not None:
            # A reassignment of every partition: `loglake reassign verify` follows it.
            brokers = sorted(b["broker_id"] for b in _check(c.get("/cluster"))["brokers"])
            plan = _plan(_replication_factor_plan(_current(c), args.topic, args.replication_factor, brokers))
            print(f"Reassigning {args.topic} to replication factor {args.replication_factor}:")
            _print_json(plan)
            return _submit_plan(c, plan)
    return 0


# cluster -----------------------------------------------------------------------------------


def cmd_cluster_status(args: argparse.Namespace) -> int:
    with _client(args) as c:
        status = _check(c.get("/cluster"))
    controller = status["controller"]
    print(f"Controller: broker {_cell(controller['broker_id'])} (epoch {controller['epoch']})")
    print(f"Brokers: {len(status['brokers'])}")
    for b in status["brokers"]:
        print(f"\tbroker {b['broker_id']}\tkafka {b['kafka']}\thttp {b['http']}\tlog dirs: {_log_dir_health(b['http'])}")
    print(
        f"Partitions: {len(status['partitions'])}\tUnderReplicated: {status['under_replicated_partitions']}"
        f"\tOffline: {status['offline_partitions']}"
    )
    rows = [["TOPIC", "PARTITION", "LEADER", "EPOCH", "REPLICAS", "ISR", "STATUS"]]
    for p in status["partitions"]:
        flag = "offline" if p["offline"] else "under-replicated" if p["under_replicated"] else "ok"
        if p.get("adding_replicas") or p.get("removing_replicas"):
            flag += ",reassigning"
        rows.append(
            [
                p["topic"],
                str(p["partition"]),
                str(p["leader"]),
                str(p["leader_epoch"]),
                ",".join(map(str, p["replicas"])),
                ",".join(map(str, p["isr"])),
                flag,
            ]
        )
    if len(rows) > 1:
        _print_table(rows)
    return 0


def _log_dir_health(http_url: str) -> str:
    """What a broker's /healthz says of its log dirs: "ok", or each offline dir and why."""
    try:
        with _http(http_url, 5) as c:
            health = c.get("/healthz").json()
    except (httpx.HTTPError, ValueError) as exc:
        return f"unknown ({exc})"
    offline = health.get("offline_log_dirs") or {}
    if not offline:
        return "ok"
    return "; ".join(f"OFFLINE {path} ({reason})" for path, reason in sorted(offline.items()))


# groups ------------------------------------------------------------------------------------


def cmd_groups_list(args: argparse.Namespace) -> int:
    with _client(args) as c:
        for g in _check(c.get("/groups")):
            print(g["group_id"])
    return 0


def _print_table(rows: list[list[str]]) -> None:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip())


def _cell(value: Any) -> str:
    return "-" if value is None else str(value)


def cmd_groups_describe(args: argparse.Namespace) -> int:
    with _client(args) as c:
        groups = [args.group] if args.group else [g["group_id"] for g in _check(c.get("/groups"))]
        for group_id in groups:
            g = _check(c.get(f"/groups/{group_id}"))
            members = {m["member_id"]: m for m in g["members"]}
            if g["group_protocol"] == "consumer":
                _print_consumer_group_members(group_id, g)
            else:
                print(
                    f"\nGroup {group_id} is {g['state']} with {len(members)} member(s) "
                    f"(classic protocol, assignor {g['protocol'] or '-'}).\n"
                )
            rows = [
                [
                    "GROUP",
                    "TOPIC",
                    "PARTITION",
                    "CURRENT-OFFSET",
                    "LOG-END-OFFSET",
                    "LAG",
                    "CONSUMER-ID",
                    "HOST",
                    "CLIENT-ID",
                ]
            ]
            for o in g["offsets"]:
                member = members.get(o["member_id"] or "", {})
                rows.append(
                    [
                        group_id,
                        o["topic"],
                        str(o["partition"]),
                        _cell(o["committed_offset"]),
                        _cell(o["log_end_offset"]),
                        _cell(o["lag"]),
                        _cell(o["member_id"]),
                        _cell(member.get("client_host")),
                        _cell(member.get("client_id")),
                    ]
                )
            _print_table(rows)
    return 0


def _print_consumer_group_members(group_id: str, g: dict[str, Any]) -> None:
    """A KIP-848 group: epochs, and each member's protocol (classic members join a consumer
    group while it migrates) and current assignment against its target (they differ while
    the group reconciles), as kafka-consumer-groups.sh --members --verbose."""
    print(
        f"\nGroup {group_id} is {g['state']} with {len(g['members'])} member(s) (consumer protocol, "
        f"assignor {g['protocol'] or '-'}, group epoch {g['group_epoch']}, assignment epoch {g['assignment_epoch']}).\n"
    )
    if not g["members"]:
        return

    def parts(assignment: list[dict[str, Any]]) -> str:
        return ",".join(f"{a['topic']}-{a['partition']}" for a in assignment) or "-"

    rows = [["CONSUMER-ID", "PROTOCOL", "EPOCH", "HOST", "CLIENT-ID", "ASSIGNMENT", "TARGET-ASSIGNMENT"]]
    for m in g["members"]:
        rows.append(
            [
                m["member_id"],
                m["member_type"],
                str(m["member_epoch"]),
                _cell(m["client_host"]),
                _cell(m["client_id"]),
                parts(m["assignment"]),
                parts(m["target_assignment"]),
            ]
        )
    _print_table(rows)
    print()


def cmd_groups_reset_offsets(args: argparse.Namespace) -> int:
    body: dict[str, Any] = {"topic": args.topic}
    if args.to_earliest:
        body["to"] = "earliest"
    elif args.to_latest:
        body["to"] = "latest"
    else:
        body.update(to="offset", offset=args.to_offset)
    if args.partitions:
        body["partitions"] = [int(p) for p in args.partitions.split(",")]
    with _client(args) as c:
        result = _check(c.post(f"/groups/{args.group}/reset-offsets", json=body))
    rows = [["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"]]
    rows += [[args.group, o["topic"], str(o["partition"]), str(o["offset"])] for o in result["offsets"]]
    _print_table(rows)
    return 0


def cmd_groups_delete(args: argparse.Namespace) -> int:
    with _client(args) as c:
        _check(c.delete(f"/groups/{args.group}"))
    print(f"Deleted group {args.group}.")
    return 0


# produce / consume -------------------------------------------------------------------------


# reassign ------------------------------------------------------------------------------------


def _read_plan(path: str) -> dict[str, Any]:
    try:
        with open(path, "rb") as f:
            plan = orjson.loads(f.read())
    except OSError as exc:
        raise CliError(f"cannot read the plan {path}: {exc}") from None
    except orjson.JSONDecodeError as exc:
        raise CliError(f"the plan {path} is not JSON: {exc}") from None
    if not isinstance(plan, dict) or not isinstance(plan.get("partitions"), list):
        raise CliError(f'the plan {path} is not {{"version": 1, "partitions": [...]}}')
    return plan


def _plan(entries: list[tuple[str, int, list[int] | None]]) -> dict[str, Any]:
    return {"version": 1, "partitions": [{"topic": t, "partition": p, "replicas": r} for t, p, r in entries]}


def _print_json(doc: Any) -> None:
    print(orjson.dumps(doc).decode())


def _submit_plan(c: httpx.Client, plan: dict[str, Any]) -> int:
    """POST the plan; print each partition's outcome; 1 if any was refused."""
    failed = 0
    for r in _check(c.post("/reassignments", json=plan))["partitions"]:
        if r["error"] is None:
            print(f"{r['topic']}-{r['partition']}: accepted")
        else:
            failed += 1
            print(f"{r['topic']}-{r['partition']}: {r['error']}: {r['message']}", file=sys.stderr)
    return 1 if failed else 0


def _current(c: httpx.Client) -> dict[tuple[str, int], list[int]]:
    return {(p["topic"], p["partition"]): p["replicas"] for p in _check(c.get("/cluster"))["partitions"]}


def cmd_reassign_generate(args: argparse.Namespace) -> int:
    """As kafka-reassign-partitions.sh --generate: the current assignment of the topics and
    a proposal spreading them round-robin over the given brokers (over their racks too,
    when every one has a `broker.rack`)."""
    topics = [t for t in args.topics.split(",") if t]
    brokers = sorted({int(b) for b in args.brokers.split(",") if b})
    with _client(args) as c:
        current = _current(c)
        racks = {b["broker_id"]: b.get("rack") for b in _check(c.get("/cluster"))["brokers"]}
    proposal = []
    for topic in topics:
        partitions = sorted(p for t, p in current if t == topic)
        if not partitions:
            raise CliError(f"topic {topic!r} does not exist")
        rf = args.replication_factor or len(current[(topic, partitions[0])])
        if rf > len(brokers):
            raise CliError(f"replication factor {rf} is larger than the {len(brokers)} brokers given")
        spread = assign_replicas(
            brokers, len(partitions), rf, start_index=sum(map(ord, topic)) % len(brokers), racks=racks
        )
        proposal += [(topic, p, list(spread[p])) for p in partitions]
    print("Current partition replica assignment")
    _print_json(_plan([(t, p, current[(t, p)]) for t, p, _ in proposal]))
    print("\nProposed partition reassignment configuration")
    _print_json(_plan(proposal))
    return 0


def cmd_reassign_execute(args: argparse.Namespace) -> int:
    plan = _read_plan(args.plan)
    with _client(args) as c:
        current = _current(c)
        print("Current partition replica assignment (save it to roll back)")
        _print_json(
            _plan([(e["topic"], e["partition"], current.get((e["topic"], e["partition"]))) for e in plan["partitions"]])
        )
        if args.throttle is not None:
            _set_throttles(c, plan, current, args.throttle)
        return _submit_plan(c, plan)


_THROTTLED_REPLICAS = ("leader.replication.throttled.replicas", "follower.replication.throttled.replicas")


def _throttle_plan(
    plan: dict[str, Any], current: dict[tuple[str, int], list[int]]
) -> tuple[dict[str, dict[str, str]], set[int]]:
    """As kafka-reassign-partitions.sh: per topic, the moving partitions' current replicas
    (leader side) and the replicas being added (follower side); and the brokers involved."""
    leaders: dict[str, list[str]] = {}
    followers: dict[str, list[str]] = {}
    brokers: set[int] = set()
    for e in plan["partitions"]:
        existing = current.get((e["topic"], e["partition"]))
        adding = [b for b in e["replicas"] or () if existing is not None and b not in existing]
        if not adding:
            continue
        leaders.setdefault(e["topic"], []).extend(f"{e['partition']}:{b}" for b in existing)
        followers.setdefault(e["topic"], []).extend(f"{e['partition']}:{b}" for b in adding)
        brokers.update(existing, adding)
    configs = {
        t: {
            "leader.replication.throttled.replicas": ",".join(leaders[t]),
            "follower.replication.throttled.replicas": ",".join(followers[t]),
        }
        for t in leaders
    }
    return configs, brokers


def _set_throttles(c: httpx.Client, plan: dict[str, Any], current: dict[tuple[str, int], list[int]], rate: int) -> None:
    if rate < 1:
        raise CliError(f"--throttle must be a positive number of bytes/s, not {rate}")
    configs, brokers = _throttle_plan(plan, current)
    for topic, config in configs.items():
        _check(c.patch(f"/topics/{topic}", json={"configs": config}))
    for b in sorted(brokers):
        _check(c.patch(f"/brokers/{b}/configs", json={"configs": dict.fromkeys(REPLICATION_THROTTLE_RATES, str(rate))}))
    print(f"Throttling replication of the moving replicas to {rate} B/s on brokers {sorted(brokers)}")


def _remove_throttles(c: httpx.Client, topics: set[str]) -> None:
    """What `verify` does once a plan is complete: no throttle left on any broker or topic."""
    for topic in sorted(topics):
        config = _check(c.get(f"/topics/{topic}"))["configs"]
        if any(config.get(n) for n in _THROTTLED_REPLICAS):
            _check(c.patch(f"/topics/{topic}", json={"configs": dict.fromkeys(_THROTTLED_REPLICAS, "")}))
    for b in _broker_urls(c):
        stored = _check(c.get(f"/brokers/{b}/configs"))["configs"]
        if any(n in stored for n in REPLICATION_THROTTLE_RATES):
            _check(c.patch(f"/brokers/{b}/configs", json={"configs": dict.fromkeys(REPLICATION_THROTTLE_RATES, "")}))
    print("Throttles removed.")


def cmd_reassign_verify(args: argparse.Namespace) -> int:
    """Each partition of the plan: complete, still in progress, or not as planned; when all
    are complete, the replication throttles are removed (unless --preserve-throttles)."""
    plan = _read_plan(args.plan)
    with _client(args) as c:
        ongoing = {(r["topic"], r["partition"]) for r in _check(c.get("/reassignments"))["partitions"]}
        current = _current(c)
        done = True
        for e in plan["partitions"]:
            key = (e["topic"], e["partition"])
            if key in ongoing:
                done = False
                print(f"Reassignment of partition {key[0]}-{key[1]} is still in progress.")
            elif current.get(key) == e["replicas"]:
                print(f"Reassignment of partition {key[0]}-{key[1]} is completed.")
            else:
                done = False
                print(
                    f"There is no active reassignment of partition {key[0]}-{key[1]}, "
                    f"but its replicas are {current.get(key)}."
                )
        if done and not args.preserve_throttles:
            _remove_throttles(c, {e["topic"] for e in plan["partitions"]})
    return 0 if done else 1


def cmd_reassign_cancel(args: argparse.Namespace) -> int:
    plan = _read_plan(args.plan)
    with _client(args) as c:
        return _submit_plan(c, _plan([(e["topic"], e["partition"], None) for e in plan["partitions"]]))


def _replica_load(current: dict[tuple[str, int], list[int]], brokers: list[int]) -> dict[int, int]:
    """How many replicas each of `brokers` hosts."""
    load = {b: 0 for b in brokers}
    for replicas in current.values():
        for r in replicas:
            if r in load:
                load[r] += 1
    return load


def _drain_plan(
    current: dict[tuple[str, int], list[int]], leaving: int, brokers: list[int]
) -> list[tuple[str, int, list[int]]]:
    """Targets moving every replica off `leaving`, each to the remaining broker hosting the
    fewest replicas (in the leaving replica's place, so preferred leaders stay where they were
    unless it was `leaving`)."""
    remaining = [b for b in brokers if b != leaving]
    load = _replica_load(current, remaining)
    targets = []
    for (t, p), replicas in sorted(current.items()):
        if leaving not in replicas:
            continue
        candidates = [b for b in remaining if b not in replicas]
        if not candidates:
            raise CliError(f"cannot drain broker {leaving}: {t}-{p} has {len(replicas)} replicas and no other broker")
        substitute = min(candidates, key=lambda b: (load[b], b))
        load[substitute] += 1
        targets.append((t, p, [substitute if r == leaving else r for r in replicas]))
    return targets


def cmd_brokers_drain(args: argparse.Namespace) -> int:
    """Move every replica (and so every leadership) off a broker, then wait until it holds
    nothing: it can then be stopped without clients noticing."""
    with _client(args) as c:
        brokers = sorted(b["broker_id"] for b in _check(c.get("/cluster"))["brokers"])
        if args.broker not in brokers:
            raise CliError(f"broker {args.broker} is not alive")
        targets = _drain_plan(_current(c), args.broker, brokers)
        if targets:
            print(f"Moving {len(targets)} partition(s) off broker {args.broker}")
            if _submit_plan(c, _plan(targets)):
                return 1
        deadline = time.monotonic() + args.timeout
        while True:
            status = _check(c.get("/cluster"))
            hosting = [p for p in status["partitions"] if args.broker in p["replicas"] or p["leader"] == args.broker]
            if not hosting and not _check(c.get("/reassignments"))["partitions"]:
                print(f"Broker {args.broker} holds no replica and leads nothing.")
                return 0
            if time.monotonic() > deadline:
                raise CliError(f"broker {args.broker} still hosts {len(hosting)} partition(s) after {args.timeout}s")
            time.sleep(0.5)


def _replication_factor_plan(
    current: dict[tuple[str, int], list[int]], topic: str, rf: int, brokers: list[int]
) -> list[tuple[str, int, list[int]]]:
    """Targets giving every partition of `topic` `rf` replicas: the current ones kept (the
    preferred leader first), brokers added where they host the fewest replicas, or the last
    ones dropped."""
    if not 1 <= rf <= len(brokers):
        raise CliError(f"replication factor {rf} must be between 1 and the {len(brokers)} live brokers")
    load = _replica_load(current, brokers)
    targets = []
    for (t, p), replicas in sorted(current.items()):
        if t != topic:
            continue
        target = list(replicas[:rf])
        while len(target) < rf:
            candidate = min((b for b in brokers if b not in target), key=lambda b: (load[b], b))
            target.append(candidate)
            load[candidate] += 1
        targets.append((t, p, target))
    if not targets:
        raise CliError(f"topic {topic!r} does not exist")
    return targets


# transactions --------------------------------------------------------------------------------

# kafka-transactions.sh's default for find-hanging: Kafka's transaction.max.timeout.ms.
DEFAULT_MAX_TRANSACTION_TIMEOUT_MINUTES = 15


def _broker_urls(c: httpx.Client) -> dict[int, str]:
    return {b["broker_id"]: b["http"] for b in _check(c.get("/cluster"))["brokers"]}


def _leader_url(c: httpx.Client, topic: str, partition: int) -> str:
    status = _check(c.get("/cluster"))
    urls = {b["broker_id"]: b["http"] for b in status["brokers"]}
    for p in status["partitions"]:
        if p["topic"] == topic and p["partition"] == partition:
            if p["leader"] not in urls:
                raise CliError(f"{topic}-{partition} has no live leader")
            return urls[p["leader"]]
    raise CliError(f"no partition {topic}-{partition}")


def _all_transactions(c: httpx.Client) -> list[dict[str, Any]]:
    """Every broker's coordinated transactions, each with its coordinator."""
    out = []
    for broker_id, url in sorted(_broker_urls(c).items()):
        answer = _check(c.get(f"{url}/transactions"))
        out.extend({**t, "coordinator": broker_id} for t in answer["transactions"])
    return out


def cmd_transactions_list(args: argparse.Namespace) -> int:
    with _client(args) as c:
        rows = [["TransactionalId", "Coordinator", "ProducerId", "TransactionState"]]
        for t in _all_transactions(c):
            rows.append([t["transactional_id"], str(t["coordinator"]), str(t["producer_id"]), t["state"]])
    _print_table(rows)
    return 0


def cmd_transactions_describe(args: argparse.Namespace) -> int:
    with _client(args) as c:
        for url in _broker_urls(c).values():
            resp = c.get(f"{url}/transactions/{args.transactional_id}")
            if resp.status_code == 503:
                continue  # not its coordinator
            d = _check(resp)
            break
        else:
            raise CliError(f"no broker coordinates the transactional id {args.transactional_id!r}")
    start = d["transaction_start_time_ms"]
    duration = int(time.time() * 1000) - start if start >= 0 else None
    partitions = ",".join(f"{p['topic']}-{p['partition']}" for p in d["partitions"])
    _print_table(
        [
            [
                "CoordinatorId",
                "TransactionalId",
                "ProducerId",
                "ProducerEpoch",
                "TransactionState",
                "TransactionTimeoutMs",
                "CurrentTransactionStartTimeMs",
                "TransactionDurationMs",
                "TopicPartitions",
            ],
            [
                str(d["coordinator"]),
                d["transactional_id"],
                str(d["producer_id"]),
                str(d["producer_epoch"]),
                d["state"],
                str(d["transaction_timeout_ms"]),
                _cell(start if start >= 0 else None),
                _cell(duration),
                partitions or "-",
            ],
        ]
    )
    return 0


def _producer_rows(producers: list[dict[str, Any]]) -> list[list[str]]:
    return [
        [
            str(p["producer_id"]),
            str(p["producer_epoch"]),
            str(p["last_sequence"]),
            str(p["last_timestamp"]),
            _cell(p["current_txn_start_offset"] if p["current_txn_start_offset"] >= 0 else None),
        ]
        for p in producers
    ]


_PRODUCER_HEADER = ["ProducerId", "ProducerEpoch", "LastSequence", "LastTimestamp", "CurrentTransactionStartOffset"]


def cmd_transactions_describe_producers(args: argparse.Namespace) -> int:
    with _client(args) as c:
        url = _leader_url(c, args.topic, args.partition)
        answer = _check(c.get(f"{url}/topics/{args.topic}/partitions/{args.partition}/producers"))
    _print_table([_PRODUCER_HEADER, *_producer_rows(answer["producers"])])
    return 0


def cmd_transactions_find_hanging(args: argparse.Namespace) -> int:
    """Open transactions on the partitions broker N leads that their coordinator does not
    know as ongoing (with this producer id), or that are older than the max timeout."""
    max_age_ms = args.max_transaction_timeout * 60_000
    now = int(time.time() * 1000)
    with _client(args) as c:
        status = _check(c.get("/cluster"))
        urls = {b["broker_id"]: b["http"] for b in status["brokers"]}
        if args.broker_id not in urls:
            raise CliError(f"broker {args.broker_id} is not alive")
        ongoing = {t["producer_id"] for t in _all_transactions(c) if t["state"] == "Ongoing"}
        rows = [["Topic", "Partition", "ProducerId", "ProducerEpoch", "StartOffset", "LastTimestamp", "Duration(min)"]]
        for p in status["partitions"]:
            if p["leader"] != args.broker_id:
                continue
            url = f"{urls[args.broker_id]}/topics/{p['topic']}/partitions/{p['partition']}/producers"
            for producer in _check(c.get(url))["producers"]:
                start = producer["current_txn_start_offset"]
                age = now - producer["last_timestamp"]
                if start >= 0 and (producer["producer_id"] not in ongoing or age > max_age_ms):
                    rows.append(
                        [
                            p["topic"],
                            str(p["partition"]),
                            str(producer["producer_id"]),
                            str(producer["producer_epoch"]),
                            str(start),
                            str(producer["last_timestamp"]),
                            str(age // 60_000),
                        ]
                    )
    _print_table(rows)
    return 0


def cmd_transactions_abort(args: argparse.Namespace) -> int:
    with _client(args) as c:
        url = _leader_url(c, args.topic, args.partition)
        answer = _check(
            c.post(
                f"{url}/topics/{args.topic}/partitions/{args.partition}/abort-transaction",
                json={"start_offset": args.start_offset},
            )
        )
    print(
        f"Aborted the transaction of producer {answer['producer_id']} (epoch {answer['producer_epoch']}) "
        f"starting at offset {args.start_offset} of {args.topic}-{args.partition}"
    )
    return 0


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def cmd_produce(args: argparse.Namespace) -> int:
    path = f"/topics/{args.topic}" + (f"/partitions/{args.partition}" if args.partition is not None else "")
    sep = args.key_separator.encode() if args.parse_key else None
    total = 0
    with _client(args) as c:
        batch: list[dict[str, Any]] = []

        def send() -> None:
            nonlocal total
            resp = c.post(
                path,
                params={"acks": args.acks},
                content=orjson.dumps({"records": batch}),
                headers={"content-type": BINARY_V2},
            )
            result = _check(resp)
            failed = [o for o in result["offsets"] if o.get("error")]
            if failed:
                raise CliError(f"{len(failed)} records failed: {failed[0]['error']}")
            total += len(batch)
            batch.clear()

        for raw in sys.stdin.buffer:
            line = raw.rstrip(b"\r\n")
            record: dict[str, Any] = {}
            if sep is not None:
                key, found, value = line.partition(sep)
                if not found:
                    raise CliError(f"no key separator {args.key_separator!r} in line {line[:80]!r}")
                record["key"] = _b64(key)
            else:
                value = line
            record["value"] = _b64(value)
            batch.append(record)
            if len(batch) >= PRODUCE_CHUNK:
                send()
        if batch:
            send()
    print(f"Produced {total} records to {args.topic}.", file=sys.stderr)
    return 0


def _consume_partition(
    c: httpx.Client, args: argparse.Namespace, partition: int, start: int
) -> Iterator[dict[str, Any]]:
    offset = start
    while True:
        resp = c.get(
            f"/topics/{args.topic}/partitions/{partition}/records",
            params={"offset": offset, "max_bytes": args.max_bytes, "timeout_ms": 1000 if args.follow else 0},
            headers={"accept": BINARY_V2},
        )
        records = _check(resp)
        if not records:
            if args.follow:
                continue
            return
        yield from records
        offset = records[-1]["offset"] + 1


def cmd_consume(args: argparse.Namespace) -> int:
    if args.follow and args.partition is None:
        raise CliError("--follow needs --partition (use a consumer group over the Kafka protocol for all partitions)")
    sep = args.key_separator.encode()
    out = sys.stdout.buffer
    count = 0
    with _client(args) as c:
        topic = _check(c.get(f"/topics/{args.topic}"))
        partitions = [args.partition] if args.partition is not None else range(topic["partitions_count"])
        for p in partitions:
            offsets = _check(c.get(f"/topics/{args.topic}/partitions/{p}/offsets"))
            if args.offset is not None:
                start = args.offset
            elif args.from_beginning:
                start = offsets["beginning_offset"]
            else:
                start = offsets["end_offset"]
            for rec in _consume_partition(c, args, p, start):
                if args.print_key:
                    key = b"null" if rec["key"] is None else base64.b64decode(rec["key"])
                    out.write(key + sep)
                out.write((b"null" if rec["value"] is None else base64.b64decode(rec["value"])) + b"\n")
                count += 1
                if args.max_messages is not None and count >= args.max_messages:
                    out.flush()
                    return 0
            out.flush()
    print(f"Processed a total of {count} messages", file=sys.stderr)
    return 0


# users -------------------------------------------------------------------------------------


def cmd_users_add(args: argparse.Namespace) -> int:
    """A SCRAM credential for a user (as kafka-configs.sh --add-config 'SCRAM-SHA-512=[...]'):
    salted here, so the password never leaves this process."""
    password = sys.stdin.readline().rstrip("\n") if args.password == "-" else args.password
    if not password:
        raise CliError("the password is empty")
    if args.zookeeper_connect:
        return _add_user_in_zookeeper(args, password)
    salt = os.urandom(32)
    try:
        salted = scram.salted_password(args.mechanism, password, salt, args.iterations)
    except KeyError:
        raise CliError(f"unknown mechanism {args.mechanism}: {', '.join(scram.MECHANISMS)}") from None
    body = {
        "mechanism": args.mechanism,
        "iterations": args.iterations,
        "salt": base64.b64encode(salt).decode(),
        "salted_password": base64.b64encode(salted).decode(),
    }
    with _client(args) as c:
        _check(c.put(f"/users/{args.user}", json=body))
    print(f"Completed updating config for user {args.user}.")
    return 0


def _add_user_in_zookeeper(args: argparse.Namespace, password: str) -> int:
    """Before the brokers run (the inter-broker user, the first admin): write the
    credential to ZooKeeper directly, as `kafka-configs.sh --zookeeper` does."""
    from loglake.coordination.zookeeper import ZooKeeperMetadataStore

    try:
        credential = scram.new_credential(args.mechanism, password, args.iterations)
    except ValueError as exc:
        raise CliError(str(exc)) from None
    store = ZooKeeperMetadataStore(args.zookeeper_connect)
    try:
        store.update_user_credentials(args.user, lambda current: current | {args.mechanism: credential.to_config()})
    finally:
        store.close()
    print(f"Completed updating config for user {args.user}.")
    return 0


def cmd_users_list(args: argparse.Namespace) -> int:
    with _client(args) as c:
        users = _check(c.get("/users"))
    for u in users:
        described = ", ".join(f"{x['mechanism']}=iterations={x['iterations']}" for x in u["credentials"])
        print(f"SCRAM credential configs for user-principal '{u['user']}' are {described}")
    return 0


def cmd_users_delete(args: argparse.Namespace) -> int:
    with _client(args) as c:
        _check(c.delete(f"/users/{args.user}", params={"mechanism": args.mechanism} if args.mechanism else None))
    print(f"Completed updating config for user {args.user}.")
    return 0


# quotas ------------------------------------------------------------------------------------


def _quota_entity(args: argparse.Namespace) -> str:
    if args.user and args.client_id:
        return f"users/{args.user}/clients/{args.client_id}"
    if args.user:
        return f"users/{args.user}"
    if args.client_id:
        return f"clients/{args.client_id}"
    raise CliError("give --user and/or --client-id (<default> for the defaults)")


def cmd_quotas_alter(args: argparse.Namespace) -> int:
    """As kafka-configs.sh --alter --entity-type users|clients --add-config producer_byte_rate=..."""
    changes = {**parse_overrides(args.add_config), **{k: "" for k in args.delete_config}}
    if not changes:
        raise CliError("nothing to alter: give --add-config k=v or --delete-config k")
    entity = _quota_entity(args)
    with _client(args) as c:
        _check(c.patch(f"/quotas/{entity}", json={"configs": changes}))
    print(f"Completed updating config for entity {entity}.")
    return 0


def cmd_quotas_describe(args: argparse.Namespace) -> int:
    with _client(args) as c:
        quotas = _check(c.get("/quotas"))
    for entity, configs in quotas.items():
        print(f"Quota configs for {entity} are " + ", ".join(f"{k}={v}" for k, v in sorted(configs.items())))
    return 0


# acls --------------------------------------------------------------------------------------

_ACL_FIELDS = ("resource_type", "resource_name", "pattern_type", "principal", "host", "operation", "permission")


def _acl_args(args: argparse.Namespace) -> dict[str, str]:
    return {f: getattr(args, f) for f in _ACL_FIELDS if getattr(args, f, None) is not None}


def cmd_acls_list(args: argparse.Namespace) -> int:
    with _client(args) as c:
        acls = _check(c.get("/acls", params=_acl_args(args)))
    rows = [["RESOURCE", "PATTERN", "PRINCIPAL", "HOST", "OPERATION", "PERMISSION"]]
    for a in acls:
        rows.append(
            [
                f"{a['resource_type']}:{a['resource_name']}",
                a["pattern_type"],
                a["principal"],
                a["host"],
                a["operation"],
                a["permission"],
            ]
        )
    _print_table(rows)
    return 0


def cmd_acls_add(args: argparse.Namespace) -> int:
    with _client(args) as c:
        added = _check(c.post("/acls", json=_acl_args(args)))
    print(
        f"Added ACL: {added['permission']} {added['principal']} {added['operation']} on {added['resource_type']}:{added['resource_name']} ({added['pattern_type']})"
    )
    return 0


def cmd_acls_remove(args: argparse.Namespace) -> int:
    with _client(args) as c:
        _check(c.delete("/acls", params=_acl_args(args)))
    print("Removed the matching ACLs.")
    return 0


# parser ------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="loglake", description="loglake: Kafka semantics, a Spark-native log.")
    sub = parser.add_subparsers(dest="command", required=True)

    def http_command(subparsers, name: str, help: str) -> argparse.ArgumentParser:
        p = subparsers.add_parser(name, help=help)
        p.add_argument("--bootstrap-http", default=DEFAULT_HTTP, help=f"broker HTTP address (default {DEFAULT_HTTP})")
        return p

    broker = sub.add_parser("broker", help="run a broker").add_subparsers(dest="action", required=True)
    start = broker.add_parser("start", help="run a broker in the foreground")
    start.add_argument("--config", help="server.properties")
    start.add_argument("--override", action="append", default=[], metavar="KEY=VALUE")
    start.add_argument(
        "--log-level",
        default="INFO",
        type=str.upper,
        choices=LOG_LEVELS,
        help="the broker's log level (default INFO)",
    )
    start.set_defaults(func=cmd_broker_start)

    topics = sub.add_parser("topics", help="create, list, describe, alter, delete topics").add_subparsers(
        dest="action", required=True
    )
    p = http_command(topics, "create", "create a topic")
    p.add_argument("--topic", required=True)
    p.add_argument("--partitions", type=int)
    p.add_argument("--replication-factor", type=int)
    p.add_argument("--config", action="append", default=[], metavar="KEY=VALUE")
    p.set_defaults(func=cmd_topics_create)
    p = http_command(topics, "list", "list topics")
    p.set_defaults(func=cmd_topics_list)
    p = http_command(topics, "describe", "describe topics")
    p.add_argument("--topic")
    p.set_defaults(func=cmd_topics_describe)
    p = http_command(topics, "delete", "delete a topic")
    p.add_argument("--topic", required=True)
    p.set_defaults(func=cmd_topics_delete)
    p = http_command(topics, "alter", "add partitions or change configs")
    p.add_argument("--topic", required=True)
    p.add_argument("--partitions", type=int)
    p.add_argument("--config", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--delete-config", action="append", default=[], metavar="KEY")
    p.add_argument("--replication-factor", type=int, help="reassign every partition to this many replicas")
    p.set_defaults(func=cmd_topics_alter)

    cluster = sub.add_parser("cluster", help="cluster state").add_subparsers(dest="action", required=True)
    p = http_command(cluster, "status", "brokers, controller, leaders, ISR, under-replicated and offline partitions")
    p.set_defaults(func=cmd_cluster_status)

    groups = sub.add_parser("groups", help="list, describe, reset offsets of, delete consumer groups").add_subparsers(
        dest="action", required=True
    )
    p = http_command(groups, "list", "list consumer groups")
    p.set_defaults(func=cmd_groups_list)
    p = http_command(groups, "describe", "members, committed offsets, log end offsets and lag")
    p.add_argument("--group")
    p.set_defaults(func=cmd_groups_describe)
    p = http_command(groups, "reset-offsets", "move an inactive group's committed offsets")
    p.add_argument("--group", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--partitions", help="comma-separated partitions (default: all)")
    to = p.add_mutually_exclusive_group(required=True)
    to.add_argument("--to-earliest", action="store_true")
    to.add_argument("--to-latest", action="store_true")
    to.add_argument("--to-offset", type=int)
    p.set_defaults(func=cmd_groups_reset_offsets)
    p = http_command(groups, "delete", "delete an inactive group and its offsets")
    p.add_argument("--group", required=True)
    p.set_defaults(func=cmd_groups_delete)

    brokers = sub.add_parser("brokers", help="operate on brokers").add_subparsers(dest="action", required=True)
    p = http_command(brokers, "drain", "move every replica and leadership off a broker before retiring it")
    p.add_argument("--broker", type=int, required=True)
    p.add_argument("--timeout", type=float, default=600, help="seconds to wait for the broker to empty (default 600)")
    p.set_defaults(func=cmd_brokers_drain)

    reassign = sub.add_parser(
        "reassign", help="move partitions between brokers (as kafka-reassign-partitions.sh)"
    ).add_subparsers(dest="action", required=True)
    p = http_command(reassign, "generate", "propose a plan spreading topics over brokers")
    p.add_argument("--topics", required=True, help="comma-separated topics")
    p.add_argument("--brokers", required=True, help="comma-separated broker ids")
    p.add_argument("--replication-factor", type=int, help="default: each topic's current one")
    p.set_defaults(func=cmd_reassign_generate)
    commands = {}
    for name, help_text, func in (
        ("execute", "start the plan's reassignments (prints the current assignment first)", cmd_reassign_execute),
        (
            "verify",
            "each partition of the plan: completed (then throttles are removed) or in progress",
            cmd_reassign_verify,
        ),
        ("cancel", "cancel the plan's reassignments in progress", cmd_reassign_cancel),
    ):
        p = commands[name] = http_command(reassign, name, help_text)
        p.add_argument("--plan", required=True, help="a plan JSON file")
        p.set_defaults(func=func)
    commands["execute"].add_argument(
        "--throttle", type=int, help="bytes/s for moving replicas (leader and follower replication throttles)"
    )
    commands["verify"].add_argument(
        "--preserve-throttles", action="store_true", help="keep the throttles after the plan completes"
    )

    users = sub.add_parser("users", help="SASL/SCRAM users (as kafka-configs.sh --entity-type users)").add_subparsers(
        dest="action", required=True
    )
    p = http_command(users, "add", "add or replace a user's SCRAM credential")
    p.add_argument("--user", required=True)
    p.add_argument("--password", required=True, help="the password, or - to read one line from stdin")
    p.add_argument("--mechanism", default="SCRAM-SHA-512", choices=sorted(scram.MECHANISMS))
    p.add_argument("--iterations", type=int, default=scram.DEFAULT_ITERATIONS)
    p.add_argument("--zookeeper-connect", help="write to ZooKeeper directly (before the brokers run)")
    p.set_defaults(func=cmd_users_add)
    p = http_command(users, "list", "users and their SCRAM mechanisms")
    p.set_defaults(func=cmd_users_list)
    p = http_command(users, "delete", "remove a user's credential (one mechanism, or all)")
    p.add_argument("--user", required=True)
    p.add_argument("--mechanism", choices=sorted(scram.MECHANISMS))
    p.set_defaults(func=cmd_users_delete)

    acls = sub.add_parser("acls", help="list, add, remove ACLs (as kafka-acls.sh)").add_subparsers(
        dest="action", required=True
    )
    for name, help_text, func in (
        ("list", "the ACLs matching the filter given", cmd_acls_list),
        ("add", "add one ACL", cmd_acls_add),
        ("remove", "remove the ACLs matching the filter given", cmd_acls_remove),
    ):
        p = http_command(acls, name, help_text)
        p.add_argument("--resource-type", dest="resource_type", help="Topic, Group, Cluster, TransactionalId")
        p.add_argument("--resource-name", dest="resource_name", help="a name (kafka-cluster for the Cluster), or *")
        p.add_argument("--pattern-type", dest="pattern_type", help="literal (default) or prefixed")
        p.add_argument("--principal", help="User:alice, or User:*")
        p.add_argument("--host", help="* (default) or an address")
        p.add_argument("--operation", help="Read, Write, Create, Delete, Alter, Describe, ClusterAction, ... or All")
        p.add_argument("--permission", help="allow (default) or deny")
        p.set_defaults(func=func)

    quotas = sub.add_parser(
        "quotas", help="client quotas: producer_byte_rate, consumer_byte_rate (as kafka-configs.sh)"
    ).add_subparsers(dest="action", required=True)
    p = http_command(quotas, "alter", "set or remove quotas of a user and/or client id")
    p.add_argument("--user", help="a user name, or <default>")
    p.add_argument("--client-id", help="a client id, or <default>")
    p.add_argument("--add-config", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--delete-config", action="append", default=[], metavar="KEY")
    p.set_defaults(func=cmd_quotas_alter)
    p = http_command(quotas, "describe", "every quota set")
    p.set_defaults(func=cmd_quotas_describe)

    txns = sub.add_parser(
        "transactions", help="list, describe, find hanging and abort transactions (as kafka-transactions.sh)"
    ).add_subparsers(dest="action", required=True)
    p = http_command(txns, "list", "every transactional id, its coordinator, producer id and state")
    p.set_defaults(func=cmd_transactions_list)
    p = http_command(txns, "describe", "one transactional id at its coordinator")
    p.add_argument("--transactional-id", required=True)
    p.set_defaults(func=cmd_transactions_describe)
    p = http_command(txns, "describe-producers", "the producers of a partition and their open transactions")
    p.add_argument("--topic", required=True)
    p.add_argument("--partition", type=int, required=True)
    p.set_defaults(func=cmd_transactions_describe_producers)
    p = http_command(txns, "find-hanging", "open transactions on a broker's partitions that nothing will end")
    p.add_argument("--broker-id", type=int, required=True)
    p.add_argument(
        "--max-transaction-timeout",
        type=int,
        default=DEFAULT_MAX_TRANSACTION_TIMEOUT_MINUTES,
        help=f"minutes after which an open transaction hangs (default {DEFAULT_MAX_TRANSACTION_TIMEOUT_MINUTES})",
    )
    p.set_defaults(func=cmd_transactions_find_hanging)
    p = http_command(txns, "abort", "write the ABORT marker of a hanging transaction")
    p.add_argument("--topic", required=True)
    p.add_argument("--partition", type=int, required=True)
    p.add_argument("--start-offset", type=int, required=True)
    p.set_defaults(func=cmd_transactions_abort)

    p = http_command(sub, "produce", "produce lines from stdin")
    p.add_argument("--topic", required=True)
    p.add_argument("--partition", type=int)
    p.add_argument("--acks", default="1", choices=["0", "1", "all", "-1"])
    p.add_argument("--parse-key", action="store_true", help="split each line into key and value")
    p.add_argument("--key-separator", default="\t")
    p.set_defaults(func=cmd_produce)

    p = http_command(sub, "consume", "print records to stdout")
    p.add_argument("--topic", required=True)
    p.add_argument("--partition", type=int)
    start_at = p.add_mutually_exclusive_group()
    start_at.add_argument("--from-beginning", action="store_true")
    start_at.add_argument("--offset", type=int)
    p.add_argument("--follow", action="store_true", help="keep waiting for new records")
    p.add_argument("--max-messages", type=int)
    p.add_argument("--max-bytes", type=int, default=1048576)
    p.add_argument("--print-key", action="store_true")
    p.add_argument("--key-separator", default="\t")
    p.set_defaults(func=cmd_consume)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except CliError as exc:
        print(f"loglake: {exc}", file=sys.stderr)
        return 1
    except httpx.TransportError as exc:
        print(f"loglake: cannot reach the broker at {args.bootstrap_http}: {exc}", file=sys.stderr)
        return 1
    except (ValueError, KeyboardInterrupt) as exc:
        print(f"loglake: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
