"""A local Spark that outlives one dbt command.

Starting a JVM and warming it up costs most of a small project's `dbt build`. With the server, the
first command starts a background process that holds an embedded SparkSession; every later command
with the same Spark settings attaches to its JVM through Py4J (what `spark-submit` itself does for a
Python driver) in well under a second, in a Spark session of its own (temporary views, SQL settings),
and the server stops after it has had no command attached for `idle_timeout` seconds. Once the commands
attached have all ended, it reports its heap (its log, its state: `status`, `dbt debug`) and, when its
old generation stays above RESTART_OLD_GENERATION_SHARE after a full collection, restarts: it stops
between commands, never during one, and the next command starts a new one.

Files in `state_dir()` (mode 0700), per server key (a hash of master, settings, interpreter, code):
  <key>.json   port, secret and pid of a running server (0600), written once its Spark is up
  <key>.lease  every attached command holds a shared lock on it for its whole life; the server is
               idle when it can take the lock exclusively, and a killed command releases it anyway
  <key>.start  held by the one command that starts the server, so concurrent first commands share one
  <key>.starting  held by the server process itself until its Spark is up (and names its pid): a command
               that started a server and ended before it was up (nothing it ran needed Spark) leaves it
               starting, and the next command waits for that one instead of starting a second
  <key>.log    the server process's output; <key>.spark.log holds the JVM's log

`python -m dbt.adapters.deltalog.runtime.spark_server status|stop` lists or stops the servers.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Any, Callable, Dict, Iterator, List, Optional

from dbt.adapters.deltalog.runtime.jvm import tail
from deltalog import user_cache
from deltalog.lazy_imports import load
from deltalog.processes import alive

DEFAULT_IDLE_TIMEOUT = 900  # seconds without an attached command before the server stops
START_TIMEOUT = 300  # seconds a command waits for a new server's Spark to come up
_STATE_DIR_ENV = "DBT_DELTALOG_SERVER_DIR"


class SparkServerError(RuntimeError):
    """The server could not be started or attached to; the message says why and where its log is."""


def state_dir() -> str:
    path = os.environ.get(_STATE_DIR_ENV) or user_cache.folder("spark-servers")
    os.makedirs(path, mode=0o700, exist_ok=True)
    return path


def _code_stamp() -> str:
    """Changes when this package's code changes, so that an edited or upgraded install never runs
    in a server (and its Python workers) started with the old code."""
    import deltalog

    digest = hashlib.sha1()
    for package in (os.path.dirname(deltalog.__file__), os.path.dirname(os.path.abspath(__file__))):
        for folder, _, files in sorted(os.walk(package)):
            for name in sorted(files):
                if name.endswith((".py", ".jar")):
                    st = os.stat(os.path.join(folder, name))
                    digest.update(f"{folder}/{name}:{st.st_size}:{st.st_mtime_ns}".encode())
    return digest.hexdigest()


def server_key(master: str, spark_conf: Dict[str, str]) -> str:
    """One server per master, Spark settings (not the switches only the dbt process reads), Python
    interpreter and code version."""
    from dbt.adapters.deltalog.spark_settings import PROCESS_ONLY

    ident = json.dumps({"master": master, "conf": {str(k): str(v) for k, v in sorted(spark_conf.items())
                                                   if k not in PROCESS_ONLY},
                        "python": sys.executable, "code": _code_stamp()}, sort_keys=True)
    return hashlib.sha1(ident.encode()).hexdigest()[:16]


def _path(key: str, suffix: str) -> str:
    return os.path.join(state_dir(), key + suffix)


def read_state(key: str) -> Optional[dict]:
    """The state of the server for `key` if its process is alive, else None."""
    try:
        with open(_path(key, ".json")) as f:
            state = json.load(f)
    except (OSError, ValueError):
        return None
    return state if alive(int(state.get("pid", 0))) else None


def is_up(master: str, spark_conf: Optional[Dict[str, str]]) -> bool:
    """Whether a server for these settings runs and has its Spark up (attaching to it is then quick)."""
    return read_state(server_key(master, dict(spark_conf or {}))) is not None


def _write_state(key: str, state: dict) -> None:
    tmp = _path(key, f".json.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # it holds the gateway's secret
    with os.fdopen(fd, "w") as f:
        json.dump(state, f)
    os.replace(tmp, _path(key, ".json"))


@contextlib.contextmanager
def _locked(path: str, mode: int) -> Iterator[None]:
    with open(path, "a+") as f:
        fcntl.flock(f, mode)
        yield


# --- the server process ---------------------------------------------------------------------------

def serve(key: str, master: str, spark_conf: Dict[str, str], idle_timeout: float,
          starting_fd: Optional[int] = None) -> None:
    """Run a server: start Spark, publish how to attach, stop after `idle_timeout` idle seconds.
    `starting_fd`: the `.starting` file, locked by the command that started this process (the lock is
    shared with it, so it holds from the moment the process exists, whenever that command ends)."""
    from dbt.adapters.deltalog.runtime.jvm import start_spark

    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C in the terminal that started it is not for us
    with (os.fdopen(starting_fd, "a+") if starting_fd is not None else open(_path(key, ".starting"), "a+")) as starting:
        if starting_fd is None:
            fcntl.flock(starting, fcntl.LOCK_EX)
        starting.truncate(0)  # named by its own pid, whether or not the command that spawned it still runs
        starting.write(str(os.getpid()))
        starting.flush()
        spark = start_spark(master, spark_conf, log_file=_path(key, ".spark.log"))
        params = spark.sparkContext._gateway.gateway_parameters
        _write_state(key, {"pid": os.getpid(), "port": params.port, "secret": params.auth_token,
                           "master": master, "started": time.time(), "idle_timeout": idle_timeout})
        fcntl.flock(starting, fcntl.LOCK_UN)  # up: commands waiting for it attach
    print(f"dbt-deltalog Spark server {key} ready (pid {os.getpid()}, master {master})", flush=True)
    spark.catalog  # (pyspark keeps the catalog's JVM object: bound now, it is the server's own)
    own = _bound(spark)
    idle_since: Optional[float] = None
    with open(_path(key, ".lease"), "a+") as lease:
        while not stopping.wait(1.0):
            try:
                fcntl.flock(lease, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                idle_since = None  # a command is attached
                continue
            if idle_since is None:
                idle_since = time.monotonic()
                # Nobody is attached: jobs still running belong to commands that died, and what
                # they cached is nobody's.
                spark.sparkContext.cancelAllJobs()
                spark.catalog.clearCache()
                _release_commands_objects(spark, own)
                why = _after_commands(key, spark)
                if why:
                    print(f"dbt-deltalog Spark server {key} restarting: {why}", flush=True)
                    break  # as when idle: the next command starts a new server
            if time.monotonic() - idle_since >= idle_timeout:
                break  # keep the lock: no command attaches while the server goes away
            fcntl.flock(lease, fcntl.LOCK_UN)
        with contextlib.suppress(FileNotFoundError):
            os.remove(_path(key, ".json"))
        print(f"dbt-deltalog Spark server {key} stopping", flush=True)
        spark.stop()


# The old generation, after a full collection, above this share of its most: the server restarts
# between commands (a JVM that spends its time collecting garbage serves every command slowly).
# DBT_DELTALOG_SERVER_RESTART_SHARE in the environment of the command that starts the server sets another.
RESTART_OLD_GENERATION_SHARE = 0.7
_RESTART_SHARE_ENV = "DBT_DELTALOG_SERVER_RESTART_SHARE"
_COMMANDS = "deltalog.commands"  # a counter in the JVM's system properties: commands attached so far


def heap(spark: Any, collect: bool = False) -> Dict[str, int]:
    """The server JVM's heap: used and most, and its old generation's use after its last collection
    (`collect`: after a full collection made now) and most, in bytes."""
    jvm = spark.sparkContext._jvm
    management = jvm.java.lang.management.ManagementFactory
    if collect:
        jvm.java.lang.System.gc()
    usage = management.getMemoryMXBean().getHeapMemoryUsage()
    out = {"heap_used": int(usage.getUsed()), "heap_max": int(usage.getMax())}
    for pool in management.getMemoryPoolMXBeans():
        if any(word in pool.getName() for word in ("Old Gen", "Tenured")):
            after = pool.getCollectionUsage()
            now = pool.getUsage()
            out["old_used"] = int(now.getUsed())
            out["old_after_gc"] = int(after.getUsed()) if after is not None else int(now.getUsed())
            out["old_max"] = int(now.getMax())
    return out


def _bindings(spark: Any) -> Any:
    return spark.sparkContext._gateway.java_gateway_server.getGateway().getBindings()


def _bound(spark: Any) -> set:
    """The keys of the JVM objects Py4J keeps for the server's own Python."""
    return set(_bindings(spark).keySet())


