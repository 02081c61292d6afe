"""A write sets the session settings Spark's Parquet writer reads (the timestamp type, variant
shredding) only while it runs, and a host that shares the session finds its own settings as it left
them, with writes on several threads at once."""
from __future__ import annotations

import datetime as dt
import glob
import os
from concurrent.futures import ThreadPoolExecutor

import pyarrow.parquet as pq
import pytest

from deltalog.spark.operations import write_dataframe

pytestmark = pytest.mark.spark

KEYS = ("spark.sql.parquet.outputTimestampType", "spark.sql.variant.writeShredding.enabled")


def _timestamp_physical_types(folder: str) -> set:
    files = [f for f in glob.glob(os.path.join(folder, "**", "*.parquet"), recursive=True) if "_delta_log" not in f]
    assert files
    return {pq.ParquetFile(f).schema.column(1).physical_type for f in files}


def test_the_host_s_session_settings_are_kept(spark, tmp_path):
    kept = {key: spark.conf.get(key, None) for key in KEYS}
    try:
        spark.conf.set(KEYS[0], "INT96")  # the host's own choice for its own writes
        spark.conf.unset(KEYS[1])
        df = spark.createDataFrame([(i, dt.datetime(2026, 1, 1, i)) for i in range(4)], "id int, ts timestamp")
        tables = [str(tmp_path / f"t{i}") for i in range(4)]
        with ThreadPoolExecutor(4) as pool:  # writes at once, overlapping
            list(pool.map(lambda t: [write_dataframe(df, t, mode="append") for _ in range(3)], tables))
        variant = spark.sql("select 1 as id, parse_json('{\"a\": 1}') as v")
        write_dataframe(variant, str(tmp_path / "variant"))
        assert spark.conf.get(KEYS[0]) == "INT96"
        assert spark.conf.get(KEYS[1], None) in (None, "true")  # Spark's default shreds; ours is unset
        for table in tables:  # each of deltalog's writes had real timestamps all the same
            assert _timestamp_physical_types(table) == {"INT64"}
    finally:
        for key, value in kept.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)
