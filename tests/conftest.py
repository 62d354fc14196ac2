"""Shared fixtures: temporary log dirs, an in-process broker, a broker subprocess."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# Spark's Python workers must run this interpreter (it has pyarrow and loglake).
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)


@pytest.fixture
def log_dir(tmp_path: Path) -> Path:
    d = tmp_path / "logs"
    d.mkdir()
    return d
