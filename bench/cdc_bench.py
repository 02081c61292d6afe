"""Change capture (apply changes, SCD type 1) into a large table, as a stream: deltalog's `change_applier`
against the same workload through delta-spark's `foreachBatch` MERGE, one run, one machine, each way in
a process (and JVM) of its own, one after the other.

    python bench/cdc_bench.py [--rows 10000000] [--changes 1000] [--interval 10] [--minutes 10]
                              [--only ours|delta-spark] [--files N] [--sample-seconds 15]
                              [--no-auto-compact] [--ours-python PATH] [--json PATH]

Each way first builds a `--rows`-row table (id bigint, name string, amount double, status string,
quantity int, updated_at timestamp; files of ~100 MB, one per 5M rows, above auto-compaction's small
size; deletion vectors and auto-compaction on): ours with `deltalog.spark.operations.write_dataframe`,
delta-spark with CREATE TABLE … AS SELECT. A Structured Streaming JSON file source (processingTime
trigger, 1 second; its first, empty trigger not timed) then reads a landing folder that receives
a file of `--changes` changes every `--interval` seconds for `--minutes` (70 % updates of live ids, 20 %
inserts of new ids, 10 % deletes carrying only the key; columns `op` ('u', 'i', 'd'), a global,
increasing `seq` and `landed_ms`, the time the file landed):
  ours         foreachBatch(change_applier(table, ApplyChanges.of({keys: [id], sequence_by: seq,
               apply_as_deletes: "op = 'd'", except_column_list: [op, seq, landed_ms]}), …)): one MERGE
               per batch plus the applier's state table (`_apply_changes/`)
  delta-spark  foreachBatch doing what its users write: the batch deduplicated (latest `seq` per id),
               then DeltaTable.forPath(…).merge(…) with whenMatchedDelete(op = 'd'),
               whenMatchedUpdateAll(op != 'd'), whenNotMatchedInsertAll(op != 'd'); idempotent through
               `spark.databricks.delta.write.txnAppId/txnVersion`. delta-spark's MERGE marks deleted and
               updated rows in deletion vectors on such a table (delta-spark 3.1+; the table property
               `delta.enableDeletionVectors` is all it needs).
After the last file the stream drains; the table is then checked against the changes the generator made
(row count; every changed id present with its last values, or absent if deleted).

Reported per way (first batch included; its time is also shown apart, as the JIT's warm-up is in it):
  batch        seconds in the foreachBatch function, p50 / p99 / max
  latency      from a file landing (`landed_ms`) to the commit of the table's version holding its rows
               (that commit's timestamp), p50 / p99 over the rows (of ~60 batches, p99 is the worst one's)
  bytes        bytes written per batch (every new file under the table's folder: data, deletion
               vectors, log; ours also the state table's) against the batch's changed rows' bytes (the
               rows after deduplication, the table's columns, written alone as one Snappy Parquet file
               by pyarrow): median ratio and max ratio of batches without a compaction
  files        live files and files with a deletion vector, sampled every `--sample-seconds` (ours also
               the state table's live files): first, max, last, the files a batch adds before the first
               compaction, and whether they are bounded (a compaction ran and the run ends below its peak,
               or they did not grow: a run too short to reach auto-compaction's 50 small files is not)
and the ratio ours / delta-spark of the batch time (p50 and p99). Targets (the issue): latency p99
<= 5 s, bytes <= 3x the changed rows', files and DVs bounded, batch time <= 0.5x delta-spark's.

delta-spark 4.4 runs on pyspark 4.2: its process runs in the environment tests/integration/
test_delta_spark.py makes (`.ci-cache/pyspark-4.2`, made here when missing), with delta-spark's jars from
Maven (tests/support/maven.py); ours runs on this interpreter's pyspark (or `--ours-python`). Both
sessions are started as the adapter starts its own (dbt/adapters/deltalog/runtime/jvm.py), local[2],
4 shuffle partitions, 4g driver; delta-spark's also gets `spark.databricks.delta.snapshotPartitions=2`
(the tests' setting: its 50 default partitions are most of a small read on two cores). Ours also logs
where each batch's time goes: the applier's steps and the MERGE's phases (`deltalog.spark.dml.merge`).
`--json` writes both ways' summaries, per-batch records and file samples.
"""
from __future__ import annotations

import argparse
import io
import json
import logging
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

