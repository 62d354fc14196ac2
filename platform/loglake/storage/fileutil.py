"""Small durable-file helpers shared by the checkpoint, metadata and marker writers."""

from __future__ import annotations

import logging
import os
from pathlib import Path

logger = logging.getLogger(__name__)

# What a write-then-rename leaves behind when the write failed or the process died midway.
TMP_SUFFIX = ".tmp"


def fsync_dir(path: Path) -> None:
    """Persist a directory's entries (a rename or a new file in it)."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write_text(path: Path, text: str) -> None:
    """Replace `path` with `text` so that a crash leaves either the old or the new file.

    Write a temporary sibling, fsync it, rename it over the target, fsync the directory.
    A failed write (a full disk) removes the temporary file and leaves the old one.
    """
    tmp = path.with_name(path.name + TMP_SUFFIX)
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError:
        try:
            tmp.unlink(missing_ok=True)
        except OSError:
            pass  # the disk is failing; start-up removes it (remove_temp_files)
        raise
    fsync_dir(path.parent)


def remove_temp_files(dir: Path) -> None:
    """Delete the `*.tmp` files in `dir` that failed or interrupted atomic writes left."""
    for stray in dir.glob(f"*{TMP_SUFFIX}"):
        if stray.is_file():
            logger.info("removing %s, left by an interrupted write", stray)
            stray.unlink(missing_ok=True)