def _release_commands_objects(spark: Any, own: set) -> None:
    """Once no command is attached: every JVM object the commands' Python processes were handed and still
    held when they ended, released. Py4J keeps each object a client gets in one table for all clients,
    until that client says it is done with it, which a process that exits never says: a command's last
    DataFrames stayed for the server's life, with their plans and the broadcast values of their joins
    (64 MB each in the driver's block store, as heap dumps of the server showed) — the heap grew by
    100-400 MB a build. A full collection then lets Spark's cleaner drop those broadcasts."""
    bindings = _bindings(spark)
    bindings.keySet().retainAll(own | {bindings._target_id})
    spark.sparkContext._jvm.java.lang.System.gc()


def _commands(spark: Any) -> int:
    counter = spark.sparkContext._jvm.java.lang.System.getProperties().get(_COMMANDS)
    return int(counter.get(0)) if counter is not None else 0


def _after_commands(key: str, spark: Any) -> Optional[str]:
    """Once the commands attached have all ended: the heap reported (the server's log and state, which
    `status` and `dbt debug` show), and why the server should restart, if it should."""
    state = read_state(key) or {}
    share = float(os.environ.get(_RESTART_SHARE_ENV) or RESTART_OLD_GENERATION_SHARE)
    seen = heap(spark)
    old_max = seen.get("old_max") or seen["heap_max"]
    if old_max > 0 and seen.get("old_used", seen["heap_used"]) > share * old_max:
        seen = heap(spark, collect=True)  # only a full collection tells what of it is live
    commands = _commands(spark)
    mb = 1 << 20
    print(f"dbt-deltalog Spark server {key}: {commands} command(s) served; heap {seen['heap_used'] // mb} MB used "
          f"of {seen['heap_max'] // mb} MB, old generation {seen.get('old_after_gc', 0) // mb} MB after its last "
          f"collection", flush=True)
    _write_state(key, dict(state, commands=commands, heap=seen, checked=time.time()))
    if old_max > 0 and seen.get("old_after_gc", seen["heap_used"]) > share * old_max:
        return (f"its old generation holds {seen['old_after_gc'] // mb} MB of {old_max // mb} MB after a full "
                f"collection (more than {share:.0%})")
    return None