WAYS = ("ours", "delta-spark")
COLUMNS = ["id", "name", "amount", "status", "quantity", "updated_at"]
SOURCE_SCHEMA = ("id bigint, name string, amount double, status string, quantity int, updated_at timestamp, "
                 "op string, seq bigint, landed_ms bigint")
STATUSES = ["placed", "shipped", "completed", "returned", "cancelled"]
TABLE_SQL = """
select id, concat('name-', cast(id as string)) as name, cast(id * 7919 % 100000 as double) / 100 as amount,
       element_at(array('placed', 'shipped', 'completed', 'returned', 'cancelled'), cast(id % 5 as int) + 1)
         as status,
       cast(id % 7 as int) as quantity, timestamp_seconds(1735689600 + id) as updated_at
from range(0, {rows}, 1, {files})
"""
SPEC = {"keys": ["id"], "sequence_by": "seq", "apply_as_deletes": "op = 'd'",
        "except_column_list": ["op", "seq", "landed_ms"]}
APP_ID = "cdc-bench"


# -- the changes ----------------------------------------------------------------------------------------

class Changes:
    """Writes a file of changes every interval and remembers what each changed id holds last."""

    def __init__(self, landing: Path, rows: int, changes: int, seed: int = 7):
        self.landing, self.changes, self.rng = landing, changes, random.Random(seed)
        self.next_id, self.seq = rows, 0
        self.deleted: set[int] = set()
        self.expected: dict[int, tuple | None] = {}  # id -> (name, amount) last written, None: deleted
        self.files: dict[str, int] = {}               # file name -> landed_ms
        self.by_landed: dict[int, str] = {}
        self.inserted = 0

    def _live_ids(self, n: int, taken: set[int]) -> list[int]:
        out: list[int] = []
        while len(out) < n:
            i = self.rng.randrange(self.next_id)
            if i not in self.deleted and i not in taken:
                taken.add(i)
                out.append(i)
        return out

    def _row(self, i: int, op: str, now: str) -> dict:
        self.seq += 1
        if op == "d":
            return {"id": i, "op": "d", "seq": self.seq}
        row = {"id": i, "name": f"name-{i}-{self.seq}", "amount": round(self.rng.uniform(0, 1000), 2),
               "status": self.rng.choice(STATUSES), "quantity": self.rng.randrange(10), "updated_at": now,
               "op": op, "seq": self.seq}
        self.expected[i] = (row["name"], row["amount"])
        return row

    def land(self, number: int) -> None:
        n = self.changes
        updates, inserts = round(n * 0.7), round(n * 0.2)
        deletes = n - updates - inserts
        taken: set[int] = set()
        upd, dele = self._live_ids(updates, taken), self._live_ids(deletes, taken)
        now = datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")
        rows = [self._row(i, "u", now) for i in upd]
        rows += [self._row(self.next_id + k, "i", now) for k in range(inserts)]
        self.next_id += inserts
        self.inserted += inserts
        rows += [self._row(i, "d", now) for i in dele]
        for i in dele:
            self.deleted.add(i)
            self.expected[i] = None
        self.rng.shuffle(rows)
        name = f"changes-{number:06d}.json"
        landed_ms = int(time.time() * 1000)
        tmp = self.landing / f".{name}.tmp"  # hidden from the file source until renamed
        tmp.write_text("".join(json.dumps({**r, "landed_ms": landed_ms}) + "\n" for r in rows))
        self.files[name] = landed_ms
        self.by_landed[landed_ms] = name
        os.replace(tmp, self.landing / name)


