"""The controller's handling of log dir failures (KIP-112): leaders move within the ISR,
ISRs shrink, the failed replicas stay out until their broker restarts."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from test_controller import bounce, make_controller


def test_a_failed_log_dir_moves_leadership_to_the_isr_and_shrinks_it(tmp_path: Path) -> None:
    controller, store, channel = make_controller(tmp_path, brokers=(1, 2, 3))
    controller.create_topic("events", 3, 3)
    before = store.partition_states("events")
    led_by_2 = sorted(p for p, s in before.items() if s.leader == 2)
    followed_by_2 = sorted(p for p, s in before.items() if s.leader != 2)
    assert led_by_2 and followed_by_2
    channel.leader_and_isr.clear()
    store.notify_log_dir_failure(2, [("events", p) for p in range(3)])
    controller.on_log_dir_failures()
    states = store.partition_states("events")
    for p in led_by_2:
        assert states[p].leader in (1, 3) and states[p].leader in before[p].isr
        assert states[p].leader_epoch == before[p].leader_epoch + 1
    for p in followed_by_2:
        assert states[p].leader == before[p].leader and states[p].leader_epoch == before[p].leader_epoch + 1
    assert all(2 not in s.isr and len(s.isr) == 2 for s in states.values())
    told = {(b, e.partition): e.state for b, _, entries in channel.leader_and_isr for e in entries}
    assert {p for b, p in told if b == 2} == {0, 1, 2}, "the failed broker learns the new leaders"
    assert all(told[(b, p)] == states[p] for b, p in told)
    assert store.take_log_dir_failures() == []
    # A broker failure later does not hand leadership to the offline replica.
    set_isr(store, (1, 2, 3))
    leader_3 = [p for p, s in store.partition_states("events").items() if s.leader == 3]
    controller.on_brokers_changed({1: -1, 2: -1})
    assert all(store.partition_states("events")[p].leader == 1 for p in leader_3)
    # Restarted (a new registration): its replicas may lead and be in sync again.
    bounce(store, 2, 9)
    controller.on_brokers_changed({1: -1, 2: 9})
    set_isr(store, (1, 2))
    store.notify_log_dir_failure(1, [("events", p) for p in range(3)])
    controller.on_log_dir_failures()
    assert all(s.leader == 2 and s.isr == (2,) for s in store.partition_states("events").values())


def set_isr(store, isr: tuple[int, ...]) -> None:
    """The followers caught up (what their leader would write)."""
    for p, state in store.partition_states("events").items():
        store.update_partition_state("events", p, replace(state, isr=isr), state.version)


def test_without_an_in_sync_replica_elsewhere_the_partition_goes_offline(tmp_path: Path) -> None:
    controller, store, _ = make_controller(tmp_path, brokers=(0,))
    controller.create_topic("solo", 1, 1)
    store.notify_log_dir_failure(0, [("solo", 0)])
    controller.on_log_dir_failures()
    state = store.partition_states("solo")[0]
    assert state.leader == -1 and state.isr == (0,)


def test_a_dead_brokers_failure_and_an_unknown_topic_are_ignored(tmp_path: Path) -> None:
    controller, store, _ = make_controller(tmp_path, brokers=(1, 2))
    controller.create_topic("events", 1, 2)
    before = store.partition_states("events")
    store.notify_log_dir_failure(7, [("events", 0)])
    store.notify_log_dir_failure(1, [("gone", 0)])
    controller.on_log_dir_failures()
    assert store.partition_states("events") == before
    assert store.take_log_dir_failures() == []


def test_failures_notified_while_no_controller_was_active_are_handled_at_election(tmp_path: Path) -> None:
    controller, store, _ = make_controller(tmp_path, brokers=(1, 2))
    controller.create_topic("events", 2, 2)
    controller.resign()
    store.notify_log_dir_failure(1, [("events", 0), ("events", 1)])
    assert controller.startup()
    states = store.partition_states("events")
    assert all(s.leader == 2 and s.isr == (2,) for s in states.values())
