"""A Spark writer running a mixed workload on one table, for the random-SIGKILL trials.

    python mixed_child.py <table uri> <storage options JSON or '-'> <writer> <commits>

Commit `seq` of writer `w` (one at a time, no other writer) is, by `seq % 4`:
  0  an append of ROWS new rows (`append_ids(w, seq)`, v = w);
  1  a MERGE (deletion vectors on the table): source = the counter row, the first 5 ids of the append
     before, and 2 new ids; matched rows get v + 1, the new ones are inserted with v = 0;
  2  a DELETE (deletion vectors) of 3 ids of the append two commits before;
  3  an OPTIMIZE (a compaction: no data change, carries no tag).
Commits 0-2 carry {"writer": w, "seq": seq} in their commitInfo, so `expected_rows` can say what
every landed commit did. The table checkpoints every 3 versions. Prints `ready` once Spark is up,
then one line per landed commit: `landed <seq> <version>`.
"""
from __future__ import annotations

import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
for p in (HERE, ROOT):
    if p not in sys.path:
        sys.path.insert(0, p)

ROWS = 20
COUNTER_ID = -1
TABLE_CONFIGURATION = {"delta.enableDeletionVectors": "true", "delta.checkpointInterval": "3"}


def append_ids(writer: int, seq: int) -> list[int]:
    return [writer * 1_000_000 + seq * 1000 + k for k in range(ROWS)]


def merge_ids(writer: int, seq: int) -> list[int]:
    return [COUNTER_ID] + append_ids(writer, seq - 1)[:5] + [writer * 1_000_000 + seq * 1000 + 500 + k
                                                             for k in range(2)]


def delete_ids(writer: int, seq: int) -> list[int]:
    return append_ids(writer, seq - 2)[10:13]


def expected_rows(commit_infos: list[dict]) -> dict[int, int]:
    """{id: v} after the tagged commits, oldest first (the table starts with the counter row at 0)."""
    rows = {COUNTER_ID: 0}
    for info in commit_infos:
        if "writer" not in info:
            continue
        w, seq = int(info["writer"]), int(info["seq"])
        if seq % 4 == 0:
            rows.update({i: w for i in append_ids(w, seq)})
        elif seq % 4 == 1:
            for i in merge_ids(w, seq):
                rows[i] = rows[i] + 1 if i in rows else 0
        elif seq % 4 == 2:
            for i in delete_ids(w, seq):
                rows.pop(i, None)
    return rows


def main(uri: str, options: dict | None, writer: int, commits: int) -> None:
    from dbt.adapters.deltalog.runtime.session import get_spark
    from deltalog.storage import files as filesystem
    from deltalog.spark import operations
    from deltalog.spark.optimize import optimize

    if options:
        filesystem.configure(uri.split("/", 3)[0] + "//" + uri.split("/", 3)[2], options)
    spark = get_spark("local[1]", {"spark.sql.shuffle.partitions": "1"})
    print("ready", flush=True)
    for seq in range(commits):
        info = {"writer": writer, "seq": seq}
        kind = seq % 4
        if kind == 0:
            df = spark.createDataFrame([(i, writer) for i in append_ids(writer, seq)], "id long, v long")
            version = operations.write_dataframe(df, uri, mode="append", extra_commit_info=info)
        elif kind == 1:
            source = spark.createDataFrame([(i, 0) for i in merge_ids(writer, seq)], "id long, v long")
            version = operations.merge(spark, uri, source, "s.id = t.id", when_matched_update={"v": "t.v + 1"},
                                       when_not_matched_insert={"id": "s.id", "v": "0"},
                                       source_alias="s", target_alias="t", extra_commit_info=info)
        elif kind == 2:
            ids = ", ".join(str(i) for i in delete_ids(writer, seq))
            version = operations.delete(spark, uri, f"id IN ({ids})", extra_commit_info=info)
        else:
            version = optimize(spark, uri)
        print(f"landed {seq} {version}", flush=True)
    spark.stop()


if __name__ == "__main__":
    main(sys.argv[1], None if sys.argv[2] == "-" else json.loads(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))
