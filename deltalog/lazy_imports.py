"""Packages imported on first use, by one thread at a time.

A dbt command imports pyspark, pandas, sqlglot, duckdb... only when a node first needs them (a seed or a
small data test never starts Spark), so the first models of a run import them from several threads at
once. Python's import locks are per module: a thread entering a package through a submodule holds that
submodule's lock while it waits for the package, and the thread importing the package waits for the
submodule. Packages whose modules import each other (pyspark above all) then fail with "partially
initialized module" or "deadlock detected by _ModuleLock". So each such package is imported here, all of
a group under one lock, before any code imports from it; afterwards an import finds it whole in
sys.modules and takes no lock at all.

Every import of one of `GATED` follows a `load(group)` call in its function or at its module's top
(tests/engine/test_lazy_imports.py checks each); every module of `deltalog/spark/` loads the "spark" group
at its top. (A package's `__init__` alone is not enough: Python runs a submodule without waiting for its
package when another thread is still importing that package.)"""

from __future__ import annotations

import importlib
import sys
import threading
from typing import Dict, Tuple

# Each group: the modules, in the order they are imported. A submodule a caller imports by name is
# listed too: two threads entering one package by two of its submodules is the failure this avoids.
GROUPS: Dict[str, Tuple[str, ...]] = {
    "spark": (
        "py4j", "py4j.java_gateway", "py4j.protocol", "py4j.clientserver",
        "pyspark", "pyspark.sql", "pyspark.sql.functions", "pyspark.sql.types", "pyspark.sql.window",
        "pyspark.sql.datasource", "pyspark.sql.streaming", "pyspark.sql.streaming.datasource",
        "pyspark.errors", "pyspark.java_gateway", "pyspark.storagelevel",
    ),
    # the Spark Connect client (method: connect)
    "spark_connect": ("grpc", "google.protobuf", "pyspark.sql.connect.utils", "pyspark.sql.connect.session",
                      "pyspark.sql.connect.functions"),
    # what a Python model's code may import, and a pandas result's conversion
    "pandas": ("pandas", "pyarrow.pandas_compat"),
    "pandas_on_spark": ("pandas", "pyarrow.pandas_compat", "pyspark.pandas"),
    # pyspark.ml: z-ordering's range bucketing (about a second to import; only OPTIMIZE ZORDER needs it)
    "spark_ml": ("pyspark.ml", "pyspark.ml.feature"),
    "sqlglot": ("sqlglot", "sqlglot.errors", "sqlglot.tokens", "sqlglot.dialects", "sqlglot.dialects.spark",
                "sqlglot.dialects.duckdb", "sqlglot.schema", "sqlglot.optimizer",
                "sqlglot.optimizer.qualify", "sqlglot.optimizer.annotate_types",
                "sqlglot.optimizer.pushdown_projections", "sqlglot.optimizer.scope", "sqlglot.dialects.postgres",
                "sqlglot.dialects.dialect"),
    "duckdb": ("duckdb",),
    # Iceberg metadata of tables that ask for it (deltalog/iceberg/)
    "pyiceberg": ("pyiceberg", "pyiceberg.avro.file", "pyiceberg.conversions", "pyiceberg.io.pyarrow",
                  "pyiceberg.manifest", "pyiceberg.partitioning", "pyiceberg.schema", "pyiceberg.serializers",
                  "pyiceberg.table", "pyiceberg.table.metadata", "pyiceberg.table.name_mapping", "pyiceberg.table.refs",
                  "pyiceberg.table.snapshots", "pyiceberg.table.sorting", "pyiceberg.transforms",
                  "pyiceberg.typedef", "pyiceberg.types"),
    "obstore": ("obstore", "obstore.store", "obstore.exceptions"),
    "metastore": ("thrift", "thrift.transport", "thrift.transport.TSocket", "thrift.transport.TTransport",
                  "thrift.protocol", "thrift.protocol.TBinaryProtocol", "pymetastore",
                  "pymetastore.hive_metastore"),
}
# The packages loaded on first use, each with the group that loads it: a function importing one of them
# calls load(group) first. (pyarrow and numpy are imported with the plugin, before any thread.)
GATED = {"py4j": "spark", "pyspark": "spark", "pandas": "pandas", "grpc": "spark_connect",
         "google": "spark_connect", "sqlglot": "sqlglot", "duckdb": "duckdb", "obstore": "obstore",
         "thrift": "metastore", "pymetastore": "metastore", "pyiceberg": "pyiceberg"}

# One lock per family of groups whose packages import each other (pyspark.ml and pyspark's Connect client
# import pandas and pyspark): groups of one family never import at once. The families share no module
# that has modules of its own, so two of them may import side by side (a data test's DuckDB while a
# model's Spark starts).
_FAMILY = {"spark": "spark", "spark_connect": "spark", "spark_ml": "spark", "pandas": "spark",
           "pandas_on_spark": "spark", "sqlglot": "sqlglot", "duckdb": "duckdb", "obstore": "obstore",
           "pyiceberg": "spark",
           "metastore": "metastore"}
_locks = {family: threading.Lock() for family in set(_FAMILY.values())}
_loaded: set = set()


def load(group: str) -> None:
    """Import every module of `group` (GROUPS), once per process, never two threads of a family at once."""
    if group in _loaded:
        return
    with _locks[_FAMILY[group]]:
        if group in _loaded:
            return
        for name in GROUPS[group]:
            if _whole(name):
                continue
            try:
                importlib.import_module(name)
            except ImportError:
                # an optional dependency (duckdb, pymetastore...) that is not installed: the caller's own
                # import says so, with its own message
                if _required(group, name):
                    raise
        _loaded.add(group)


def _whole(name: str) -> bool:
    module = sys.modules.get(name)
    spec = getattr(module, "__spec__", None)
    return module is not None and not getattr(spec, "_initializing", False)


def _required(group: str, name: str) -> bool:
    return group == "spark" and name.split(".")[0] in ("pyspark", "py4j")
