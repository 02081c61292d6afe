"""The Spark data path: DataFrames written as Delta data files, snapshots read with Spark's native
Parquet reader, and the operations (write/overwrite/replace_where, merge, delete) built on them.
The only part of the engine that imports pyspark."""

from deltalog.lazy_imports import load

load("spark")  # pyspark whole, before any module here imports from it (lazy_imports.py says why)
