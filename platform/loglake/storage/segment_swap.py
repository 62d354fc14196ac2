"""Swapping rewritten segments into a log, crash-safe at every step (Kafka's rules for
`.cleaned`, `.swap` and `.deleted` files, from LocalLog.replaceSegments and LogLoader).

A cleaned segment is written beside the segments it replaces with the suffix `.cleaned`
and fsynced. The swap then:

0. writes `<base>.swap-end`: the offset where the replaced segments end (records at the
   end of the last one may all have been cleaned away, so the new segment alone does not
   tell where they ended);
1. renames the new segment's files `.cleaned` -> `.swap`;
2. renames each old segment's files to `.deleted`;
3. renames the new segment's files `.swap` -> no suffix;
4. unlinks the `.deleted` files and the `.swap-end` (open descriptors keep serving readers
   that hold the old files).

Start-up (`complete_interrupted_swaps`) finishes or undoes a swap a crash interrupted:
`.cleaned` and `.deleted` files are removed (a crash before step 1 keeps the old
segments); a `.log.swap` is complete (it was fsynced before its rename), so every plain
segment whose base offset lies in [its base, its `.swap-end`) is deleted and the swap files
are renamed (a crash after step 1 ends with the new segment): never a mix of old and new.
(Kafka takes the range from the swap segment's own last offset, which can leave a replaced
segment behind when the new one's last records were cleaned away.) An index missing after
a partial rename is rebuilt from the .log by the segment's sanity check.

`LOGLAKE_FAULT=cleaner-<step>` kills the process with SIGKILL at a step, for the crash tests:
after-cleaned, after-swap, mid-deleted (after the first old segment's rename),
after-deleted, after-rename.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from pathlib import Path

from loglake.faults import crash_point
from loglake.storage.fileutil import atomic_write_text, fsync_dir
from loglake.storage.segment import DELETED_FILE_SUFFIX, LogSegment, filename_prefix

logger = logging.getLogger(__name__)

CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
SWAP_END_SUFFIX = ".swap-end"

_SEGMENT_FILE = re.compile(r"^(\d{20})\.(log|index|timeindex)$")


def maybe_fault(step: str) -> None:
    """Die like a kill -9 at `step` when LOGLAKE_FAULT is cleaner-<step> (crash tests only)."""
    crash_point(f"cleaner-{step}")


def swap_in(dir: Path, new: LogSegment, old: Sequence[LogSegment], end_offset: int) -> Path:
    """Steps 0-3 for a flushed `.cleaned` segment replacing `old`, which end at
    `end_offset`; the caller holds the log's lock and does step 4 afterwards (the returned
    `.swap-end` file and the old segments' files)."""
    maybe_fault("after-cleaned")
    swap_end = dir / (filename_prefix(new.base_offset) + SWAP_END_SUFFIX)
    atomic_write_text(swap_end, str(end_offset))
    new.change_file_suffixes(CLEANED_SUFFIX, SWAP_SUFFIX)
    fsync_dir(dir)
    maybe_fault("after-swap")
    for i, segment in enumerate(old):
        segment.change_file_suffixes("", DELETED_FILE_SUFFIX)
        if i == 0:
            maybe_fault("mid-deleted")
    fsync_dir(dir)
    maybe_fault("after-deleted")
    new.change_file_suffixes(SWAP_SUFFIX, "")
    fsync_dir(dir)
    maybe_fault("after-rename")
    return swap_end


def complete_interrupted_swaps(dir: Path) -> None:
    """Finish (or forget) a swap a crash interrupted, before the segments are loaded."""
    changed = False
    swaps: list[Path] = []
    for path in sorted(dir.iterdir()):
        if path.name.endswith(SWAP_END_SUFFIX) and not (dir / path.name.replace(SWAP_END_SUFFIX, ".log.swap")).exists():
            path.unlink()  # the swap had not started, or had finished
            changed = True
        elif path.name.endswith((CLEANED_SUFFIX, DELETED_FILE_SUFFIX)):
            logger.info("removing %s, left by an interrupted cleaning", path)
            path.unlink()
            changed = True
        elif path.name.endswith(SWAP_SUFFIX):
            swaps.append(path)
    if not swaps:
        if changed:
            fsync_dir(dir)
        return
    log_swaps = {p for p in swaps if p.name.endswith(".log" + SWAP_SUFFIX)}
    stems = {p.name.split(".")[0] for p in log_swaps}
    ranges = []
    for path in swaps:
        if path.name.split(".")[0] not in stems:
            path.unlink()  # an index whose .log was never renamed to .swap
    for path in sorted(log_swaps):
        stem = path.name.split(".")[0]
        end = int((dir / (stem + SWAP_END_SUFFIX)).read_text())
        ranges.append((int(stem), end))
        logger.warning("completing the swap of %s (offsets below %d) interrupted by a crash", path, end)
    for path in dir.iterdir():
        match = _SEGMENT_FILE.match(path.name)
        if match and any(low <= int(match.group(1)) < high for low, high in ranges):
            path.unlink()
    fsync_dir(dir)
    # Indexes first, the .log last, as in swap_in.
    for path in sorted((p for p in dir.iterdir() if p.name.endswith(SWAP_SUFFIX)), key=lambda p: p in log_swaps):
        path.rename(path.with_name(path.name.removesuffix(SWAP_SUFFIX)))
    fsync_dir(dir)
    for stem in stems:
        (dir / (stem + SWAP_END_SUFFIX)).unlink()
    fsync_dir(dir)