# --- commands attaching to it ---------------------------------------------------------------------

_attached: Dict[str, object] = {}  # key -> the lease file this process holds (released at exit)
_started: List[subprocess.Popen] = []


def attach(master: str, spark_conf: Dict[str, str], idle_timeout: float = DEFAULT_IDLE_TIMEOUT,
           on_interrupt: Optional[Callable[[Any], None]] = None):
    """A SparkSession of its own on the server for these settings, started first when none runs."""
    key = server_key(master, spark_conf)
    lease = open(_path(key, ".lease"), "a+")
    fcntl.flock(lease, fcntl.LOCK_SH)  # waits while a server is going away, then it is gone
    try:
        state = read_state(key)
        spark = _connect(state, on_interrupt) if state else None
        if spark is None:
            with _locked(_path(key, ".start"), fcntl.LOCK_EX):
                _wait_while_starting(key)
                state = read_state(key)
                spark = _connect(state, on_interrupt) if state else None
                if spark is None:
                    state = _start(key, master, spark_conf, idle_timeout)
                    spark = _connect(state, on_interrupt)
                    if spark is None:
                        raise SparkServerError(
                            f"the Spark server started for this profile (pid {state['pid']}) does not "
                            f"accept connections; see {_path(key, '.log')}")
    except BaseException:
        lease.close()
        raise
    _attached[key] = lease
    spark._deltalog_server = dict(state, key=key)  # what `dbt debug` and cancel() look at
    _count_command(spark)
    return spark


def _count_command(spark: Any) -> None:
    jvm = spark.sparkContext._jvm
    properties = jvm.java.lang.System.getProperties()
    # (an AtomicLongArray: Py4J would hand back an AtomicLong, a Number, as a plain int)
    properties.putIfAbsent(_COMMANDS, jvm.java.util.concurrent.atomic.AtomicLongArray(1))
    properties.get(_COMMANDS).incrementAndGet(0)


