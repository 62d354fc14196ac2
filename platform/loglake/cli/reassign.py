"""`loglake reassign` (as kafka-reassign-partitions.sh) and `loglake brokers drain`: plans of
partition replicas, submitted to the controller through a broker's HTTP API, and replication
throttles while they move."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from typing import Any

import httpx
import orjson

from loglake.broker_configs import REPLICATION_THROTTLE_RATES
from loglake.cli.common import (
    CliError,
    broker_urls,
    check,
    client,
    command_group,
    http_client,
    http_command,
    print_json,
)
from loglake.cluster.assignment import assign_replicas
from loglake.cluster.replication_quota import THROTTLED_REPLICAS


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


def make_plan(entries: Sequence[tuple[str, int, list[int] | None]]) -> dict[str, Any]:
    return {"version": 1, "partitions": [{"topic": t, "partition": p, "replicas": r} for t, p, r in entries]}


def submit_plan(c: httpx.Client, plan: dict[str, Any]) -> int:
    """POST the plan; print each partition's outcome; 1 if any was refused."""
    failed = 0
    for r in check(c.post("/reassignments", json=plan))["partitions"]:
        if r["error"] is None:
            print(f"{r['topic']}-{r['partition']}: accepted")
        else:
            failed += 1
            print(f"{r['topic']}-{r['partition']}: {r['error']}: {r['message']}", file=sys.stderr)
    return 1 if failed else 0


def current_assignment(c: httpx.Client) -> dict[tuple[str, int], list[int]]:
    return {(p["topic"], p["partition"]): p["replicas"] for p in check(c.get("/cluster"))["partitions"]}


def cmd_reassign_generate(args: argparse.Namespace) -> int:
    """As kafka-reassign-partitions.sh --generate: the current assignment of the topics and
    a proposal spreading them round-robin over the given brokers (over their racks too,
    when every one has a `broker.rack`)."""
    topics = [t for t in args.topics.split(",") if t]
    brokers = sorted({int(b) for b in args.brokers.split(",") if b})
    with client(args) as c:
        current = current_assignment(c)
        racks = {b["broker_id"]: b.get("rack") for b in check(c.get("/cluster"))["brokers"]}
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
    print_json(make_plan([(t, p, current[(t, p)]) for t, p, _ in proposal]))
    print("\nProposed partition reassignment configuration")
    print_json(make_plan(proposal))
    return 0


def cmd_reassign_execute(args: argparse.Namespace) -> int:
    plan = _read_plan(args.plan)
    with client(args) as c:
        current = current_assignment(c)
        print("Current partition replica assignment (save it to roll back)")
        print_json(
            make_plan(
                [(e["topic"], e["partition"], current.get((e["topic"], e["partition"]))) for e in plan["partitions"]]
            )
        )
        if args.throttle is not None:
            _set_throttles(c, plan, current, args.throttle, args.throttle_wait)
        return submit_plan(c, plan)


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
        if existing is None:
            continue
        adding = [b for b in e["replicas"] or () if b not in existing]
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


def _set_throttles(
    c: httpx.Client, plan: dict[str, Any], current: dict[tuple[str, int], list[int]], rate: int, wait: float
) -> None:
    if rate < 1:
        raise CliError(f"--throttle must be a positive number of bytes/s, not {rate}")
    configs, brokers = _throttle_plan(plan, current)
    for topic, config in configs.items():
        check(c.patch(f"/topics/{topic}", json={"configs": config}))
    for b in sorted(brokers):
        check(c.patch(f"/brokers/{b}/configs", json={"configs": dict.fromkeys(REPLICATION_THROTTLE_RATES, str(rate))}))
    _await_throttles(broker_urls(c), configs, brokers, rate, wait)
    print(f"Throttling replication of the moving replicas to {rate} B/s on brokers {sorted(brokers)}")


def _await_throttles(
    urls: dict[int, str], configs: dict[str, dict[str, str]], brokers: set[int], rate: int, wait: float
) -> None:
    """Wait until each involved broker reports the throttle applied: it applies the stored
    configs only on the store's notification, and a move started before then runs unthrottled."""
    rates = dict.fromkeys(REPLICATION_THROTTLE_RATES, rate)
    deadline = time.monotonic() + wait
    for b in sorted(brokers):
        if b not in urls:
            raise CliError(f"broker {b} is not alive; no reassignment was submitted")
        with http_client(urls[b], wait) as bc:
            while True:
                try:
                    applied = check(bc.get("/replication-throttles", timeout=max(deadline - time.monotonic(), 0.1)))
                    seen = f"rates {applied['rates']}, topics {applied['topics']}"
                    if applied["rates"] == rates and all(applied["topics"].get(t) == v for t, v in configs.items()):
                        break
                except httpx.HTTPError as exc:
                    seen = f"no answer ({exc.__class__.__name__})"
                if time.monotonic() >= deadline:
                    raise CliError(
                        f"broker {b} has not applied the replication throttle after {wait:g}s ({seen}); "
                        "no reassignment was submitted"
                    )
                time.sleep(0.1)


