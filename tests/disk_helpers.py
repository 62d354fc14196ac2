"""Storage fault tests' helpers (need root): a small tmpfs that fills up, and an ext4 file
system on a loop device that fails (every I/O then ends in EIO, as on a dying disk).

A remount read-only is no way to fail a broker's disk: Linux refuses it (EBUSY) while a
file is open for writing, which a broker's segments always are."""

from __future__ import annotations

import contextlib
import fcntl
import os
import struct
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest


def _mount(*args: str) -> None:
    subprocess.run(["mount", *args], check=True, capture_output=True, text=True)


@contextlib.contextmanager
def _mounted(path: Path, prepare: Callable[[], None]) -> Iterator[Path]:
    """`prepare` mounts a file system at `path` (skipping the test if this process may
    not); unmounted after the block, lazily: a file a failed test left open must not keep
    the mount (or its loop device)."""
    path.mkdir(parents=True, exist_ok=True)
    try:
        prepare()
    except (OSError, subprocess.CalledProcessError) as exc:
        pytest.skip(f"cannot mount a file system at {path}: {getattr(exc, 'stderr', exc)}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False, capture_output=True)


def small_disk(path: Path, size_mb: int) -> contextlib.AbstractContextManager[Path]:
    """A tmpfs of `size_mb` MB mounted at `path` for the block."""
    return _mounted(path, lambda: _mount("-t", "tmpfs", "-o", f"size={size_mb}m", "tmpfs", str(path)))


# EXT4_IOC_SHUTDOWN (_IOR('X', 125, __u32)) with EXT4_GOING_FLAGS_NOLOGFLUSH: the file
# system stops as if its device died; the journal makes it whole at the next mount.
_EXT4_IOC_SHUTDOWN = 0x8004587D
_EXT4_GOING_FLAGS_NOLOGFLUSH = 2


def ext4_disk(path: Path, image: Path, size_mb: int = 64) -> contextlib.AbstractContextManager[Path]:
    """An ext4 file system in `image` mounted at `path` for the block."""

    def make() -> None:
        subprocess.run(["truncate", "-s", f"{size_mb}M", str(image)], check=True)
        subprocess.run(["mkfs.ext4", "-q", "-F", str(image)], check=True, capture_output=True)
        mount_image(image, path)

    return _mounted(path, make)


def mount_image(image: Path, path: Path) -> None:
    _mount("-o", "loop", str(image), str(path))


def fail_disk(path: Path) -> None:
    """Make the ext4 file system at `path` fail: from now on every read and write in it is EIO."""
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.ioctl(fd, _EXT4_IOC_SHUTDOWN, struct.pack("I", _EXT4_GOING_FLAGS_NOLOGFLUSH))
    finally:
        os.close(fd)


def repair_disk(path: Path, image: Path) -> None:
    """Unmount the failed file system and mount it again (journal recovery): a replaced disk.
    Every process that had files open in it must be gone."""
    subprocess.run(["umount", str(path)], check=True, capture_output=True)
    mount_image(image, path)


def fill_disk(path: Path, leave_bytes: int = 0) -> Path:
    """Fill the file system holding `path` with one file, leaving about `leave_bytes`
    free; returns the file (delete it to free the space)."""
    filler = path / "filler"
    stat = os.statvfs(path)
    free = stat.f_bavail * stat.f_frsize
    with open(filler, "ab", buffering=0) as f:
        remaining = max(0, free - leave_bytes)
        chunk = b"\0" * (1 << 20)
        try:
            while remaining > 0:
                remaining -= f.write(chunk[: min(len(chunk), remaining)])
        except OSError:
            pass  # full already
    return filler
