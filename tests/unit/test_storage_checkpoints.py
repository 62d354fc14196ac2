"""Checkpoint files, the leader epoch cache and meta.properties: formats and semantics."""

from __future__ import annotations

from pathlib import Path

import pytest

from loglake.storage.checkpoints import CheckpointFileError, OffsetCheckpointFile
from loglake.storage.leader_epoch_cache import EpochEntry, LeaderEpochFileCache
from loglake.storage.meta_properties import MetaProperties, new_cluster_id


def test_offset_checkpoint_round_trip_in_kafkas_format(tmp_path: Path) -> None:
    path = tmp_path / "recovery-point-offset-checkpoint"
    checkpoint = OffsetCheckpointFile(path)
    assert checkpoint.read() == {}
    offsets = {("orders", 1): 873, ("orders", 0): 1200, ("my-topic.v2", 12): 0}
    checkpoint.write(offsets)
    assert path.read_text() == "0\n3\nmy-topic.v2 12 0\norders 0 1200\norders 1 873\n"
    assert OffsetCheckpointFile(path).read() == offsets
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # the temporary file was renamed
    checkpoint.write({})
    assert path.read_text() == "0\n0\n" and checkpoint.read() == {}


@pytest.mark.parametrize(
    "text",
    ["", "1\n0\n", "0\n2\nt 0 5\n", "0\n1\nt 0\n", "0\n1\nt x 5\n", "0\nmany\n"],
)
def test_malformed_offset_checkpoint_is_refused(tmp_path: Path, text: str) -> None:
    path = tmp_path / "cp"
    path.write_text(text)
    with pytest.raises(CheckpointFileError):
        OffsetCheckpointFile(path).read()


def epoch_cache(tmp_path: Path, *entries: tuple[int, int]) -> LeaderEpochFileCache:
    cache = LeaderEpochFileCache(tmp_path / "leader-epoch-checkpoint")
    for epoch, offset in entries:
        cache.assign(epoch, offset)
    return cache


def test_epoch_cache_persists_in_kafkas_format(tmp_path: Path) -> None:
    cache = epoch_cache(tmp_path, (1, 0), (2, 6), (4, 9))
    assert cache.path.read_text() == "0\n3\n1 0\n2 6\n4 9\n"
    reloaded = LeaderEpochFileCache(cache.path)
    assert reloaded.entries == (EpochEntry(1, 0), EpochEntry(2, 6), EpochEntry(4, 9))
    assert reloaded.latest_epoch == 4


def test_epoch_cache_assign(tmp_path: Path) -> None:
    cache = epoch_cache(tmp_path)
    assert cache.latest_epoch is None
    assert cache.assign(2, 10)
    assert not cache.assign(2, 15)  # same epoch, later offset: nothing to learn
    assert cache.assign(2, 5)  # same epoch, earlier start: replaces
    assert cache.entries == (EpochEntry(2, 5),)
    assert cache.assign(3, 20)
    # An older epoch or an earlier start offset drops the entries it contradicts.
    assert cache.assign(3, 12)
    assert cache.entries == (EpochEntry(2, 5), EpochEntry(3, 12))
    assert cache.assign(1, 30)
    assert cache.entries == (EpochEntry(1, 30),)
    with pytest.raises(ValueError):
        cache.assign(-1, 0)


def test_epoch_cache_maybe_assign_only_moves_forward(tmp_path: Path) -> None:
    cache = epoch_cache(tmp_path, (3, 10))
    cache.maybe_assign(3, 20)
    cache.maybe_assign(2, 30)
    cache.maybe_assign(-1, 40)
    assert cache.entries == (EpochEntry(3, 10),)
    cache.maybe_assign(4, 50)
    assert cache.entries == (EpochEntry(3, 10), EpochEntry(4, 50))


def test_end_offset_for_epoch_follows_offset_for_leader_epoch(tmp_path: Path) -> None:
    assert epoch_cache(tmp_path).end_offset_for(0, 100) == (-1, -1)
    cache = epoch_cache(tmp_path, (1, 0), (2, 6), (4, 9))
    assert cache.end_offset_for(4, 15) == (4, 15)  # the latest epoch ends at the log end
    assert cache.end_offset_for(2, 15) == (2, 9)
    assert cache.end_offset_for(1, 15) == (1, 6)
    assert cache.end_offset_for(3, 15) == (2, 9)  # unknown epoch: the largest one below it
    assert cache.end_offset_for(0, 15) == (0, 0)  # older than all: where the first begins
    assert cache.end_offset_for(5, 15) == (-1, -1)
    assert cache.end_offset_for(-1, 15) == (-1, -1)


def test_epoch_cache_truncation(tmp_path: Path) -> None:
    cache = epoch_cache(tmp_path, (1, 0), (2, 6), (4, 9))
    cache.truncate_from_end(20)
    assert len(cache.entries) == 3
    cache.truncate_from_end(9)
    assert cache.entries == (EpochEntry(1, 0), EpochEntry(2, 6))
    cache.truncate_from_start(4)
    assert cache.entries == (EpochEntry(1, 4), EpochEntry(2, 6))
    cache.truncate_from_start(7)
    assert cache.entries == (EpochEntry(2, 7),)
    assert LeaderEpochFileCache(cache.path).entries == (EpochEntry(2, 7),)
    cache.clear()
    assert cache.entries == () and cache.path.read_text() == "0\n0\n"


def test_meta_properties_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "meta.properties"
    assert MetaProperties.read(path) is None
    cluster_id = new_cluster_id()
    assert len(cluster_id) == 22
    MetaProperties(3, cluster_id).write(path)
    assert "version=0\nbroker.id=3\ncluster.id=" + cluster_id in path.read_text()
    assert MetaProperties.read(path) == MetaProperties(3, cluster_id)
