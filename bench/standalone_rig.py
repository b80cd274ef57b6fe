"""A Spark standalone cluster of several "hosts" on one machine, for the multi-host test and
script (issue 24): a master on 127.0.0.1 and one worker per loopback address (127.0.0.2,
127.0.0.3, ...; Linux routes all of 127/8 to lo), each worker with its own work directory,
``SPARK_LOCAL_DIRS`` and host directory (``KRAFT_HOST_DIR``, which the executors inherit: the
voters' logs go under it, so a killed "host" takes its disk with it), and one unit of the
custom ``voter`` resource (driver/placement.py). Every daemon runs in the foreground in its own
process group: killing a host is one ``killpg``, and ``stop`` leaves nothing behind.

pip's pyspark ships ``bin/spark-class`` but not ``sbin/start-master.sh``; the daemons are
started with ``spark-class`` directly.

``worker_python``: the rig's workers run as hosts where the project is not installed (issue 43):
``conf/spark-env.sh`` sets their ``PYSPARK_PYTHON`` to that interpreter (a bare virtual
environment), and nothing of the driver's Python reaches them (no ``PYTHONPATH`` or
``VIRTUAL_ENV``, its ``bin`` off ``PATH``). The application must then ship its environment
(``kraft-spark run --env-archive``). They still share this machine's Spark installation
(``SPARK_HOME``, pip's pyspark), as a cluster's hosts have one each.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pyspark

SPARK_HOME = Path(pyspark.__file__).parent
SPARK_CLASS = SPARK_HOME / "bin" / "spark-class"
LOG4J = """rootLogger.level = warn
rootLogger.appenderRef.stdout.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss.SSS} %p %c{1}: %m%n%ex
logger.master.name = org.apache.spark.deploy
logger.master.level = info
"""


def _free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        port: int = s.getsockname()[1]
        return port


class StandaloneRig:
    def __init__(self, base: Path, worker_python: Path | None = None) -> None:
        self.base = base
        self.worker_python = worker_python
        self.conf_dir = base / "conf"
        self.conf_dir.mkdir(parents=True, exist_ok=True)
        (self.conf_dir / "log4j2.properties").write_text(LOG4J)
        script = self.conf_dir / "voter-resource.sh"
        script.write_text('#!/bin/sh\necho \'{"name": "voter", "addresses": ["0"]}\'\n')
        script.chmod(0o755)
        if worker_python is not None:  # sourced by spark-class (load-spark-env.sh), exported
            (self.conf_dir / "spark-env.sh").write_text(f"PYSPARK_PYTHON={worker_python}\n")
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.master_port = _free_port()
        self.master_ui = _free_port()
        self.master_url = f"spark://127.0.0.1:{self.master_port}"

    def _env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SPARK_", "PYSPARK_"))}
        env.update(SPARK_HOME=str(SPARK_HOME), SPARK_CONF_DIR=str(self.conf_dir),
                   SPARK_DAEMON_MEMORY="256m", PYSPARK_PYTHON=sys.executable, **extra)
        return env

    def worker_env(self, **extra: str) -> dict[str, str]:
        """A worker's environment (before spark-class reads ``conf/spark-env.sh``)."""
        env = self._env(**extra)
        if self.worker_python is None:
            return env
        del env["PYSPARK_PYTHON"]  # conf/spark-env.sh's
        for name in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "PYTHONUSERBASE",
                     "VIRTUAL_ENV"):
            env.pop(name, None)
        if sys.prefix != sys.base_prefix:  # the driver's virtual environment: its bin too
            venv = Path(sys.prefix).resolve()
            env["PATH"] = os.pathsep.join(
                entry for entry in env.get("PATH", "").split(os.pathsep)
                if entry and not Path(entry).resolve().is_relative_to(venv))
        return env

    def _spawn(self, name: str, args: list[str], env: dict[str, str]) -> None:
        with open(self.base / f"{name}.log", "ab") as log:
            self.procs[name] = subprocess.Popen(
                [str(SPARK_CLASS), *args], env=env, stdout=log, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, start_new_session=True, cwd=self.base)

    def start_master(self, timeout_s: float = 60) -> None:
        self._spawn("master", ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                               "--port", str(self.master_port), "--webui-port",
                               str(self.master_ui)],
                    self._env(SPARK_LOCAL_IP="127.0.0.1",
                              SPARK_MASTER_OPTS="-Dspark.master.rest.enabled=false"))
        deadline = time.monotonic() + timeout_s
        while True:  # workers started before the master listens retry only after ~14 s
            with contextlib.suppress(OSError):
                socket.create_connection(("127.0.0.1", self.master_port), 0.5).close()
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"the master did not listen within {timeout_s} s; see "
                                   f"{self.base / 'master.log'}")
            time.sleep(0.1)

    def host_dir(self, host: str) -> Path:
        return self.base / f"host-{host}"

    def add_worker(self, host: str, cores: int = 2, memory: str = "1g") -> None:
        home = self.host_dir(host)
        for sub in ("work", "local"):
            (home / sub).mkdir(parents=True, exist_ok=True)
        opts = ("-Dspark.worker.resource.voter.amount=1 "
                f"-Dspark.worker.resource.voter.discoveryScript="
                f"{self.conf_dir / 'voter-resource.sh'}")
        self._spawn(f"worker-{host}",
                    ["org.apache.spark.deploy.worker.Worker", "--host", host, "--port", "0",
                     "--webui-port", "0", "--cores", str(cores), "--memory", memory,
                     "--work-dir", str(home / "work"), self.master_url],
                    self.worker_env(SPARK_LOCAL_IP=host, SPARK_LOCAL_DIRS=str(home / "local"),
                                    KRAFT_HOST_DIR=str(home), SPARK_WORKER_OPTS=opts))

    def alive_hosts(self) -> set[str]:
        url = f"http://127.0.0.1:{self.master_ui}/json/"
        with urllib.request.urlopen(url, timeout=5) as response:
            state: dict[str, Any] = json.load(response)
        return {w["host"] for w in state["workers"] if w["state"] == "ALIVE"}

    def wait_workers(self, hosts: set[str], timeout_s: float = 90) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError, ValueError):
                if hosts <= self.alive_hosts():
                    return
            time.sleep(0.3)
        raise TimeoutError(f"workers {sorted(hosts)} not registered within {timeout_s} s")

    def kill_host(self, host: str) -> None:
        """SIGKILL the worker and its executor (one process group), and lose its disk."""
        proc = self.procs.pop(f"worker-{host}")
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        shutil.rmtree(self.host_dir(host), ignore_errors=True)

    def stop(self) -> None:
        for name in list(self.procs):
            proc = self.procs.pop(name)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()

    def spark_submit_args(self) -> list[str]:
        """What the application's spark-submit needs on this rig: the driver on loopback, small
        executors with the voter resource, a barrier slot check that gives up quickly."""
        conf = {
            "spark.driver.host": "127.0.0.1",
            "spark.driver.bindAddress": "127.0.0.1",
            "spark.executor.memory": "512m",
            "spark.executor.resource.voter.amount": "1",
            "spark.scheduler.barrier.maxConcurrentTasksCheck.interval": "2s",
            "spark.scheduler.barrier.maxConcurrentTasksCheck.maxFailures": "5",
            "spark.ui.enabled": "false",
        }
        return [arg for key, value in conf.items() for arg in ("--conf", f"{key}={value}")]
