"""A Spark writer on an S3 table (deltalog.spark.operations), for the concurrency and crash tests.

    python s3_spark_child.py <table uri> <storage options JSON> <writer> <commits> [<hook>]

Commit i of writer w: when i % 3 == 2 a read-modify-write MERGE adds 1 to the counter row (id -1),
else an append of ROWS rows (ids from `append_ids(w, i)`). Each commit carries {"writer": w, "seq": i}
in its commitInfo. A commit that loses a conflict is retried with a fresh snapshot; the conflicts are
reported. Prints one JSON line: {"landed": [[seq, kind, version], ...], "conflicts": [[class, message], ...]}.

hooks (the process kills itself with SIGKILL): `files_written:K` in commit K, after the executors wrote
its data files to the bucket, before the commit; `commit_put:K` in commit K, just before the put of its
log entry; `commit_landed:K` just after it.
"""
from __future__ import annotations

import json
import os
import signal
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
for p in (HERE, ROOT):
    if p not in sys.path:
        sys.path.insert(0, p)

ROWS = 20
COUNTER_ID = -1


def append_ids(writer: int, seq: int) -> list[int]:
    return [writer * 1_000_000 + seq * 1000 + k for k in range(ROWS)]


def die() -> None:
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGKILL)


def install(hook: str | None, state: dict) -> None:
    if not hook:
        return
    name, _, arg = hook.partition(":")
    at = int(arg)
    from deltalog.storage.object_store import ObjectLogStore
    from deltalog.spark import operations

    if name == "files_written":
        original = operations.write_files

        def write_files(*args, **kwargs):
            out = original(*args, **kwargs)
            if state["seq"] == at:
                die()
            return out
        operations.write_files = write_files
    elif name in ("commit_put", "commit_landed"):
        original_put = ObjectLogStore.write_if_absent

        def write_if_absent(self, fname, data):
            commit = fname.endswith(".json") and state["seq"] == at
            if commit and name == "commit_put":
                die()
            original_put(self, fname, data)
            if commit:
                die()
        ObjectLogStore.write_if_absent = write_if_absent
    else:
        raise SystemExit(f"unknown hook {hook!r}")


def main(uri: str, options: dict, writer: int, commits: int, hook: str | None) -> None:
    from dbt.adapters.deltalog.runtime.session import get_spark
    from deltalog.storage import files as filesystem
    from deltalog.errors import ConcurrentModificationError
    from deltalog.spark import operations

    filesystem.configure(uri.split("/", 3)[0] + "//" + uri.split("/", 3)[2], options)
    spark = get_spark("local[1]", {"spark.sql.shuffle.partitions": "1"})
    state = {"seq": -1}
    install(hook, state)
    landed, conflicts = [], []
    for seq in range(commits):
        state["seq"] = seq
        info = {"writer": writer, "seq": seq}
        for attempt in range(30):
            try:
                if seq % 3 == 2:
                    kind = "merge"
                    source = spark.createDataFrame([(COUNTER_ID, 0)], "id long, v long")
                    version = operations.merge(spark, uri, source, "s.id = t.id", when_matched_update={"v": "t.v + 1"},
                                               source_alias="s", target_alias="t", extra_commit_info=info)
                else:
                    kind = "append"
                    df = spark.createDataFrame([(i, writer) for i in append_ids(writer, seq)], "id long, v long")
                    version = operations.write_dataframe(df, uri, mode="append", extra_commit_info=info)
                landed.append([seq, kind, version])
                break
            except ConcurrentModificationError as exc:
                conflicts.append([type(exc).__name__, str(exc)[:400]])
        else:
            raise SystemExit(f"writer {writer}: commit {seq} lost 30 conflicts in a row")
    print(json.dumps({"landed": landed, "conflicts": conflicts}), flush=True)
    spark.stop()


if __name__ == "__main__":
    main(sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]),
         sys.argv[5] if len(sys.argv) > 5 else None)