def _starting_pid(key: str) -> Optional[int]:
    """For a server of `key` whose Spark is still starting: its pid, or 0 while the file does not name it
    yet (just spawned). None when no server of `key` is starting."""
    try:
        with open(_path(key, ".starting")) as f:
            try:
                fcntl.flock(f, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                try:
                    pid = int(f.read().strip() or 0)
                except ValueError:
                    pid = 0
                return pid if pid and alive(pid) else 0
            return None
    except OSError:
        return None


def _wait_while_starting(key: str) -> None:
    """Wait (at most START_TIMEOUT) for a server of `key` that another command started to be up."""
    deadline = time.monotonic() + START_TIMEOUT
    while _starting_pid(key) is not None and time.monotonic() < deadline:
        time.sleep(0.1)


def _start(key: str, master: str, spark_conf: Dict[str, str], idle_timeout: float) -> dict:
    with contextlib.suppress(FileNotFoundError):
        os.remove(_path(key, ".json"))  # a dead server's
    conf_file = _path(key, ".conf.json")
    fd = os.open(conf_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # settings may hold secrets
    with os.fdopen(fd, "w") as f:
        json.dump({"master": master, "spark_conf": spark_conf, "idle_timeout": idle_timeout}, f)
    log = open(_path(key, ".log"), "ab")
    starting = open(_path(key, ".starting"), "a+")
    fcntl.flock(starting, fcntl.LOCK_EX)  # the server inherits the lock: see serve()
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "dbt.adapters.deltalog.runtime.spark_server", "serve", key,
             str(starting.fileno())],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, cwd=state_dir(),
            pass_fds=(starting.fileno(),),
            start_new_session=True)  # not in the terminal's process group: Ctrl-C of a command spares it
        starting.truncate(0)
        starting.write(str(proc.pid))
        starting.flush()
    finally:
        starting.close()  # the lock stays: the server's copy of the file holds it
        log.close()
    _started.append(proc)
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        state = read_state(key)
        if state and state["pid"] == proc.pid:
            return state
        if proc.poll() is not None:
            raise SparkServerError(
                f"the Spark server exited with code {proc.returncode} before Spark was up: "
                f"{tail(_path(key, '.log'))} (log: {_path(key, '.log')})")
        time.sleep(0.1)
    proc.terminate()
    raise SparkServerError(f"the Spark server did not start within {START_TIMEOUT} s; see {_path(key, '.log')}")


def _connect(state: dict, on_interrupt: Optional[Callable[[Any], None]] = None):
    """A new Spark session in the server's JVM, or None when it does not answer."""
    load("spark")
    from pyspark import SparkConf, SparkContext
    from pyspark.sql import SparkSession

    try:
        gateway = _gateway(state["port"], state["secret"])
        jvm = gateway.jvm
        base = getattr(jvm, "org.apache.spark.sql.classic.SparkSession").getDefaultSession().get()
        jsc = jvm.org.apache.spark.api.java.JavaSparkContext(base.sparkContext())
    except Exception:
        return None
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    SparkContext._gateway, SparkContext._jvm = gateway, jvm
    sc = SparkContext(gateway=gateway, jsc=jsc, conf=SparkConf(_jconf=jsc.getConf()))
    spark = SparkSession(sc, jsparkSession=base.newSession())
    if threading.current_thread() is threading.main_thread():
        handle_interrupts(spark, on_interrupt)
    return spark


# what pyspark's launch_gateway imports into a new gateway's JVM view, for SparkContext and its friends
_JAVA_IMPORTS = ("org.apache.spark.SparkConf", "org.apache.spark.api.java.*", "org.apache.spark.api.python.*",
                 "org.apache.spark.ml.python.*", "org.apache.spark.mllib.api.python.*", "org.apache.spark.resource.*",
                 "org.apache.spark.sql.Encoders", "org.apache.spark.sql.OnSuccessCall", "org.apache.spark.sql.functions",
                 "org.apache.spark.sql.classic.*", "org.apache.spark.sql.api.python.*", "org.apache.spark.sql.hive.*",
                 "scala.Tuple2")