def changed_rows_bytes(paths: list[Path]) -> int:
    """The batch's changed rows (latest `seq` per id, the table's columns) as one Snappy Parquet file."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.json as pj
    import pyarrow.parquet as pq

    schema = pa.schema([("id", pa.int64()), ("name", pa.string()), ("amount", pa.float64()),
                        ("status", pa.string()), ("quantity", pa.int32()), ("updated_at", pa.timestamp("us", "UTC")),
                        ("op", pa.string()), ("seq", pa.int64()), ("landed_ms", pa.int64())])
    options = pj.ParseOptions(explicit_schema=schema)
    table = pa.concat_tables([pj.read_json(p, parse_options=options) for p in paths])
    table = table.sort_by([("id", "ascending"), ("seq", "descending")])
    ids = table.column("id").to_numpy()
    first = [0] + [k for k in range(1, len(ids)) if ids[k] != ids[k - 1]]
    table = table.take(pa.array(first)).select(COLUMNS)
    table = table.set_column(5, "updated_at", pc.cast(table.column("updated_at"), pa.timestamp("us", "UTC")))
    out = io.BytesIO()
    pq.write_table(table, out, compression="snappy")
    return out.tell()


# -- one way, in its own process --------------------------------------------------------------------------

def listing(folder: Path) -> dict[str, int]:
    out = {}
    for dirpath, _, names in os.walk(folder):
        for n in names:
            p = os.path.join(dirpath, n)
            try:
                out[p] = os.path.getsize(p)
            except OSError:
                pass
    return out


def commit_info(log: Path, version: int) -> dict:
    with open(log / f"{version:020d}.json") as f:
        for line in f:
            if line.startswith('{"commitInfo"'):
                return json.loads(line)["commitInfo"]
        f.seek(0)
        for line in f:
            action = json.loads(line)
            if "commitInfo" in action:
                return action["commitInfo"]
    return {}


def file_counts(uri: str) -> tuple[int, int] | None:
    from deltalog.snapshot import Snapshot

    try:
        files = Snapshot.load(uri).files
    except Exception:
        return None
    return files.num_rows, files.num_rows - files.column("deletion_vector").null_count


class Steps(logging.Handler):
    """Where each of our batches goes: the applier's steps (timed by wrapping them) and each MERGE's
    phases, as `deltalog.spark.dml.merge` logs them."""

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.current: dict[str, float] = {}

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        match = re.match(r"(\w+) (\S+): (.*)$", message)
        if not match:
            return
        who = "state merge" if "_apply_changes" in match.group(2) else "table merge"
        for part in match.group(3).split(", "):
            m = re.match(r"(.+) ([\d.]+) s$", part)
            if m:
                key = f"{who}: {m.group(1)}"
                self.current[key] = self.current.get(key, 0.0) + float(m.group(2))

    def wrap(self, owner, name: str, label: str) -> None:
        fn = getattr(owner, name, None)
        if fn is None:
            return
        steps = self

        def timed(*a, **k):
            t = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                steps.current[label] = steps.current.get(label, 0.0) + time.perf_counter() - t

        setattr(owner, name, timed)


def session(way: str, work: Path):
    from dbt.adapters.deltalog.runtime.jvm import start_spark

    conf = {"spark.sql.shuffle.partitions": "4", "spark.driver.memory": "4g"}
    if way == "delta-spark":
        from tests.support.maven import jars

        delta_jars = jars("delta-spark")
        conf.update({
            "spark.jars": ",".join(delta_jars),
            "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
            "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
            "spark.databricks.delta.snapshotPartitions": "2"})
        # delta-spark's Python API ships in its jar (as `--packages` would put it on the path)
        sys.path.insert(0, next(j for j in delta_jars if "delta-spark_" in j))
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    return start_spark("local[2]", conf, log_file=str(work / "spark.log"))


def build_table(spark, way: str, uri: str, rows: int, files: int, auto_compact: bool) -> None:
    sql = TABLE_SQL.format(rows=rows, files=files)
    props = {"delta.enableDeletionVectors": "true"}
    if auto_compact:
        props["delta.autoOptimize.autoCompact"] = "true"
    if way == "ours":
        from deltalog.spark.operations import write_dataframe

        write_dataframe(spark.sql(sql), uri, mode="overwrite", configuration=props)
    else:
        tblprops = ", ".join(f"'{k}' = '{v}'" for k, v in props.items())
        spark.sql(f"create table delta.`{uri}` using delta tblproperties ({tblprops}) as {sql}")


def ours_batch(spark, uri: str, columns: list[str], steps: Steps):
    import deltalog.spark.auto_compact as auto_compact
    from deltalog.spark import operations
    from deltalog.spark.apply_changes import ApplyChanges, applier as applier_module, change_applier

    for owner, name, label in ((applier_module, "checked", "checked (nulls, truncates)"),
                               (applier_module, "prepared", "prepared"),
                               (applier_module.Applier, "purge_tombstones", "purge tombstones"),
                               (applier_module.Applier, "truncated_at", "truncated_at (state snapshot)"),
                               (applier_module.Applier, "state_rows", "state rows (plan)"),
                               (applier_module.Applier, "commit_state", "commit state (all)"),
                               (operations, "merge", "merges, state's and table's (all)")):
        steps.wrap(owner, name, label)

    steps.wrap(auto_compact, "after_write", "after_write (auto-compaction)")
    return change_applier(uri, ApplyChanges.of(SPEC, uri), app_id=APP_ID, source_columns=columns)


def delta_spark_batch(spark, uri: str):
    from delta.tables import DeltaTable
    from pyspark.sql import Window, functions as F

    def upsert(batch_df, batch_id):
        spark_ = batch_df.sparkSession
        newest_first = Window.partitionBy("id").orderBy(F.col("seq").desc())
        latest = batch_df.withColumn("_rn", F.row_number().over(newest_first)).filter("_rn = 1").drop("_rn")
        # a replayed batch is skipped (the txn action), as ours records its batch ids
        spark_.conf.set("spark.databricks.delta.write.txnAppId", APP_ID)
        spark_.conf.set("spark.databricks.delta.write.txnVersion", str(batch_id))
        (DeltaTable.forPath(spark_, uri).alias("t")
         .merge(latest.alias("s"), "t.id = s.id")
         .whenMatchedDelete(condition="s.op = 'd'")
         .whenMatchedUpdateAll(condition="s.op != 'd'")
         .whenNotMatchedInsertAll(condition="s.op != 'd'")
         .execute())

    return upsert


def run_way(args, way: str, out: Path) -> None:
    import pyspark

    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(message)s")
    work = Path(tempfile.mkdtemp(prefix=f"deltalog-cdc-bench-{way}-"))
    uri = str(work / "table")
    landing = work / "landing"
    landing.mkdir()
    load_start = os.getloadavg()[0]  # the machine is shared: how busy it was
    spark = session(way, work)
    steps = Steps()
    logging.getLogger("deltalog.spark.dml.merge").addHandler(steps)
    logging.getLogger("deltalog.spark.dml.merge").setLevel(logging.DEBUG)
    logging.getLogger("deltalog.spark.dml.merge").propagate = False
    files = args.files or max(1, args.rows // 5_000_000)
    t = time.perf_counter()
    build_table(spark, way, uri, args.rows, files, args.auto_compact)
    build_s = time.perf_counter() - t
    table_bytes = sum(listing(Path(uri)).values())
    print(f"[{way}] table of {args.rows:,} rows built in {build_s:.1f} s ({files} files, "
          f"{table_bytes / 1e6:.1f} MB), pyspark {pyspark.__version__}", flush=True)

    gen = Changes(landing, args.rows, args.changes)
    fn = ours_batch(spark, uri, SOURCE_SCHEMA_COLUMNS, steps) if way == "ours" else delta_spark_batch(spark, uri)
    log_dir = Path(uri) / "_delta_log"
    batches: list[dict] = []
    seen_files: set[str] = set()
    started = time.time()

    def batch(batch_df, batch_id):
        before = listing(Path(uri))
        last_version = max(int(p[-25:-5]) for p in before
                           if p.startswith(str(log_dir)) and re.search(r"_delta_log/\d{20}\.json$", p))
        steps.current = {}
        t0 = time.perf_counter()
        fn(batch_df, batch_id)
        took = time.perf_counter() - t0
        done_ms = time.time() * 1000
        after = listing(Path(uri))
        # the files this batch read, by their `landed_ms` (a file source's batch knows no input files)
        landed = sorted(r[0] for r in batch_df.select("landed_ms").distinct().collect())
        names = [gen.by_landed[ms] for ms in landed]
        new = {p: s for p, s in after.items() if p not in before}
        versions = sorted(int(p[-25:-5]) for p in new if re.search(r"_delta_log/\d{20}\.json$", p)
                          and p.startswith(str(log_dir)))
        infos = {v: commit_info(log_dir, v) for v in versions}
        data = [v for v in versions if infos[v].get("operation") != "OPTIMIZE"]
        commit_ms, txn = None, None
        if data:
            info = infos[data[-1]]
            commit_ms = info.get("inCommitTimestamp") or info.get("timestamp")
            txn = '{"txn"' in (log_dir / f"{data[-1]:020d}.json").read_text()  # the batch id recorded
        kinds = {"data": 0, "dv": 0, "log": 0, "state": 0}
        for p, size in new.items():
            rel = os.path.relpath(p, uri)
            kind = ("state" if rel.startswith("_apply_changes") else "log" if rel.startswith("_delta_log")
                    else "dv" if rel.endswith(".bin") else "data")
            kinds[kind] += size
        seen_files.update(names)
        batches.append({
            "batch": int(batch_id), "at_s": round(time.time() - started, 2), "seconds": round(took, 3),
            "files": names, "landed_ms": [gen.files.get(n) for n in names],
            "commit_ms": commit_ms or done_ms, "versions": versions, "read_version": last_version,
            "operations": [infos[v].get("operation") for v in versions],
            "txn": txn, "compacted": any(infos[v].get("operation") == "OPTIMIZE" for v in versions),
            "bytes": kinds, "steps": {k: round(v, 3) for k, v in steps.current.items()}})
        oldest = min((gen.files[n] for n in names), default=done_ms)
        print(f"[{way}] batch {batch_id}: {took:.2f} s, {len(names)} file(s), latency "
              f"{((commit_ms or done_ms) - oldest) / 1000:.2f} s, {sum(kinds.values()) / 1e3:.0f} kB", flush=True)

    source = spark.readStream.schema(SOURCE_SCHEMA).json(str(landing))
    if way == "ours":  # as the adapter does before a long-running stream starts (not in the batches' times)
        t = time.perf_counter()
        fn.warm_up(source)
        print(f"[{way}] warm-up before the stream: {time.perf_counter() - t:.1f} s", flush=True)
    query = (source.writeStream
             .foreachBatch(batch).trigger(processingTime="1 second")
             .option("checkpointLocation", str(work / "checkpoint")).start())
    deadline = time.monotonic() + 120
    while query.lastProgress is None and time.monotonic() < deadline:  # the stream's start, not timed
        time.sleep(0.2)
    samples: list[list] = []
    stop = threading.Event()

    def sample():
        t_start = time.monotonic()
        while True:
            table = file_counts(uri)
            state = file_counts(os.path.join(uri, "_apply_changes")) if way == "ours" else None
            samples.append([round(time.monotonic() - t_start, 1), *(table or (None, None)),
                            state[0] if state else None])
            if stop.wait(args.sample_seconds):
                return

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    started = time.time()
    t_start = time.monotonic()
    count = max(1, int(args.minutes * 60 / args.interval))
    for k in range(count):
        time.sleep(max(0.0, t_start + k * args.interval - time.monotonic()))
        gen.land(k)
    deadline = time.monotonic() + max(120, 6 * args.interval)
    while len(seen_files) < count and time.monotonic() < deadline and query.isActive:
        time.sleep(0.5)
    stop.set()
    sampler.join()
    if query.exception() is not None:
        raise SystemExit(f"[{way}] the stream failed: {query.exception()}")
    query.stop()
    drained = len(seen_files) == count

    # the table against what the changes say
    if way == "ours":
        from deltalog.spark.reader import snapshot_dataframe
        from deltalog.snapshot import Snapshot

        df = snapshot_dataframe(spark, Snapshot.load(uri))
    else:
        df = spark.read.format("delta").load(uri)
    expected_rows = args.rows + gen.inserted - len(gen.deleted)
    got_rows = df.count()
    exp = spark.createDataFrame([(i, v[0] if v else None, v[1] if v else None, v is None)
                                 for i, v in gen.expected.items()],
                                "id bigint, e_name string, e_amount double, e_deleted boolean")
    wrong = exp.join(df, "id", "left").filter(
        "(e_deleted and name is not null) or (not e_deleted and "
        "(name is null or name != e_name or amount != e_amount))").count()
    correct = drained and got_rows == expected_rows and wrong == 0
    print(f"[{way}] check: {got_rows:,} rows (expected {expected_rows:,}), {wrong} of {len(gen.expected):,} "
          f"changed ids wrong, every file applied: {drained}", flush=True)
    spark.stop()

    for b in batches:
        b["changed_bytes"] = changed_rows_bytes([landing / n for n in b["files"]]) if b["files"] else 0
    result = {"way": way, "pyspark": pyspark.__version__, "rows": args.rows, "changes": args.changes,
              "interval": args.interval, "minutes": args.minutes, "files_initial": files,
              "auto_compact": args.auto_compact, "build_s": round(build_s, 1), "table_bytes": table_bytes,
              "files_landed": count, "correct": correct, "rows_checked": got_rows, "wrong_ids": wrong,
              "load": [load_start, os.getloadavg()[0]],
              "batches": batches, "samples": samples}
    result["summary"] = summarize(result)
    out.write_text(json.dumps(result))
    shutil.rmtree(work, ignore_errors=True)


SOURCE_SCHEMA_COLUMNS = [c.split()[0] for c in SOURCE_SCHEMA.split(", ")]


# -- the report -------------------------------------------------------------------------------------------

def pct(values: list[float], p: float) -> float | None:
    if not values:
        return None
    values = sorted(values)
    return values[min(len(values) - 1, max(0, int(round(p / 100 * len(values) + 0.5)) - 1))]


def summarize(r: dict) -> dict:
    batches = [b for b in r["batches"] if b["files"]]
    times = [b["seconds"] for b in batches]
    latencies: list[list[float]] = []  # per batch, one per row
    for b in batches:
        latencies.append([(b["commit_ms"] - landed) / 1000 for landed in b["landed_ms"] for _ in range(r["changes"])])
    every, after_first = sum(latencies, []), sum(latencies[1:], [])
    plain = [b for b in batches if not b["compacted"]]
    written = [sum(b["bytes"].values()) for b in plain]
    ratios = [w / b["changed_bytes"] for w, b in zip(written, plain) if b["changed_bytes"]]
    samples = [s for s in r["samples"] if s[1] is not None]
    files = [s[1] for s in samples]
    first_compaction = next((i for i, b in enumerate(batches) if b["compacted"]), len(batches))
    steps: dict[str, list[float]] = {}
    for b in batches[1:]:  # where a batch's time goes, once warm
        for k, v in b["steps"].items():
            steps.setdefault(k, []).append(v)
    return {
        "batches": len(batches), "first_batch_s": times[0] if times else None,
        "batch_p50_s": pct(times, 50), "batch_p99_s": pct(times, 99), "batch_max_s": max(times, default=None),
        "batch_p50_after_first_s": pct(times[1:], 50), "batch_p99_after_first_s": pct(times[1:], 99),
        "latency_p50_s": pct(every, 50), "latency_p99_s": pct(every, 99), "latency_max_s": max(every, default=None),
        "latency_p50_after_first_s": pct(after_first, 50), "latency_p99_after_first_s": pct(after_first, 99),
        "bytes_per_batch_median": pct(written, 50),
        "changed_bytes_median": pct([b["changed_bytes"] for b in batches], 50),
        "bytes_ratio_median": pct(ratios, 50), "bytes_ratio_max": max(ratios, default=None),
        "bytes_by_kind_median": {k: pct([b["bytes"][k] for b in plain], 50) for k in ("data", "dv", "log", "state")},
        "compactions": len(batches) - len(plain),
        "files_first": files[0] if files else None, "files_max": max(files, default=None),
        "files_last": files[-1] if files else None,
        "dv_files_max": max((s[2] for s in samples), default=None),
        "dv_files_last": samples[-1][2] if samples else None,
        # each batch adds files (its new rows) and a compaction takes them back: the live files are bounded
        # when a compaction ran and the run ends below its peak, or when they did not grow at all (a run
        # too short to reach auto-compaction's 50 small files shows growth: not shown bounded)
        "files_bounded": (None if not files else
                          files[-1] <= files[0] or (len(plain) < len(batches) and files[-1] < max(files))),
        "files_added_per_batch": (round((max(files) - files[0]) / max(1, first_compaction), 2) if files else None),
        "state_files_max": max((s[3] for s in samples if s[3] is not None), default=None),
        "state_files_last": samples[-1][3] if samples else None,
        "steps_median_s": {k: round(pct(v, 50), 3) for k, v in sorted(steps.items(), key=lambda kv: -pct(kv[1], 50))},
    }


def fmt(v, spec=".2f") -> str:
    return "-" if v is None else format(v, spec)


def report(results: dict[str, dict]) -> None:
    def both(a: str, b: str, spec: str = ".2f", scale: float = 1, unit: str = ""):
        def get(r):
            x, y = r["summary"][a], r["summary"][b]
            return f"{fmt(x and x / scale, spec)}{unit} / {fmt(y and y / scale, spec)}{unit}"
        return get

    rows = [("pyspark", lambda r: r["pyspark"]),
            ("rows checked, correct", lambda r: f"{r['rows_checked']:,}, {r['correct']}"),
            ("batches (files landed)", lambda r: f"{r['summary']['batches']} ({r['files_landed']})"),
            ("first batch s", lambda r: fmt(r["summary"]["first_batch_s"])),
            ("batch p50 / p99 s", both("batch_p50_s", "batch_p99_s")),
            ("batch p50 / p99 s, after first", both("batch_p50_after_first_s", "batch_p99_after_first_s")),
            ("latency p50 / p99 s", both("latency_p50_s", "latency_p99_s")),
            ("latency p50 / p99 s, after first", both("latency_p50_after_first_s", "latency_p99_after_first_s")),
            ("written / changed kB (median)", both("bytes_per_batch_median", "changed_bytes_median", ".0f", 1e3)),
            ("bytes ratio median / max", both("bytes_ratio_median", "bytes_ratio_max", ".1f", 1, "x")),
            ("compactions", lambda r: str(r["summary"]["compactions"])),
            ("files first / max / last", lambda r: "{files_first}/{files_max}/{files_last}".format(**r["summary"])),
            ("files with a DV max / last", lambda r: "{dv_files_max}/{dv_files_last}".format(**r["summary"])),
            ("files added per batch", lambda r: fmt(r["summary"]["files_added_per_batch"])),
            ("files bounded", lambda r: str(r["summary"]["files_bounded"])),
            ("state table files max / last", lambda r: "{state_files_max}/{state_files_last}".format(**r["summary"])),
            ("load average (start, end)", lambda r: f"{r['load'][0]:.1f}, {r['load'][1]:.1f}")]
    print()
    print(f"{'':34s}" + "".join(f"{w:>18s}" for w in results))
    for label, get in rows:
        print(f"{label:34s}" + "".join(f"{get(r):>18s}" for r in results.values()))
    if "ours" in results and "delta-spark" in results:
        a, b = results["ours"]["summary"], results["delta-spark"]["summary"]
        for key in ("batch_p50_s", "batch_p99_s", "batch_p50_after_first_s", "batch_p99_after_first_s"):
            if a[key] and b[key]:
                print(f"ours / delta-spark {key[:-2]}: {a[key] / b[key]:.2f}x")
    if "ours" in results:
        print("\nours, median seconds per batch (after the first):")
        for k, v in results["ours"]["summary"]["steps_median_s"].items():
            print(f"  {k:50s} {v:6.3f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--changes", type=int, default=1000, help="changes per landed file")
    ap.add_argument("--interval", type=float, default=10, help="seconds between landed files")
    ap.add_argument("--minutes", type=float, default=10)
    ap.add_argument("--files", type=int, help="files of the initial table (default: one per 5M rows, ~100 MB "
                                              "each: above auto-compaction's small-file size)")
    ap.add_argument("--only", choices=WAYS)
    ap.add_argument("--sample-seconds", type=float, default=15, help="how often live files are counted")
    ap.add_argument("--no-auto-compact", dest="auto_compact", action="store_false",
                    help="leave delta.autoOptimize.autoCompact off on both tables")
    ap.add_argument("--ours-python", default=sys.executable, help="the interpreter that runs ours")
    ap.add_argument("--json", help="write both ways' results here")
    ap.add_argument("--way", choices=WAYS, help=argparse.SUPPRESS)   # in a way's own process
    ap.add_argument("--out", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.way:
        run_way(args, args.way, Path(args.out))
        return
    passed = [a for a in sys.argv[1:]]
    results: dict[str, dict] = {}
    scratch = Path(tempfile.mkdtemp(prefix="deltalog-cdc-bench-"))
    try:
        for way in ([args.only] if args.only else WAYS):
            if way == "ours":
                python = args.ours_python
            else:
                import pyspark

                if pyspark.__version__.startswith("4.2."):
                    python = sys.executable
                else:
                    from tests.integration.test_delta_spark import environment

                    python = str(environment())
            out = scratch / f"{way}.json"
            env = {k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK_", "SPARK_HOME"))}
            run = subprocess.run([python, __file__, *passed, "--way", way, "--out", str(out)], env=env, cwd=ROOT)
            if run.returncode != 0 or not out.exists():
                raise SystemExit(f"{way} failed (exit {run.returncode})")
            results[way] = json.loads(out.read_text())
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    report(results)
    if args.json:
        Path(args.json).write_text(json.dumps({"measured": time.strftime("%Y-%m-%d"), **results}))


if __name__ == "__main__":
    main()
