"""Tests of dbt-spark's functional suite that cannot apply to this adapter, by node id prefix, with why.
Everything else in that suite runs against the deltalog profile and must pass."""

_F = "tests/functional/adapter/"

_PARQUET = ("it builds its models with file_format='parquet'; every table this adapter writes is a Delta "
            "table, and another file_format fails the model by name")
_DDL = ("it expects `create table (... not null check ...)` DDL; tables here are Delta commits, and "
        "not_null / check are enforced before the commit (our tests/functional/test_table_definition.py)")
_DRIVER_TYPES = ("it compares column types as the ODBC / Databricks SQL drivers name them; the same "
                 "checks with Spark's type names pass in dbt's BaseConstraintsColumnsEqual suites (ours)")
_GRANTS = "grants need a catalog with privileges; a warehouse folder has none, and a grants config fails the model by name"

CANNOT_APPLY: dict[str, str] = {
    _F + "test_constraints.py::TestSparkTableConstraintsColumnsEqualPyodbc": _DRIVER_TYPES,
    _F + "test_constraints.py::TestSparkViewConstraintsColumnsEqualPyodbc": _DRIVER_TYPES,
    _F + "test_constraints.py::TestSparkIncrementalConstraintsColumnsEqualPyodbc": _DRIVER_TYPES,
    _F + "test_constraints.py::TestSparkTableConstraintsColumnsEqualDatabricksHTTP": _DRIVER_TYPES,
    _F + "test_constraints.py::TestSparkViewConstraintsColumnsEqualDatabricksHTTP": _DRIVER_TYPES,
    _F + "test_constraints.py::TestSparkIncrementalConstraintsColumnsEqualDatabricksHTTP": _DRIVER_TYPES,
    _F + "test_constraints.py::TestSparkTableConstraintsDdlEnforcement": _DDL,
    _F + "test_constraints.py::TestSparkIncrementalConstraintsDdlEnforcement": _DDL,
    _F + "test_constraints.py::TestSparkConstraintQuotedColumn": _DDL,
    _F + "test_constraints.py::TestSparkTableConstraintsRollback": _DDL,
    _F + "test_constraints.py::TestSparkIncrementalConstraintsRollback": _DDL,
    _F + "test_constraints.py::TestSparkModelConstraintsRuntimeEnforcement": _DDL,
    _F + "incremental/test_incremental_on_schema_change.py::TestInsertOverwriteOnSchemaChange": _PARQUET,
    _F + "incremental_strategies/test_incremental_strategies.py::TestInsertOverwrite": _PARQUET,
    _F + "incremental_strategies/test_microbatch.py::TestMicrobatch": _PARQUET,
    _F + "incremental/test_incremental_on_schema_change.py::TestDeltaOnSchemaChange::test_run_incremental_sync_all_columns":
        "it asserts that sync_all_columns cannot drop a column from a Delta table (a Compilation Error); "
        "here the drop works, without rewriting files (column mapping is switched on in the same commit)",
    _F + "incremental_strategies/test_incremental_strategies.py::TestBadStrategies":
        "one of its three models expects a merge without file_format='delta' to fail; every table here is a "
        "Delta table, so that merge succeeds (the other two, a bad file_format and a bad strategy, fail here too)",
    _F + "persist_docs/test_persist_docs.py::TestPersistDocsQuotedColumnCaseSensitive":
        "it expects quoted `MyCol` to differ from `mycol`; Spark and Delta column names are case-insensitive",
    _F + "test_grants.py": _GRANTS,
    _F + "test_query_timeout.py":
        "query_timeout is dbt-spark's PyHive (Thrift) setting; this adapter runs Spark in process and does "
        "not take the key (a profile with it fails by name)",
}
