"""A real Hive Metastore on 127.0.0.1 for tests, from pyspark's own jars (hive-metastore 2.3, Derby),
started in a temporary folder and stopped when the context ends."""
from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from typing import Iterator

from tests.support.standalone import free_port, spark_home, wait_until_listening

_SITE = """<?xml version="1.0"?>
<configuration>
  <property><name>javax.jdo.option.ConnectionURL</name><value>jdbc:derby:;databaseName={db};create=true</value></property>
  <property><name>datanucleus.schema.autoCreateAll</name><value>true</value></property>
  <property><name>hive.metastore.schema.verification</name><value>false</value></property>
  <property><name>hive.async.log.enabled</name><value>false</value></property>
  <property><name>hive.metastore.warehouse.dir</name><value>file://{warehouse}</value></property>
</configuration>
"""


@dataclass
class Metastore:
    port: int
    folder: str
    process: subprocess.Popen

    @property
    def uri(self) -> str:
        return f"thrift://127.0.0.1:{self.port}"

    def log(self) -> str:
        try:
            with open(os.path.join(self.folder, "metastore.log"), errors="replace") as f:
                return f.read()[-3000:]
        except OSError:
            return ""


def java_or_skip() -> str:
    import pytest

    java = shutil.which("java") or (os.path.join(os.environ["JAVA_HOME"], "bin", "java")
                                    if os.environ.get("JAVA_HOME") else None)
    if not java:
        pytest.skip("no Java on this machine to run a Hive Metastore")
    return java


@contextlib.contextmanager
def hive_metastore(java: str = "java") -> Iterator[Metastore]:
    folder = tempfile.mkdtemp(prefix="deltalog-hms-")
    conf = os.path.join(folder, "conf")
    os.makedirs(conf)
    with open(os.path.join(conf, "hive-site.xml"), "w") as f:
        f.write(_SITE.format(db=os.path.join(folder, "metastore_db"), warehouse=os.path.join(folder, "warehouse")))
    port = free_port()
    classpath = conf + os.pathsep + os.path.join(spark_home(), "jars", "*")
    with open(os.path.join(folder, "metastore.log"), "wb") as log:
        process = subprocess.Popen([java, "-Xmx512m", "-Dderby.system.home=" + folder, "-cp", classpath,
                                    "org.apache.hadoop.hive.metastore.HiveMetaStore", "-p", str(port)],
                                   cwd=folder, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    metastore = Metastore(port, folder, process)
    try:
        try:
            wait_until_listening(port, process, "the Hive Metastore", 180, poll=0.5)
        except RuntimeError as exc:
            raise RuntimeError(f"{exc}:\n{metastore.log()}") from None
        yield metastore
    finally:
        process.terminate()
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        shutil.rmtree(folder, ignore_errors=True)
