"""Spark from pyspark's own distribution, as users deploy it: a standalone cluster and a
Spark Connect server, throwaway, on 127.0.0.1.

`SparkCluster` runs ``bin/spark-class`` of the installed pyspark: one master and (by
default) two workers of one core each, so a job on it gets two executor JVMs with their
own Python workers. `SparkConnectServer` runs ``bin/spark-submit`` with Spark's
``SparkConnectServer`` class (what ``sbin/start-connect-server.sh`` does), in the
foreground. Both bind 127.0.0.1 on free ports, keep their work and log directories in a
temporary directory, wait for a condition (log lines, the master's JSON status of its workers)
and stop by killing the process groups they started. Only Java is needed.

Python workers run ``sys.executable`` (``PYSPARK_PYTHON``), so executors import quixsinks
from the same environment as the tests.

Manual use: ``python tests/services/spark_cluster.py [connect]`` starts a cluster (or a
Connect server), prints its URL and keeps it running until Ctrl-C.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

if __package__:
    from .common import Service, free_port, serve_until_interrupted
else:  # run as a script: python tests/services/spark_cluster.py
    from common import (  # type: ignore[no-redef,import-not-found]
        Service,
        free_port,
        serve_until_interrupted,
    )

HOST = "127.0.0.1"
_MASTER_URL = re.compile(r"Starting Spark master at (spark://\S+)")
_MASTER_UI = re.compile(r"Bound MasterWebUI to \S+ and started at (http://\S+)")
_CONNECT_STARTED = re.compile(r"Spark Connect server started at: \S+:(\d+)")
T = TypeVar("T")


def spark_home() -> Path:
    """The Spark distribution inside the installed pyspark package (bin/, jars/)."""
    import pyspark

    home = Path(pyspark.__file__).resolve().parent
    if not (home / "bin" / "spark-class").exists():
        raise RuntimeError(f"{home}/bin/spark-class not found: is pyspark installed from PyPI?")
    return home


def spark_env(tmp: Path) -> dict[str, str]:
    """The environment of every Spark process started here: 127.0.0.1, this Python, tmp dirs."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SPARK_", "PYSPARK_DRIVER"))}
    env.update(
        SPARK_HOME=str(spark_home()),
        SPARK_LOCAL_IP=HOST,
        SPARK_LOCAL_HOSTNAME=HOST,
        SPARK_LOG_DIR=str(tmp / "logs"),
        SPARK_PID_DIR=str(tmp),
        SPARK_LOCAL_DIRS=str(tmp / "local"),
        SPARK_DAEMON_MEMORY="512m",
        SPARK_CONNECT_MODE="0",
        PYSPARK_PYTHON=sys.executable,
    )
    return env


