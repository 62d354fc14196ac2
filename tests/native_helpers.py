"""loglake's native libraries, built for a test from the current sources by set-up's own
script (scripts/build_native.sh) into the test's directory: a library left next to the
modules from an older source cannot make a test pass."""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

BUILD = Path(__file__).resolve().parents[1] / "scripts" / "build_native.sh"


@dataclass(frozen=True)
class NativeLibraries:
    walk: Path
    encode: Path


def compiler() -> str:
    """The C compiler set-up uses; skips the test without one (loglake then does the work in
    Python)."""
    found = shutil.which(os.environ.get("CC", "cc"))
    if found is None:
        pytest.skip("no C compiler: loglake's native libraries cannot be built (Python does the work)")
    return found


def build_native(directory: Path) -> NativeLibraries:
    compiler()
    built = NativeLibraries(directory / "libloglake_walk.so", directory / "libloglake_encode.so")
    subprocess.run(["bash", str(BUILD), str(built.walk), str(built.encode)], check=True)
    return built


def build_other(directory: Path, source: str) -> Path:
    """A shared library of `source` (C): one not built from loglake's sources."""
    (directory / "other.c").write_text(source)
    library = directory / "libother.so"
    subprocess.run([compiler(), "-shared", "-fPIC", "-o", str(library), str(directory / "other.c")], check=True)
    return library