def _remove_throttles(c: httpx.Client, topics: set[str]) -> None:
    """What `verify` does once a plan is complete: no throttle left on any broker or topic."""
    for topic in sorted(topics):
        config = check(c.get(f"/topics/{topic}"))["configs"]
        if any(config.get(n) for n in THROTTLED_REPLICAS):
            check(c.patch(f"/topics/{topic}", json={"configs": dict.fromkeys(THROTTLED_REPLICAS, "")}))
    for b in broker_urls(c):
        stored = check(c.get(f"/brokers/{b}/configs"))["configs"]
        if any(n in stored for n in REPLICATION_THROTTLE_RATES):
            check(c.patch(f"/brokers/{b}/configs", json={"configs": dict.fromkeys(REPLICATION_THROTTLE_RATES, "")}))
    print("Throttles removed.")


def cmd_reassign_verify(args: argparse.Namespace) -> int:
    """Each partition of the plan: complete, still in progress, or not as planned; when all
    are complete, the replication throttles are removed (unless --preserve-throttles)."""
    plan = _read_plan(args.plan)
    with client(args) as c:
        ongoing = {(r["topic"], r["partition"]) for r in check(c.get("/reassignments"))["partitions"]}
        current = current_assignment(c)
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
    with client(args) as c:
        return submit_plan(c, make_plan([(e["topic"], e["partition"], None) for e in plan["partitions"]]))


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
    with client(args) as c:
        brokers = sorted(b["broker_id"] for b in check(c.get("/cluster"))["brokers"])
        if args.broker not in brokers:
            raise CliError(f"broker {args.broker} is not alive")
        targets = _drain_plan(current_assignment(c), args.broker, brokers)
        if targets:
            print(f"Moving {len(targets)} partition(s) off broker {args.broker}")
            if submit_plan(c, make_plan(targets)):
                return 1
        deadline = time.monotonic() + args.timeout
        while True:
            status = check(c.get("/cluster"))
            hosting = [p for p in status["partitions"] if args.broker in p["replicas"] or p["leader"] == args.broker]
            if not hosting and not check(c.get("/reassignments"))["partitions"]:
                print(f"Broker {args.broker} holds no replica and leads nothing.")
                return 0
            if time.monotonic() > deadline:
                raise CliError(f"broker {args.broker} still hosts {len(hosting)} partition(s) after {args.timeout}s")
            time.sleep(0.5)


def replication_factor_plan(
    current: dict[tuple[str, int], list[int]], topic: str, rf: int, brokers: list[int]
) -> list[tuple[str, int, list[int]]]:
    """Targets giving every partition of `topic` `rf` replicas (`loglake topics alter
    --replication-factor`): the current ones kept (the preferred leader first), brokers added
    where they host the fewest replicas, or the last ones dropped."""
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


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`brokers drain`, then `reassign`."""
    brokers = command_group(subparsers, "brokers", "operate on brokers")
    p = http_command(
        brokers, "drain", "move every replica and leadership off a broker before retiring it", cmd_brokers_drain
    )
    p.add_argument("--broker", type=int, required=True)
    p.add_argument("--timeout", type=float, default=600, help="seconds to wait for the broker to empty (default 600)")

    reassign = command_group(
        subparsers, "reassign", "move partitions between brokers (as kafka-reassign-partitions.sh)"
    )
    p = http_command(reassign, "generate", "propose a plan spreading topics over brokers", cmd_reassign_generate)
    p.add_argument("--topics", required=True, help="comma-separated topics")
    p.add_argument("--brokers", required=True, help="comma-separated broker ids")
    p.add_argument("--replication-factor", type=int, help="default: each topic's current one")
    commands: dict[str, argparse.ArgumentParser] = {}
    for name, help_text, func in (
        ("execute", "start the plan's reassignments (prints the current assignment first)", cmd_reassign_execute),
        (
            "verify",
            "each partition of the plan: completed (then throttles are removed) or in progress",
            cmd_reassign_verify,
        ),
        ("cancel", "cancel the plan's reassignments in progress", cmd_reassign_cancel),
    ):
        p = commands[name] = http_command(reassign, name, help_text, func)
        p.add_argument("--plan", required=True, help="a plan JSON file")
    commands["execute"].add_argument(
        "--throttle", type=int, help="bytes/s for moving replicas (leader and follower replication throttles)"
    )
    commands["execute"].add_argument(
        "--throttle-wait",
        type=float,
        default=30,
        help="seconds to wait for every involved broker to apply the throttle before submitting (default 30)",
    )
    commands["verify"].add_argument(
        "--preserve-throttles", action="store_true", help="keep the throttles after the plan completes"
    )
