"""What the Iceberg metadata of `table_format: iceberg` costs, on a table of many files.

    python bench/iceberg_bench.py                 # a table of 100,000 files
    python bench/iceberg_bench.py --files 20000   # smaller

The table: a real Spark write of 10 files (8 columns, column mapping), then one commit adding `--files`
more with the same wide stats (file names that exist only in the log: conversion reads the log, never
the data files). Then Iceberg is turned on by a Spark write of 10 more files: its conversion is the
first one, of the whole table. Then `--appends` Spark writes of 10 files each, whose conversions are
incremental. Reported, in one run:

  first conversion        the whole table's metadata, beside pyiceberg's own fast_append of the same
                          data files into a SQLite catalog's table (the floor for writing that metadata)
  incremental conversion  per appending commit: the conversion's time as a share of the commit's own
                          (the target: at most 10 %)
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

ICEBERG = {"delta.columnMapping.mode": "name", "delta.enableIcebergCompatV2": "true",
           "delta.universalFormat.enabledFormats": "iceberg"}


def _rows(spark, start: int, n: int):
    return spark.sql(f"""select id, concat('customer ', id % 977) as customer, cast(id % 10000 as int) as qty,
                         cast(id * 0.37 as decimal(18, 2)) as amount, date_add(date'2026-01-01', cast(id % 300 as int)) as day,
                         timestamp_micros(1767225600000000 + id * 1000003) as at, id % 2 = 0 as paid,
                         concat('note ', id) as note
                         from range({start}, {start + n}, 1, 10)""")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", type=int, default=100_000)
    parser.add_argument("--appends", type=int, default=5)
    args = parser.parse_args()

    import deltalog.iceberg as iceberg
    from dbt.adapters.deltalog.runtime.session import get_spark
    from deltalog import Snapshot
    from deltalog.actions import AddFile
    from deltalog.spark.operations import write_dataframe
    from deltalog.storage import log_store_for
    from deltalog.table import DeltaTable

    spark = get_spark("local[2]", {"spark.sql.shuffle.partitions": "2"})
    conversions: list[float] = []
    real_convert = iceberg.convert

    def timed_convert(snapshot, store):
        started = time.perf_counter()
        try:
            return real_convert(snapshot, store)
        finally:
            conversions.append(time.perf_counter() - started)

    iceberg.convert = timed_convert
    with tempfile.TemporaryDirectory() as tmp:
        path = f"{tmp}/wide"
        write_dataframe(_rows(spark, 0, 10_000), path, configuration={"delta.columnMapping.mode": "name"})
        sample = Snapshot.load(path).add_files()
        txn = DeltaTable(path).transaction()
        adds = []
        for i in range(args.files):
            model = sample[i % len(sample)]
            adds.append(AddFile(path=f"synthetic/part-{i:07d}.parquet", partition_values={}, size=model.size,
                                modification_time=model.modification_time, data_change=True, stats=model.stats))
        txn.add_actions(adds)
        started = time.perf_counter()
        txn.commit(operation="WRITE")
        print(f"table: {args.files + len(sample)} files in the log ({time.perf_counter() - started:.1f} s to commit them)")

        started = time.perf_counter()
        write_dataframe(_rows(spark, 10_000, 10_000), path, configuration=ICEBERG)
        first_total = time.perf_counter() - started
        first = conversions[-1]
        table = iceberg.latest_metadata(path, log_store_for(path))[1]
        floor = _pyiceberg_fast_append(path, tmp)
        print(f"first conversion: {first:.2f} s (the commit with it {first_total:.2f} s); pyiceberg's fast_append "
              f"of the same {int(table.snapshots[-1].summary['total-data-files'])} files: {floor:.2f} s "
              f"-> {first / floor:.2f}x pyiceberg")

        ratios = []
        for n in range(args.appends):
            conversions.clear()
            started = time.perf_counter()
            write_dataframe(_rows(spark, 20_000 + n * 10_000, 10_000), path)
            total = time.perf_counter() - started
            convert = conversions[-1]
            own = total - convert
            ratios.append(convert / own)
            print(f"append {n + 1}: commit {own:.2f} s, its conversion {convert:.3f} s ({100 * convert / own:.1f} %)")
        print(f"incremental conversion: median {100 * statistics.median(ratios):.1f} % of the commit's own time "
              f"(target <= 10 %), on a table of {args.files + 10 * (args.appends + 2)} files")


def _pyiceberg_fast_append(path: str, tmp: str) -> float:
    """pyiceberg's own append of the table's data files (as DataFiles: add_files would read each file's
    footer, and these exist only in the log) into a new table of a SQLite catalog; its seconds."""
    from pyiceberg.catalog.sql import SqlCatalog

    from deltalog.iceberg import latest_metadata
    from deltalog.storage import log_store_for

    store = log_store_for(path)
    _, metadata = latest_metadata(path, store)
    from pyiceberg.io.pyarrow import PyArrowFileIO

    io = PyArrowFileIO()
    files = [entry.data_file for manifest in metadata.snapshots[-1].manifests(io)
             for entry in manifest.fetch_manifest_entry(io, discard_deleted=True)]
    catalog = SqlCatalog("bench", uri=f"sqlite:///{tmp}/catalog.db", warehouse=f"file://{tmp}/ice")
    catalog.create_namespace("bench")
    table = catalog.create_table(("bench", "wide"), schema=metadata.schema(), partition_spec=metadata.spec())
    started = time.perf_counter()
    with table.transaction() as tx:
        with tx.update_snapshot().fast_append() as append:
            for data_file in files:
                append.append_data_file(data_file)
    return time.perf_counter() - started


if __name__ == "__main__":
    main()
