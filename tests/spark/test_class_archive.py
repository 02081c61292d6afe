"""The local driver's class-data-sharing archive (deltalog/spark/class_archive.py): a first JVM starts
without one and its process leaves a recorder behind (runtime/archive_recorder.py), the next JVM maps
the archive, a damaged one is discarded without failing the start; each JVM in a process of its own, as
`dbt` commands start them, with the archives in a folder of the test's own."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from deltalog.spark import class_archive

pytestmark = pytest.mark.spark

START = """
import json, sys
from dbt.adapters.deltalog.runtime.session import get_spark
spark = get_spark("local[1]", json.loads(sys.argv[1]))
rows = spark.range(100).selectExpr("id % 3 as k").groupBy("k").count().orderBy("k").collect()
jvm = spark.sparkContext._jvm
options = list(jvm.java.lang.management.ManagementFactory.getRuntimeMXBean().getInputArguments())
print(json.dumps({"rows": [list(r) for r in rows], "options": [str(o) for o in options]}))
"""


def _start(cache: Path, cwd: Path, conf: dict | None = None) -> dict:
    # the recorder at the priority of the test's other work, not starved by the suite's other worker
    env = {**os.environ, "XDG_CACHE_HOME": str(cache), "DELTALOG_ARCHIVE_RECORDER_YIELDS": "0"}
    done = subprocess.run([sys.executable, "-c", START, json.dumps(conf or {})], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _archives(cache: Path) -> list[Path]:
    folder = cache / "deltalog" / "class-archives"
    return sorted(folder.glob("*.jsa")) if folder.exists() else []


def test_a_recorder_makes_the_archive_the_next_jvm_maps_and_a_damaged_one_is_dropped(tmp_path):
    cache, project = tmp_path / "cache", tmp_path / "project"
    project.mkdir()
    first = _start(cache, project)
    assert first["rows"] == [[0, 34], [1, 33], [2, 33]]
    assert not any("ArchiveClassesAtExit" in o or "SharedArchiveFile" in o for o in first["options"])
    deadline = time.monotonic() + 300  # the command did not wait: its recorder keeps it once written whole
    while not _archives(cache) and time.monotonic() < deadline:
        time.sleep(0.5)
    [archive] = _archives(cache)
    assert archive.stat().st_size > 10_000_000
    assert not list(archive.parent.glob("*.part*"))

    second = _start(cache, project)
    assert second["rows"] == first["rows"]
    assert f"-XX:SharedArchiveFile={archive}" in second["options"]

    data = archive.read_bytes()
    archive.chmod(0o644)
    archive.write_bytes(data[: len(data) // 3])  # as a disk that filled up would leave it
    third = _start(cache, project)
    assert third["rows"] == first["rows"]
    assert not any("SharedArchiveFile" in o for o in third["options"])
    assert _archives(cache) == []  # gone: the next start records a new one
    assert not list(project.glob("hs_err_pid*.log"))  # the crashed JVM's report is not in the project


def test_the_users_own_choice_leaves_the_jvm_alone(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    for choice in ("-Xshare:off", "-XX:SharedArchiveFile=/x.jsa", "-XX:AOTCache=/x.aot", "-XX:AOTCacheOutput=/x.aot"):
        users = {"spark.driver.extraJavaOptions": f"-Xmx2g {choice}"}
        assert class_archive.driver_options(users, "") == ("", None)  # nothing added, no recorder
    assert f"-XX:ErrorFile={tmp_path}/deltalog/class-archives/" in class_archive.record_options("/x.part")
    options, missing = class_archive.driver_options({}, "")  # none yet: a recorder should make it
    assert options == "" and missing and missing.endswith(class_archive.SUFFIX)
    assert class_archive.new_part(missing).endswith(".part")


def test_one_recorder_at_a_time(tmp_path, monkeypatch):
    import fcntl

    from dbt.adapters.deltalog.runtime import archive_recorder

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    folder = Path(class_archive.folder())
    folder.mkdir(parents=True)
    with open(folder / "recording.lock", "a") as held:  # as a running recorder holds it
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        assert class_archive.recorder_running()
        assert archive_recorder.record("local[1]", {}) is False  # gone at once, no JVM started
    assert not class_archive.recorder_running()
    assert [p.name for p in folder.iterdir()] == ["recording.lock"]


def test_a_recorder_removes_what_a_killed_one_left(tmp_path, monkeypatch):
    from dbt.adapters.deltalog.runtime import archive_recorder
    from dbt.adapters.deltalog.runtime.jvm import session_conf

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(archive_recorder, "YIELDS", False)
    folder = Path(class_archive.folder())
    folder.mkdir(parents=True)
    conf = session_conf("local[1]", {})  # the recorder's: the archive named as it names it
    options, archive = class_archive.driver_options(conf, conf["spark.driver.extraClassPath"])
    part = Path(class_archive.new_part(archive))
    part.write_bytes(b"half an archive")
    Path(f"{part}.log").write_text("[1.0s][info][cds,dynamic] Copying 15452 klasses\n")
    Path(archive).write_bytes(b"an archive")  # there: this recorder starts no JVM
    assert archive_recorder.record("local[1]", {}) is False
    assert sorted(p.name for p in folder.iterdir()) == sorted(["recording.lock", Path(archive).name])


def test_a_rebuilt_jar_on_the_class_path_makes_a_new_key(tmp_path):
    jar = tmp_path / "x.jar"
    jar.write_bytes(b"one")
    before = class_archive.key(str(jar))
    jar.write_bytes(b"other")
    os.utime(jar, (1, 1))
    assert class_archive.key(str(jar)) != before


def test_old_parts_and_archives_go_and_only_the_last_used_archives_stay(tmp_path):
    """A killed recorder's part goes after a day, an archive after 30 days unused, and beyond
    MAX_ARCHIVES the least recently used: a fresh environment per CI job must not fill the disk."""
    now = time.time()
    kept_part = tmp_path / "spark-4.3.0-a.0123.part"
    old_part = tmp_path / "spark-4.3.0-b.4567.part"
    old_report = tmp_path / "hs_err_pid123.log"
    old_archive = tmp_path / "spark-4.2.0-old.jsa"
    used = [tmp_path / f"spark-4.3.0-used{i}.jsa" for i in range(class_archive.MAX_ARCHIVES + 2)]
    for age, path in [(3600, kept_part), (2 * 86400, old_part), (2 * 86400, old_report), (31 * 86400, old_archive),
                      *[(600 * (i + 1), p) for i, p in enumerate(used)]]:
        path.write_bytes(b"x")
        os.utime(path, (now - age, now - age))
    (tmp_path / "recording.lock").touch()
    class_archive._remove_stale(str(tmp_path))
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["recording.lock", kept_part.name, *[p.name for p in used[:class_archive.MAX_ARCHIVES]]])


def test_the_archive_a_start_maps_is_not_the_one_weeded_out(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    folder = Path(class_archive.folder())
    folder.mkdir(parents=True)
    archive = Path(class_archive.driver_options({}, "")[1])
    others = [folder / f"spark-4.3.0-other{i}.jsa" for i in range(class_archive.MAX_ARCHIVES)]
    for age, path in [(86400, archive), *[(60, p) for p in others]]:  # this one the least recently used
        path.write_bytes(b"x")
        os.utime(path, (time.time() - age, time.time() - age))
    options, missing = class_archive.driver_options({}, "")
    assert missing is None and f"-XX:SharedArchiveFile={archive}" in options
    assert archive.exists() and len(list(folder.glob("*.jsa"))) == class_archive.MAX_ARCHIVES


def test_a_part_whose_log_does_not_say_written_is_never_adopted(tmp_path):
    part = tmp_path / "spark-x-0123.abc.part"
    part.write_bytes(b"half an archive")
    (tmp_path / "spark-x-0123.abc.part.log").write_text("[1.0s][info][cds,dynamic] Copying 15452 klasses\n")
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    assert not class_archive.adopt_when_written(gone.pid, str(part), timeout_s=5)
    assert list(tmp_path.iterdir()) == []
    part.write_bytes(b"a whole archive")
    (tmp_path / "spark-x-0123.abc.part.log").write_text(f"[2.0s][info][cds,dynamic] {class_archive.WRITTEN} 0x0\n")
    assert class_archive.adopt_when_written(gone.pid, str(part), timeout_s=5)
    assert [p.name for p in tmp_path.iterdir()] == ["spark-x-0123.jsa"]


def test_the_recorder_waits_for_an_idle_machine(monkeypatch):
    from dbt.adapters.deltalog.runtime import archive_recorder

    # (busy, idle) CPU time so far: two busy seconds, an idle one, a busy one, then idle ones
    times = iter([(0, 0), (90, 10), (180, 20), (190, 110), (280, 120), (290, 210), (300, 300), (310, 390)])
    seconds = []
    monkeypatch.setattr(archive_recorder, "_cpu_times", lambda: next(times))
    monkeypatch.setattr("time.sleep", seconds.append)
    archive_recorder._wait_until_idle()
    assert len(seconds) == 7  # three idle seconds in a row: the last three
    assert next(times, None) is None


def test_the_recorder_takes_only_the_settings_that_shape_the_jvm():
    from dbt.adapters.deltalog.runtime import jvm

    profile = {"spark.driver.extraClassPath": "/opt/extra.jar", "spark.driver.extraJavaOptions": "-Xmx2g",
               "spark.deltalog.lateOptimizingCompiler": "false", "spark.sql.catalogImplementation": "hive",
               "spark.hadoop.fs.s3a.secret.key": "secret", "spark.jars.packages": "org.example:lib:1.0"}
    assert jvm.jvm_settings(profile) == {
        "spark.driver.extraClassPath": "/opt/extra.jar", "spark.driver.extraJavaOptions": "-Xmx2g",
        "spark.deltalog.lateOptimizingCompiler": "false"}
