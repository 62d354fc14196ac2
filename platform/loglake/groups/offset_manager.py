"""Committed offsets (Kafka's OffsetMetadataManager): OffsetCommit, TxnOffsetCommit and their
transaction markers, OffsetFetch, OffsetDelete and offset expiry.

A group's committed offsets live in its `GroupMetadata` (a consumer-protocol group's in the
Empty classic group of the same id that only holds them), with the plain commits still being
written (`GroupMetadata.commits_in_flight`, by write id): an offset being written never
expires, a group with one is not retired, and a stable OffsetFetch waits for those in flight
when it came.

Transactional offset commits (TxnOffsetCommit) are written as Kafka writes them: a batch of
the producer's transaction in the group's `__consumer_offsets` partition. They are held per
producer id and become the group's offsets only when the transaction's COMMIT marker reaches
that partition (`complete_txn`); an ABORT drops them. Loading a partition holds those whose
transaction is still open the same way (`install`).

The caller (the `GroupCoordinator`) has checked that the group's partition is served here.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections import defaultdict
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator, Mapping, Sequence

from loglake.errors import ErrorCode
from loglake.groups.api import (
    GroupState,
    OffsetAndMetadata,
    OffsetCommitData,
    OffsetDeleteResult,
    OffsetFetchResult,
    PartitionOffset,
    TopicPartition,
)
from loglake.groups.assignors import CONSUMER_PROTOCOL_TYPE
from loglake.groups.classic_manager import ClassicGroupManager
from loglake.groups.config import GroupConfig
from loglake.groups.consumer_group import (
    ConsumerGroup,
    TopicSnapshot,
    validate_offset_commit,
    validate_offset_fetch,
)
from loglake.groups.group import GroupMetadata
from loglake.groups.records import (
    GroupMetadataKey,
    OffsetCommitKey,
    OffsetCommitValue,
    decode_key,
    decode_offset_commit_value,
    encode_key,
    encode_offset_commit_value,
)
from loglake.groups.runtime import GroupLog
from loglake.internal_topics import PartitionLoads

log = logging.getLogger(__name__)

# The newest OffsetCommit version (v9 carries KIP-848 member epochs); callers outside the
# Kafka protocol (the HTTP consumer, offset resets) commit as it.
LATEST_OFFSET_COMMIT_VERSION = 9


def _utf16_length(s: str) -> int:
    # Kafka bounds metadata by Java's String.length(), i.e. UTF-16 code units, not bytes.
    return len(s.encode("utf-16-le")) // 2


def stored_offset(value: OffsetCommitValue) -> OffsetAndMetadata:
    """An offset commit record's value as the coordinator keeps it."""
    return OffsetAndMetadata(
        value.offset, value.leader_epoch, value.metadata, value.commit_timestamp, value.expire_timestamp
    )


def _offset_record(group_id: str, tp: TopicPartition, o: OffsetAndMetadata) -> tuple[bytes, bytes | None]:
    return (
        encode_key(OffsetCommitKey(group_id, tp.topic, tp.partition)),
        encode_offset_commit_value(
            OffsetCommitValue(o.offset, o.leader_epoch, o.metadata, o.commit_timestamp, o.expire_timestamp)
        ),
    )


@dataclass(frozen=True)
class Committer:
    """Who commits offsets: a group's member (its member id, generation id or member epoch,
    instance id if static) or, with generation -1 and no member id, a client outside group
    management; `api_version` is its request's (a consumer group checks it)."""

    member_id: str
    generation_id: int
    group_instance_id: str | None
    api_version: int


