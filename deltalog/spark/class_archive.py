"""A class-data-sharing archive of the local Spark driver: the JVM's start made once, reused after.

A new Spark JVM spends most of its first seconds loading and verifying the ~20,000 classes Spark, Scala
and Hadoop need before a first query answers. Java's dynamic class-data sharing (AppCDS, JDK 13 and
newer) writes the classes a JVM loaded into an archive when it exits; a later JVM with the same Java and
class path maps that archive instead of loading them again. On the 2-core machine a local
session's start and first queries take a third less time (bench/dev_loop.py measures it in a dbt build).

How it is kept, per Java runtime and Spark installation (`key`), in `folder()`:
- no archive yet: the JVM starts without one, as it would with sharing off, and when the process that
  started it ends, a recorder of its own is started in the background, at the lowest CPU priority
  (dbt/adapters/deltalog/runtime/archive_recorder.py). A JVM that records starts about 1.7x
  slower (13 s against 7.7 s to a local session on 2 cores, with `-XX:ArchiveClassesAtExit` and without),
  so no user's command records: on a CI machine whose cache is gone by the next run, every run would
  pay that and none would map the archive. The recorder takes a lock (`recording.lock`: one at a time), starts
  Spark with `-XX:ArchiveClassesAtExit=<key>.<uuid>.part`, runs a small workload, lets its JVM exit and
  keeps the part as `<key>.jsa` once the JVM's log (`<part>.log`) says it was written whole: renamed,
  atomically.
- later starts map it (`-XX:SharedArchiveFile`). The JVM checks that the archive fits its runtime and
  class path and runs without it otherwise; a JVM that cannot start over it (a damaged file) is
  started again without it, and the archive is removed (`discard`).
- parts left by a recorder that was killed are removed by the next recorder, or after a day; archives no
  start used for 30 days (another Spark or Java) too, and all but the `MAX_ARCHIVES` last used.

Left alone when the user's JVM options already name an archive or turn sharing off (the adapter also
leaves it off when its profile says `spark.deltalog.classArchive: false`). Only for a driver JVM this process starts on a local
master (a cluster's executors and Connect servers start elsewhere).
"""
from __future__ import annotations

import hashlib
import os
import shutil
import uuid
from typing import IO, Optional

from .. import user_cache
from ..processes import alive

SUFFIX = ".jsa"
# JVM options that already decide about class-data sharing: the user's choice stands (JDK 24's AOT cache
# too: a JDK 25 JVM given an AOT cache crashed as it wrote a dynamic archive over it)
_USERS_CHOICE = ("-XX:SharedArchiveFile", "-XX:ArchiveClassesAtExit", "-Xshare:off", "-XX:+AutoCreateSharedArchive",
                 "-XX:AOTCache", "-XX:AOTCacheOutput", "-XX:AOTMode", "-XX:AOTConfiguration")
# the archive's own log lines (classes it skips, e.g. from signed jars) stay out of the JVM's log
_QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"


def folder() -> str:
    """Where archives are kept: `$XDG_CACHE_HOME/deltalog/class-archives` (default `~/.cache/...`)."""
    return user_cache.folder("class-archives")


def _java_binary() -> Optional[str]:
    home = os.environ.get("JAVA_HOME")
    java = os.path.join(home, "bin", "java") if home else shutil.which("java")
    return os.path.realpath(java) if java and os.path.exists(java) else None


def key(class_path: str) -> Optional[str]:
    """What an archive is valid for: the Java runtime (its binary and its JVM library, by path, size
    and time) and the class path (pyspark's jars folder, by listing, and the extra class path). None when
    no Java is found."""
    java = _java_binary()
    if java is None:
        return None
    from deltalog.lazy_imports import load

    load("spark")  # pyspark whole before any import from it (lazy_imports.py says why)
    import pyspark

    runtime = os.path.dirname(os.path.dirname(java))
    parts = [java, pyspark.__version__]
    for entry in filter(None, class_path.split(os.pathsep)):  # a rebuilt jar at the same path: a new key
        try:
            st = os.stat(entry)
            parts.append(f"{os.path.realpath(entry)}:{st.st_size}:{int(st.st_mtime)}")
        except OSError:
            parts.append(entry)
    for lib in ("lib/server/libjvm.so", "lib/server/libjvm.dylib", "bin/server/jvm.dll", "lib/modules"):
        path = os.path.join(runtime, lib)
        if os.path.exists(path):
            st = os.stat(path)
            parts.append(f"{lib}:{st.st_size}:{int(st.st_mtime)}")
    jars = os.path.join(os.path.dirname(pyspark.__file__), "jars")
    if os.path.isdir(jars):
        parts.append(hashlib.sha1("\n".join(sorted(os.listdir(jars))).encode()).hexdigest())
    spark_home = os.environ.get("SPARK_HOME")
    if spark_home:
        parts.append(os.path.realpath(spark_home))
    return f"spark-{pyspark.__version__}-" + hashlib.sha1("\n".join(parts).encode()).hexdigest()[:16]


