"""Airflow for the DAG tests: an AIRFLOW_HOME, `airflow db migrate` and one Airflow process
(tests/orchestration/airflow_runner.py, under .venv-airflow), made once per test session by the
`airflow` fixture of conftest.py.

`AirflowRunner.run_dag(dag_id, variables, connections)` parses airflow_dags/ with the Variable
`loglake` set to `variables` (and those connections defined, none by default) and runs
`dag.test()`: the DAG's tasks run for real (spark-submit of the job included) and the answer
holds the DagRun's state and each task's. A DAG test of a new job is a few lines:

    result = airflow.run_dag("loglake_compaction", {"bootstrap.servers": ..., "compaction.topics": ...})
    assert result.state == "success", result.log
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any


REPO = Path(__file__).resolve().parents[2]
AIRFLOW_PYTHON = REPO / ".venv-airflow" / "bin" / "python"
RUNNER = Path(__file__).resolve().parent / "airflow_runner.py"
# Spark runs the DAGs' jobs: a run includes starting spark-submit's JVM on a loaded 2-core machine.
DAG_RUN_TIMEOUT_S = 240.0


@dataclass(frozen=True)
class DagRunResult:
    state: str
    tasks: dict[str, str]
    log: str  # Airflow's and spark-submit's output during the run


class AirflowRunner:
    """The Airflow process: JSON requests on its stdin, JSON answers on its stdout, logs in a file."""

    def __init__(self, home: Path) -> None:
        self.log_path = home / "runner.log"
        env = airflow_env(home)
        subprocess.run(
            [str(AIRFLOW_PYTHON), "-m", "airflow", "db", "migrate"],
            env=env,
            check=True,
            capture_output=True,
            timeout=180,
        )
        self._log = self.log_path.open("wb")
        self.proc = subprocess.Popen(
            [str(AIRFLOW_PYTHON), str(RUNNER)],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
        )
        self._buffer = b""
        self._read(timeout=120)  # {"ready": true} once Airflow is imported

    def parse(self, variables: dict[str, str] | None = None) -> dict[str, Any]:
        return self._request({"op": "parse", "variables": variables or {}}, timeout=60)

    def run_dag(
        self, dag_id: str, variables: dict[str, str], connections: dict[str, dict[str, str]] | None = None
    ) -> DagRunResult:
        # Without the deadline alert: Airflow 3.3.2's dag.test() hands DagRun.update_state the DAG it
        # serialized in memory, whose alerts are still dicts where the scheduler's (from the database)
        # hold their ids, so a successful run ends in a StatementError. A scheduler is not affected.
        variables = {"deadline.minutes": "-1", **variables}
        start = self.log_path.stat().st_size
        answer = self._request(
            {"op": "test", "dag_id": dag_id, "variables": variables, "connections": connections or {}},
            timeout=DAG_RUN_TIMEOUT_S,
        )
        with self.log_path.open("rb") as f:
            f.seek(start)
            log = f.read().decode(errors="replace")
        return DagRunResult(answer["state"], answer["tasks"], log)

    def _request(self, request: dict[str, Any], timeout: float) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(request).encode() + b"\n")
        self.proc.stdin.flush()
        answer = self._read(timeout)
        if "error" in answer:
            raise AssertionError(f"Airflow runner: {answer['error']}\n{self.log_tail()}")
        return answer

    def _read(self, timeout: float) -> dict[str, Any]:
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(f"no answer from the Airflow runner in {timeout:.0f} s\n{self.log_tail()}")
            if select.select([fd], [], [], remaining)[0]:
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    raise AssertionError(f"the Airflow runner exited ({self.proc.wait()})\n{self.log_tail()}")
                self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return json.loads(line)

    def log_tail(self, chars: int = 8000) -> str:
        return self.log_path.read_text(errors="replace")[-chars:]

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()  # the runner's loop ends at EOF
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._log.close()


def airflow_env(home: Path) -> dict[str, str]:
    """The environment of an Airflow install that knows nothing of loglake's virtualenv: the DAGs
    must find spark-submit and the interpreter themselves."""
    venv_bin = str(REPO / ".venv" / "bin")
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in {"PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "SPARK_HOME", "VIRTUAL_ENV", "PYTHONPATH"}
        and not k.startswith("AIRFLOW")
    }
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", os.defpath).split(os.pathsep) if p != venv_bin)
    env.update(
        AIRFLOW_HOME=str(home),
        AIRFLOW__CORE__DAGS_FOLDER=str(REPO / "airflow_dags"),
        AIRFLOW__CORE__LOAD_EXAMPLES="False",
    )
    return env