class _Process:
    """One Spark JVM we started in its own session (process group), logging to a file."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str], cwd: Path) -> None:
        self.name = name
        self.logfile = cwd / f"{name}.log"
        with open(self.logfile, "ab") as log:
            self.proc = subprocess.Popen(
                argv,
                cwd=cwd,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own group: its executors and Python workers too
            )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def log(self) -> str:
        try:
            return self.logfile.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""

    def log_tail(self, lines: int = 30) -> str:
        return f"--- {self.name} log (tail) ---\n" + "\n".join(self.log().splitlines()[-lines:])

    def stop(self, grace: float = 10.0) -> None:
        """SIGTERM the process group, then SIGKILL whatever is left of it.

        The group is the one ``start_new_session`` created (pgid == our child's pid); Linux
        does not hand that id to a new process while any member of the group lives.
        """
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=grace)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)


def _wait_for_log(proc: _Process, pattern: re.Pattern[str], timeout: float) -> re.Match[str]:
    """Poll `proc`'s log until `pattern` appears; fail early (with the log) if it exits."""
    return _wait_for(proc.name, lambda: pattern.search(proc.log()), [proc], timeout)


def _wait_for(what: str, ready: Callable[[], T | None], procs: list[_Process], timeout: float) -> T:
    """Poll ``ready()`` until it returns a truthy value; fail early if a process exits."""
    deadline = time.monotonic() + timeout
    while True:
        value = ready()
        if value:
            return value
        for proc in procs:
            if proc.proc.poll() is not None:
                raise RuntimeError(
                    f"{proc.name} exited with code {proc.proc.returncode}\n{proc.log_tail()}"
                )
        if time.monotonic() > deadline:
            tails = "\n".join(p.log_tail() for p in procs)
            raise RuntimeError(f"{what} not ready within {timeout:g}s\n{tails}")
        time.sleep(0.1)


class SparkCluster(Service):
    """A Spark standalone cluster: a master and `workers` workers of `cores` cores on 127.0.0.1.

    ``master_url`` is what a driver passes to ``SparkSession.builder.master``. Each worker's
    work directory (``work_dirs``) gets one folder per application and executor.
    """

    def __init__(
        self, workers: int = 2, cores: int = 1, memory: str = "1g", start_timeout: float = 90
    ) -> None:
        self.workers = workers
        self.cores = cores
        self.memory = memory
        self.start_timeout = start_timeout
        self.master_url = ""
        self.ui_url = ""
        self.tmpdir: Path | None = None
        self._procs: list[_Process] = []

    @property
    def work_dirs(self) -> list[Path]:
        return [self._tmp / f"worker-{i}" for i in range(self.workers)]

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self._procs]

    def status(self) -> dict[str, Any]:
        """The master's JSON status (workers, applications), as its web UI serves it."""
        with urllib.request.urlopen(f"{self.ui_url}/json/", timeout=2) as response:
            status: dict[str, Any] = json.load(response)
        return status

    def start(self) -> SparkCluster:
        """Start the master, then the workers; wait until the master reports them ALIVE.

        Ports are 0 (the OS picks free ones); the master's log says which it got.
        """
        if self.tmpdir is not None:
            raise RuntimeError("SparkCluster is already started")
        self.tmpdir = Path(tempfile.mkdtemp(prefix="quixsinks-spark-"))
        env = spark_env(self.tmpdir)
        # no REST submission server (it would take the fixed port 6066)
        env["SPARK_MASTER_OPTS"] = "-Dspark.master.rest.enabled=false"
        spark_class = str(spark_home() / "bin" / "spark-class")
        try:
            master = self._spawn(
                "master",
                [spark_class, "org.apache.spark.deploy.master.Master"],
                ["--host", HOST, "--port", "0", "--webui-port", "0"],
                env,
            )
            self.master_url = _wait_for_log(master, _MASTER_URL, self.start_timeout).group(1)
            self.ui_url = _wait_for_log(master, _MASTER_UI, self.start_timeout).group(1)
            for i, work_dir in enumerate(self.work_dirs):
                work_dir.mkdir()
                self._spawn(
                    f"worker-{i}",
                    [spark_class, "org.apache.spark.deploy.worker.Worker"],
                    [
                        *("--host", HOST, "--port", "0", "--webui-port", "0"),
                        *("--cores", str(self.cores), "--memory", self.memory),
                        *("--work-dir", str(work_dir), self.master_url),
                    ],
                    env,
                )
            _wait_for("workers", self._workers_alive, self._procs, self.start_timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop the workers (and their executors), then the master; delete the directory."""
        if self.tmpdir is None:
            return
        try:
            for proc in reversed(self._procs):
                proc.stop()
        finally:
            self._procs = []
            shutil.rmtree(self.tmpdir, ignore_errors=True)
            self.tmpdir = None

    def _spawn(self, name: str, cmd: list[str], args: list[str], env: dict[str, str]) -> _Process:
        proc = _Process(name, [*cmd, *args], env, self._tmp)
        self._procs.append(proc)
        return proc

    def _workers_alive(self) -> bool:
        try:
            workers = self.status().get("workers", [])
        except OSError:
            return False
        return sum(1 for w in workers if w.get("state") == "ALIVE") >= self.workers


class SparkConnectServer(Service):
    """A Spark Connect server (``local[cores]`` behind gRPC) on 127.0.0.1.

    Started the way ``sbin/start-connect-server.sh --wait`` starts one, with the temporary
    directory as its working directory (nothing of this repository on its path) and `conf`
    as extra ``--conf`` settings. Clients connect to ``url``.
    """

    def __init__(
        self,
        cores: int = 2,
        conf: dict[str, str] | None = None,
        env: dict[str, str] | None = None,
        start_timeout: float = 90,
    ) -> None:
        self.cores = cores
        self.conf = conf or {}
        self.extra_env = env or {}
        self.start_timeout = start_timeout
        self.port = 0
        self.tmpdir: Path | None = None
        self._proc: _Process | None = None

    @property
    def url(self) -> str:
        return f"sc://{HOST}:{self.port}"

    @property
    def pid(self) -> int | None:
        return None if self._proc is None else self._proc.pid

    def log(self) -> str:
        return "" if self._proc is None else self._proc.log()

    def start(self) -> SparkConnectServer:
        """Start the server on a free port and wait for its "started at" log line."""
        if self.tmpdir is not None:
            raise RuntimeError("SparkConnectServer is already started")
        self.tmpdir = Path(tempfile.mkdtemp(prefix="quixsinks-connect-"))
        env = {**spark_env(self.tmpdir), **self.extra_env}
        conf = {
            "spark.connect.grpc.binding.address": HOST,
            "spark.connect.grpc.binding.port": str(free_port(HOST)),
            "spark.driver.host": HOST,
            "spark.driver.bindAddress": HOST,
            "spark.ui.enabled": "false",
            "spark.sql.shuffle.partitions": str(self.cores),
            "spark.sql.session.timeZone": "UTC",
            "spark.pyspark.python": sys.executable,
            **self.conf,
        }
        try:
            self._proc = _Process(
                "connect",
                [
                    str(spark_home() / "bin" / "spark-submit"),
                    *("--class", "org.apache.spark.sql.connect.service.SparkConnectServer"),
                    *("--name", "quixsinks-connect"),
                    *("--master", f"local[{self.cores}]"),
                    *(arg for key, value in conf.items() for arg in ("--conf", f"{key}={value}")),
                    "spark-internal",
                ],
                env,
                self.tmpdir,
            )
            # Spark moves to the next port if the one given was taken meanwhile: read it back.
            started = _wait_for_log(self._proc, _CONNECT_STARTED, self.start_timeout)
            self.port = int(started.group(1))
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop the server's process group (its JVM and Python workers); delete the directory."""
        if self.tmpdir is None:
            return
        try:
            if self._proc is not None:
                self._proc.stop()
        finally:
            self._proc = None
            shutil.rmtree(self.tmpdir, ignore_errors=True)
            self.tmpdir = None


def main() -> None:
    """Start a cluster (or ``connect``: a Connect server), print its URL, keep it until Ctrl-C."""
    if sys.argv[1:] == ["connect"]:

        def describe_connect(server: SparkConnectServer) -> None:
            print(f"url:  {server.url}  (pid {server.pid})")

        serve_until_interrupted(SparkConnectServer(), describe_connect)
        return

    def describe(cluster: SparkCluster) -> None:
        print(f"master: {cluster.master_url}  UI: {cluster.ui_url}  pids: {cluster.pids}")

    serve_until_interrupted(SparkCluster(), describe)


if __name__ == "__main__":
    main()