def _gateway(port: int, secret: str):
    """A py4j gateway to the server's JVM, made as pyspark's launch_gateway makes one for a JVM that is
    already there. Not through launch_gateway: it reads the port from os.environ, and setting then
    removing it there from the attaching thread broke dbt's parse in the main thread, which iterates
    os.environ (a KeyError for the key removed meanwhile)."""
    load("spark")
    from py4j.clientserver import ClientServer, JavaParameters, PythonParameters
    from py4j.java_gateway import GatewayParameters, JavaGateway, java_import

    if os.environ.get("PYSPARK_PIN_THREAD", "true").lower() == "true":
        gateway = ClientServer(java_parameters=JavaParameters(port=port, auth_token=secret, auto_convert=True),
                               python_parameters=PythonParameters(port=0, eager_load=False))
    else:
        gateway = JavaGateway(gateway_parameters=GatewayParameters(port=port, auth_token=secret, auto_convert=True))
    gateway.proc = None
    for name in _JAVA_IMPORTS:
        java_import(gateway.jvm, name)
    return gateway


def handle_interrupts(spark, on_interrupt: Optional[Callable[[Any], None]]) -> None:
    """Ctrl-C cancels this command's jobs only (`on_interrupt`), not pyspark's every job of the JVM:
    other commands share it. Called from the main thread (signal handlers are set there)."""
    def interrupt(signum, frame):
        try:
            if on_interrupt is not None:
                on_interrupt(spark)
        finally:
            raise KeyboardInterrupt()

    signal.signal(signal.SIGINT, interrupt)


def describe(master: str, spark_conf: Dict[str, str]) -> str:
    """One line for `dbt debug`: whether a server for these settings runs, and since when."""
    state = read_state(server_key(master, spark_conf))
    if not state:
        return "not running; the next dbt command starts it"
    up = int(time.time() - state["started"])
    return (f"running (pid {state['pid']}, up {up // 60} min {up % 60} s, {_served(state)}; stops after "
            f"{int(state['idle_timeout'])} s with no dbt command attached)")


def _served(state: dict) -> str:
    """The commands a server served and its heap, as it last reported them."""
    seen = state.get("heap")
    if not seen:
        return f"{state.get('commands', 0)} command(s) served"
    mb = 1 << 20
    return (f"{state.get('commands', 0)} command(s) served, heap {seen['heap_used'] // mb} MB of "
            f"{seen['heap_max'] // mb} MB, old generation {seen.get('old_after_gc', 0) // mb} MB after its last "
            f"collection")


def list_servers() -> List[dict]:
    out = []
    for name in sorted(os.listdir(state_dir())):
        if name.endswith(".json") and not name.endswith(".conf.json"):
            state = read_state(name[: -len(".json")])
            if state:
                out.append(dict(state, key=name[: -len(".json")]))
    return out


def stop_servers(wait: float = 30.0) -> int:
    """Stop every running server, and every one still starting (SIGTERM: each finishes its idle check, or
    its start, and stops Spark)."""
    servers = list_servers()
    running = {int(s["pid"]) for s in servers}
    for name in sorted(os.listdir(state_dir())):
        if name.endswith(".starting"):
            pid = _starting_pid(name[: -len(".starting")])
            if pid and pid not in running:
                servers.append({"pid": pid, "key": name[: -len(".starting")]})
    for s in servers:
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(s["pid"]), signal.SIGTERM)
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline and any(alive(int(s["pid"])) for s in servers):
        time.sleep(0.2)
    return len(servers)


def _main(argv: List[str]) -> int:
    command = argv[0] if argv else "status"
    if command == "serve" and len(argv) in (2, 3):
        key = argv[1]
        with open(_path(key, ".conf.json")) as f:
            spec = json.load(f)
        os.remove(_path(key, ".conf.json"))  # the settings may hold secrets; the server has them now
        serve(key, spec["master"], spec["spark_conf"], float(spec["idle_timeout"]),
              int(argv[2]) if len(argv) == 3 else None)
        return 0
    if command == "status":
        servers = list_servers()
        for s in servers:
            print(f"{s['key']}  pid {s['pid']}  master {s['master']}  up {int(time.time() - s['started'])} s  "
                  f"{_served(s)}")
        print(f"{len(servers)} dbt-deltalog Spark server(s) running ({state_dir()})")
        return 0
    if command == "stop":
        print(f"stopped {stop_servers()} dbt-deltalog Spark server(s)")
        return 0
    print("usage: python -m dbt.adapters.deltalog.runtime.spark_server status|stop", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