PART_MAX_AGE_S = 86400            # a part this old was left by a killed process
ARCHIVE_MAX_AGE_S = 30 * 86400    # an archive no start used for this long (an old Spark or Java) goes
# ... and beyond this many, the least recently used: each installation of the package is a class path of
# its own (its jar's path), so a CI runner making a fresh environment per job would add ~180 MB a job
MAX_ARCHIVES = 4


def _remove_stale(where: str) -> None:
    import time

    now = time.time()
    archives = []
    for entry in os.listdir(where):
        path = os.path.join(where, entry)
        try:
            age = now - os.path.getmtime(path)
            left = entry.endswith((".part", ".part.log")) or entry.startswith("hs_err_pid")  # crash reports too
            if (left and age > PART_MAX_AGE_S) or (entry.endswith(SUFFIX) and age > ARCHIVE_MAX_AGE_S):
                os.remove(path)
            elif entry.endswith(SUFFIX):
                archives.append((age, path))
        except OSError:
            pass
    for _, path in sorted(archives)[MAX_ARCHIVES:]:  # a JVM that maps one keeps its mapping
        try:
            os.remove(path)
        except OSError:
            pass


def driver_options(conf: dict[str, str], class_path: str) -> tuple[str, Optional[str]]:
    """The JVM options for this start (to add to the driver's), and the archive a recorder should make
    (None when the JVM maps it, or when left alone: then the options are "")."""
    given = conf.get("spark.driver.extraJavaOptions", "")
    if any(option in given for option in _USERS_CHOICE):
        return "", None
    name = key(class_path)
    if name is None:
        return "", None
    where = folder()
    archive = os.path.join(where, name + SUFFIX)
    try:
        os.makedirs(where, exist_ok=True)
        if os.path.exists(archive):
            os.utime(archive)  # in use: the last used, kept (before the others are weeded)
        _remove_stale(where)
    except OSError:
        return "", None
    if os.path.exists(archive):
        return f"-XX:SharedArchiveFile={archive} {_crash_report()} {_QUIET}", None
    return "", archive


def _crash_report() -> str:
    """A JVM that crashes over an archive, or as it writes one, leaves its report in the archives' folder,
    not in the project folder."""
    return f"-XX:ErrorFile={os.path.join(folder(), 'hs_err_pid%p.log')}"


def new_part(archive: str) -> str:
    """Where a recording JVM writes `archive` before it is whole: a name of its own."""
    return f"{archive[: -len(SUFFIX)]}.{uuid.uuid4().hex[:12]}.part"


def archive_in(options: str) -> Optional[str]:
    """The archive `options` map, if any."""
    for option in options.split():
        if option.startswith("-XX:SharedArchiveFile="):
            return option.split("=", 1)[1]
    return None


def discard(archive: str) -> None:
    """An archive the JVM could not start over: gone, so the next start records a new one."""
    try:
        os.remove(archive)
    except OSError:
        pass


WRITTEN = "Written dynamic archive"  # the JVM's last log line of a whole archive (-Xlog:cds+dynamic)


def record_options(part: str) -> str:
    return f"-XX:ArchiveClassesAtExit={part} {_crash_report()} {_QUIET} -Xlog:cds+dynamic=info:file={part}.log"


def recording_lock() -> Optional[IO]:
    """The recorders' lock (`recording.lock` in `folder()`), held until the returned file closes; None
    when another recorder holds it, or where there are no file locks (then nothing records)."""
    try:
        import fcntl
    except ImportError:
        return None
    try:
        os.makedirs(folder(), exist_ok=True)
        lock = open(os.path.join(folder(), "recording.lock"), "a")
    except OSError:
        return None
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        lock.close()
        return None
    return lock


def remove_parts() -> None:
    """Parts of recorders that were killed: only the holder of `recording_lock()` calls this, and only a
    holder writes parts (a killed recorder's JVM may still be writing one: it writes to a removed file)."""
    where = folder()
    try:
        entries = os.listdir(where)
    except OSError:
        return
    for entry in entries:
        if entry.endswith((".part", ".part.log")):
            try:
                os.remove(os.path.join(where, entry))
            except OSError:
                pass


def recorder_running() -> bool:
    lock = recording_lock()
    if lock is None:
        return True
    lock.close()
    return False


def adopt_when_written(pid: int, part: str, timeout_s: float = 600) -> bool:
    """Wait for the JVM `pid` to end, then keep its part as the archive when its log says the archive was
    written whole; otherwise remove it. True when adopted."""
    import time

    deadline = time.monotonic() + timeout_s
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    log = part + ".log"
    try:
        with open(log, errors="replace") as f:
            written = WRITTEN in f.read()
    except OSError:
        written = False
    adopted = False
    try:
        if not alive(pid) and written and os.path.getsize(part) > 0:
            os.replace(part, part.rsplit(".", 2)[0] + SUFFIX)
            adopted = True
        elif not alive(pid):
            os.remove(part)
    except OSError:
        pass
    try:
        os.remove(log)
    except OSError:
        pass
    return adopted
