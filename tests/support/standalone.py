"""A real Spark standalone cluster on 127.0.0.1 for tests: one master and workers started through
pyspark's `bin/spark-class`, stopped when the context ends.

A worker may run in a private mount namespace (`unshare -m`) with an empty tmpfs over some folders:
it then sees its own, empty copy of them, as a worker on a second machine sees its own disk.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Iterator, Sequence


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def listening(port: int) -> bool:
    """Whether a server of this machine accepts connections on `port`."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def wait_until_listening(port: int, process: subprocess.Popen, what: str, timeout: float,
                         poll: float = 0.3) -> None:
    """Wait for a server the test started to accept connections on `port`; RuntimeError naming `what`
    (the server, and where its log is) when its process ends first or `timeout` seconds pass."""
    deadline = time.time() + timeout
    while not listening(port):
        if process.poll() is not None or time.time() > deadline:
            raise RuntimeError(f"{what} did not start on port {port} (exit {process.poll()})")
        time.sleep(poll)


def spark_home() -> str:
    import pyspark

    return os.path.dirname(os.path.abspath(pyspark.__file__))


def private_mounts_available() -> str | None:
    """None when this process may run a worker in a private mount namespace, else why not."""
    if shutil.which("unshare") is None:
        return "no `unshare` program on this machine"
    probe = subprocess.run(["unshare", "-m", "sh", "-c", "mount -t tmpfs tmpfs /mnt"],
                           capture_output=True, text=True)
    if probe.returncode != 0:
        return f"cannot make a private mount namespace here ({probe.stderr.strip() or probe.returncode})"
    return None


@dataclass
class Cluster:
    master_url: str
    work_dir: str
    processes: list[subprocess.Popen] = field(default_factory=list)
    web_port: int = 0
    cores: int = 1
    memory: str = "2g"
    workers: dict[int, subprocess.Popen] = field(default_factory=dict)

    def start(self, name: str, argv: list[str]) -> subprocess.Popen:
        log = open(os.path.join(self.work_dir, f"{name}.log"), "ab")
        p = subprocess.Popen(argv, env=_environment(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self.processes.append(p)
        return p

    def start_worker(self, i: int, private_folders: Sequence[str] = ()) -> None:
        """Worker `i` (again, after `kill_worker`), in its own mount namespace with `private_folders`."""
        worker_dir = os.path.join(self.work_dir, f"worker-{i}")
        os.makedirs(worker_dir, exist_ok=True)
        argv = [os.path.join(spark_home(), "bin", "spark-class"), "org.apache.spark.deploy.worker.Worker",
                "--host", "127.0.0.1", "--cores", str(self.cores), "--memory", self.memory,
                "--webui-port", str(free_port()), "--work-dir", worker_dir, self.master_url]
        if private_folders:
            mounts = " && ".join(f"mount -t tmpfs tmpfs {_sh(p)}" for p in private_folders)
            argv = ["unshare", "-m", "--propagation", "private", "sh", "-c",
                    f"{mounts} && exec " + " ".join(_sh(a) for a in argv)]
        self.workers[i] = self.start(f"worker-{i}", argv)

    def kill_worker(self, i: int) -> None:
        """SIGKILL worker `i` and its executors (its process group), as when a machine is lost."""
        p = self.workers.pop(i)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGKILL)
        p.wait()
        self.processes.remove(p)

    def wait_for_workers(self, n: int) -> None:
        _wait_for(lambda: _workers_alive(self.web_port, n), "Spark workers", self)

    def log_text(self) -> str:
        out = []
        for name in sorted(os.listdir(self.work_dir)):
            if name.endswith(".log"):
                with open(os.path.join(self.work_dir, name), errors="replace") as f:
                    out.append(f"--- {name}\n{f.read()[-4000:]}")
        return "\n".join(out)


def _environment() -> dict[str, str]:
    env = dict(os.environ)
    from dbt.adapters.deltalog.runtime.jvm import ensure_java

    ensure_java()
    env.update(JAVA_HOME=os.environ.get("JAVA_HOME", env.get("JAVA_HOME", "")), SPARK_HOME=spark_home(),
               SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable,
               SPARK_NO_DAEMONIZE="1")
    env.pop("SPARK_CONF_DIR", None)
    return {k: v for k, v in env.items() if v}


def _wait_for(check, what: str, cluster: Cluster, timeout: float = 90) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if check():
            return
        for p in cluster.processes:
            if p.poll() is not None:
                raise RuntimeError(f"{what}: a cluster process ended (exit {p.returncode})\n{cluster.log_text()}")
        time.sleep(0.5)
    raise RuntimeError(f"{what}: not ready after {timeout:.0f} s\n{cluster.log_text()}")


def _workers_alive(web_port: int, n: int) -> bool:
    import json
    import urllib.request

    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{web_port}/json/", timeout=2) as r:
            info = json.load(r)
    except (OSError, ValueError):  # not up yet, or another program's page on that port (see below)
        return False
    return sum(1 for w in info.get("workers", []) if w.get("state") == "ALIVE") >= n


def _bound_web_port(cluster: "Cluster") -> int:
    """The port the master's web UI bound: the one asked for, or the next free one Spark moved to when
    another program took it between `free_port()` and the master's start."""
    import re

    found = re.findall(r"MasterWebUI.*?started at http://[^:]+:(\d+)", cluster.log_text())
    return int(found[-1]) if found else cluster.web_port


@contextlib.contextmanager
def standalone_cluster(workers: int = 1, cores: int = 1, memory: str = "2g",
                       private_folders: Sequence[str] = ()) -> Iterator[Cluster]:
    """A master and `workers` workers. With `private_folders`, the LAST worker runs in its own mount
    namespace with an empty tmpfs over each of those folders (they must exist)."""
    port, web = free_port(), free_port()
    work_dir = tempfile.mkdtemp(prefix="deltalog-cluster-")
    cluster = Cluster(f"spark://127.0.0.1:{port}", work_dir, web_port=web, cores=cores, memory=memory)
    try:
        cluster.start("master", [os.path.join(spark_home(), "bin", "spark-class"),
                                 "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                                 "--port", str(port), "--webui-port", str(web)])
        def master_up() -> bool:
            cluster.web_port = _bound_web_port(cluster)
            return _workers_alive(cluster.web_port, 0)

        _wait_for(master_up, "Spark master", cluster)
        for i in range(workers):
            cluster.start_worker(i, private_folders if i == workers - 1 else ())
        cluster.wait_for_workers(workers)
        yield cluster
    finally:
        stop_process_groups(cluster.processes, timeout=20)
        shutil.rmtree(work_dir, ignore_errors=True)


def stop_process_groups(processes: Sequence[subprocess.Popen], timeout: float) -> None:
    """SIGTERM each server's process group (started with start_new_session), SIGKILL what outlives
    `timeout`."""
    for p in processes:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGTERM)
    for p in processes:
        try:
            p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)
            p.wait()


def _sh(text: str) -> str:
    import shlex

    return shlex.quote(text)