class OffsetManager:
    """The offsets of the groups that `classic` holds. `consumer_group` looks up the
    consumer-protocol group of an id (None for a classic or unknown one), whose members'
    commits and fetches are checked against it; `partitions` says which partitions are
    still served (tombstones are only written for those)."""

    def __init__(
        self,
        config: GroupConfig,
        log: GroupLog,
        classic: ClassicGroupManager,
        consumer_group: Callable[[str], ConsumerGroup | None],
        partitions: PartitionLoads,
        now_ms: Callable[[], int],
    ) -> None:
        self._config = config
        self._log = log
        self._classic = classic
        self._consumer_group = consumer_group
        self._partitions = partitions
        self._now_ms = now_ms
        # Producer id -> group id -> offsets of its open transaction (TxnOffsetCommit).
        self._pending_txn_offsets: dict[int, dict[str, dict[TopicPartition, OffsetAndMetadata]]] = {}
        # Write ids of the plain commits (GroupMetadata.commits_in_flight), and a condition
        # notified as each ends.
        self._write_ids = itertools.count()
        self._commit_writes = asyncio.Condition()

    # ---------------------------------------------------------------- loading

    def install(
        self,
        offsets: Mapping[tuple[str, TopicPartition], OffsetCommitValue],
        open_txns: Mapping[int, list[tuple[bytes, bytes | None]]],
    ) -> None:
        """A loaded partition's offsets: each group's (in an Empty group for those that only
        store offsets), and the offsets of transactions with no marker yet, held until it comes."""
        per_group: dict[str, dict[TopicPartition, OffsetAndMetadata]] = defaultdict(dict)
        for (group_id, tp), value in offsets.items():
            per_group[group_id][tp] = stored_offset(value)
        for group_id, group_offsets in per_group.items():
            group = self._classic.group(group_id) or self._classic.add_empty(group_id)
            group.offsets = group_offsets
        for producer_id, records in open_txns.items():
            for key_bytes, value_bytes in records:
                key = decode_key(key_bytes)
                if isinstance(key, OffsetCommitKey) and value_bytes is not None:
                    held = self._pending_txn_offsets.setdefault(producer_id, {}).setdefault(key.group, {})
                    held[TopicPartition(key.topic, key.partition)] = stored_offset(
                        decode_offset_commit_value(value_bytes)
                    )

    # ---------------------------------------------------------------- commits

    async def commit(
        self, group_id: str, committer: Committer, offsets: Mapping[TopicPartition, OffsetCommitData]
    ) -> dict[TopicPartition, ErrorCode]:
        """OffsetCommit (see `GroupCoordinator.commit_offsets`)."""
        group, error = self._group_to_commit(group_id, committer, transactional=False)
        if group is None:
            return {tp: error for tp in offsets}
        self._classic.on_offset_commit(group, committer.member_id)
        valid = self._valid(offsets)
        if not valid:
            return {tp: ErrorCode.OFFSET_METADATA_TOO_LARGE for tp in offsets}
        records = [_offset_record(group_id, tp, o) for tp, o in valid.items()]
        write_id = next(self._write_ids)
        group.commits_in_flight[write_id] = frozenset(valid)
        written: ErrorCode | None = None  # still None if the write raised (cancelled)
        try:
            written = await self._log.append(self._log.partition_for(group_id), records, for_offsets=True)
        finally:
            del group.commits_in_flight[write_id]
            live = self._classic.group(group_id)
            # Not for a group deleted or unloaded meanwhile; a group converted meanwhile shares its offsets.
            if written is ErrorCode.NONE and live is not None and live.offsets is group.offsets:
                live.offsets.update(valid)
            async with self._commit_writes:
                self._commit_writes.notify_all()
        return {tp: written if tp in valid else ErrorCode.OFFSET_METADATA_TOO_LARGE for tp in offsets}

    async def commit_txn(
        self,
        group_id: str,
        producer: tuple[int, int],
        committer: Committer,
        offsets: Mapping[TopicPartition, OffsetCommitData],
    ) -> dict[TopicPartition, ErrorCode]:
        """TxnOffsetCommit (see `GroupCoordinator.commit_txn_offsets`); `producer` is its
        (producer id, producer epoch)."""
        group, error = self._group_to_commit(group_id, committer, transactional=True)
        if group is None:
            return {tp: error for tp in offsets}
        valid = self._valid(offsets)
        if valid:
            records = [_offset_record(group_id, tp, o) for tp, o in valid.items()]
            error = await self._log.append(
                self._log.partition_for(group_id), records, for_offsets=True, producer=producer
            )
            if error is not ErrorCode.NONE:
                return {tp: error if tp in valid else ErrorCode.OFFSET_METADATA_TOO_LARGE for tp in offsets}
            self._pending_txn_offsets.setdefault(producer[0], {}).setdefault(group_id, {}).update(valid)
        return {tp: ErrorCode.NONE if tp in valid else ErrorCode.OFFSET_METADATA_TOO_LARGE for tp in offsets}

    def complete_txn(self, producer_id: int, commit: bool, partition: int) -> None:
        """The producer's COMMIT/ABORT marker was written on `__consumer_offsets-partition`:
        its held offsets of the groups there become the groups' or are dropped."""
        by_group = self._pending_txn_offsets.get(producer_id, {})
        for group_id in [g for g in by_group if self._log.partition_for(g) == partition]:
            offsets = by_group.pop(group_id)
            group = self._classic.group(group_id)
            if commit and group is not None and group.state is not GroupState.DEAD:
                group.offsets.update(offsets)
        if not by_group:
            self._pending_txn_offsets.pop(producer_id, None)

    def _valid(self, offsets: Mapping[TopicPartition, OffsetCommitData]) -> dict[TopicPartition, OffsetAndMetadata]:
        """The offsets whose metadata fits offset.metadata.max.bytes, as they are stored."""
        now = self._now_ms()
        max_length = self._config.offset_metadata_max_bytes
        valid = {}
        for tp, data in offsets.items():
            metadata = data.metadata or ""
            if _utf16_length(metadata) <= max_length:
                commit_timestamp = now if data.commit_timestamp == -1 else data.commit_timestamp
                valid[tp] = OffsetAndMetadata(
                    data.offset, data.leader_epoch, metadata, commit_timestamp, data.expire_timestamp
                )
        return valid

    def _group_to_commit(
        self, group_id: str, committer: Committer, transactional: bool
    ) -> tuple[GroupMetadata | None, ErrorCode]:
        """The group an offset commit goes to, created for a "simple" commit (generation
        -1), once the committer is checked against it (a consumer group's member against
        that group); or None and why not. A transactional commit by a producer outside the
        group (generation -1, no member id: KIP-447's older clients) is not checked."""
        generation_id = committer.generation_id
        checked = not transactional or generation_id >= 0 or bool(committer.member_id)
        consumer_group = self._consumer_group(group_id)
        if consumer_group is not None:
            if checked:
                error = validate_offset_commit(
                    consumer_group, committer.member_id, generation_id, transactional, committer.api_version
                )
                if error is not ErrorCode.NONE:
                    return None, error
            generation_id = -1  # its offsets go to the Empty classic group that holds them
        group = self._classic.group(group_id)
        if group is None:
            if generation_id >= 0:
                # A member of a generation this coordinator never had (e.g. an old one).
                return None, ErrorCode.ILLEGAL_GENERATION
            group = self._classic.add_empty(group_id)
        if consumer_group is None and checked:
            member_error = group.validate_offset_commit(committer.member_id, committer.group_instance_id, generation_id)
            if member_error is not None:
                return None, member_error
        return group, ErrorCode.NONE

    # ---------------------------------------------------------------- reads

    async def fetch(
        self,
        group_id: str,
        partitions: Iterable[TopicPartition] | None,
        require_stable: bool,
        member: tuple[str | None, int] | None,
    ) -> OffsetFetchResult:
        """OffsetFetch (see `GroupCoordinator.fetch_offsets`)."""
        consumer_group = self._consumer_group(group_id)
        if consumer_group is not None and member is not None:
            member_error = validate_offset_fetch(consumer_group, *member)
            if member_error is not ErrorCode.NONE:
                return OffsetFetchResult(member_error)
        if require_stable:
            await self._wait_for_commits_in_flight(group_id, partitions)
        group = self._classic.group(group_id)
        if group is None or group.state is GroupState.DEAD:
            return OffsetFetchResult(ErrorCode.NONE, {tp: PartitionOffset(-1, -1, "") for tp in partitions or ()})
        wanted = sorted(group.offsets) if partitions is None else list(partitions)
        result = {}
        for tp in wanted:
            committed = group.offsets.get(tp)
            if require_stable and self._has_pending_txn_offset(group_id, tp):
                result[tp] = PartitionOffset(-1, -1, "", ErrorCode.UNSTABLE_OFFSET_COMMIT)
            elif committed is None:
                result[tp] = PartitionOffset(-1, -1, "")
            else:
                result[tp] = PartitionOffset(committed.offset, committed.leader_epoch, committed.metadata)
        return OffsetFetchResult(ErrorCode.NONE, result)

    async def _wait_for_commits_in_flight(self, group_id: str, partitions: Iterable[TopicPartition] | None) -> None:
        """Until the group's plain commits being written to `partitions` (None: any) when
        called are done; later ones do not hold it back."""
        group = self._classic.group(group_id)
        if group is None:
            return
        wanted = None if partitions is None else frozenset(partitions)
        # The registry, not the group: a conversion meanwhile hands it to the group's successor.
        in_flight = group.commits_in_flight
        waiting = {write_id for write_id, written in in_flight.items() if wanted is None or written & wanted}
        async with self._commit_writes:
            await self._commit_writes.wait_for(lambda: not waiting & in_flight.keys())

    def _has_pending_txn_offset(self, group_id: str, tp: TopicPartition) -> bool:
        return any(tp in by_group.get(group_id, ()) for by_group in self._pending_txn_offsets.values())

    def committed_offsets(self) -> Iterator[tuple[str, TopicPartition, int]]:
        """(group id, partition, committed offset) of every group held here."""
        for group in self._classic.groups():
            for tp, committed in list(group.offsets.items()):
                yield group.group_id, tp, committed.offset

    # ---------------------------------------------------------------- removal

    async def expire(self, now_ms: int, topics: TopicSnapshot) -> int:
        """Expire offsets past offsets.retention.ms (see `GroupMetadata.remove_expired_offsets`;
        a consumer-protocol group keeps those of the topics its members subscribe to), write
        their tombstones and retire Empty classic groups left with no offsets. Returns how
        many offsets expired."""
        retention = self._config.offsets_retention_ms

        def expire(group: GroupMetadata) -> list[TopicPartition]:
            consumer_group = self._consumer_group(group.group_id)
            subscribed = None if consumer_group is None else consumer_group.subscribed_topics(topics)
            return group.remove_expired_offsets(now_ms, retention, subscribed)

        return await self._cleanup(self._classic.groups(), expire)

    async def delete(self, group_id: str, partitions: Sequence[TopicPartition]) -> OffsetDeleteResult:
        """OffsetDelete (see `GroupCoordinator.delete_offsets`)."""
        group = self._classic.group(group_id)
        consumer_group = self._consumer_group(group_id)
        if consumer_group is not None:
            subscribed = set(consumer_group.subscription_metadata)  # empty without members
        elif group is None or group.state is GroupState.DEAD:
            return OffsetDeleteResult(ErrorCode.GROUP_ID_NOT_FOUND)
        elif group.state is GroupState.EMPTY:
            subscribed = set()
        elif group.protocol_type == CONSUMER_PROTOCOL_TYPE:
            subscribed = {tp.topic for tp in partitions if group.is_subscribed_to(tp.topic)}
        else:
            return OffsetDeleteResult(ErrorCode.NON_EMPTY_GROUP)
        errors = {tp: ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC for tp in partitions if tp.topic in subscribed}
        deletable = [tp for tp in partitions if tp.topic not in subscribed]
        if deletable and group is not None:
            await self._cleanup([group], lambda g: g.remove_offsets(deletable))
        errors.update((tp, ErrorCode.NONE) for tp in deletable)
        return OffsetDeleteResult(ErrorCode.NONE, errors)

    async def delete_groups(self, groups: list[GroupMetadata]) -> None:
        """DeleteGroups of Empty groups (already Dead): their offsets and metadata go."""
        await self._cleanup(groups, GroupMetadata.remove_all_offsets)

    async def _cleanup(
        self, groups: list[GroupMetadata], remove_offsets: Callable[[GroupMetadata], list[TopicPartition]]
    ) -> int:
        """Remove offsets (deletion or expiry), retire Empty groups left without offsets, and
        append the tombstones. Like Kafka, a failed tombstone write is only logged: the
        next expiry pass or coordinator takes care of what is left."""
        tombstones: dict[int, list[tuple[bytes, bytes | None]]] = defaultdict(list)
        removed = 0
        now = self._now_ms()
        for group in groups:
            removed_offsets = remove_offsets(group)
            removed += len(removed_offsets)
            partition = self._log.partition_for(group.group_id)
            tombstones[partition].extend(
                (encode_key(OffsetCommitKey(group.group_id, tp.topic, tp.partition)), None) for tp in removed_offsets
            )
            if group.state is GroupState.EMPTY and not group.has_offsets():
                group.transition_to(GroupState.DEAD, now)
            # Generation 0: no metadata record was ever written.
            if group.state is GroupState.DEAD and self._classic.discard(group) and group.generation_id > 0:
                tombstones[partition].append((encode_key(GroupMetadataKey(group.group_id)), None))
        for partition, records in tombstones.items():
            if records and partition in self._partitions.owned:
                error = await self._log.append(partition, records, for_offsets=True)
                if error is not ErrorCode.NONE:
                    log.warning("tombstones for __consumer_offsets-%d failed: %s", partition, error.name)
        return removed
