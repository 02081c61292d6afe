"""Classes of dbt-spark's functional suite that run a dbt adapter suite our own tests/functional runs too,
with the same settings (dbt-spark's subclasses add nothing, or only `file_format: delta` and the `merge`
strategy, which are this adapter's only format and its default strategy). CI leaves them out of the
dbt-spark run (~130 s of its ~340 s of tests); `DELTALOG_FULL_SUITE=1` runs them as well."""

_F = "tests/functional/adapter/"

SAME_AS_OURS: dict[str, str] = {
    _F + "test_basic.py": "dbt's basic adapter suites, run by our tests/functional/test_basic.py",
    _F + "incremental/test_incremental_unique_id.py::TestUniqueKeySpark":
        "dbt's BaseIncrementalUniqueKey with merge, run by our tests/functional/test_incremental_suites.py",
    _F + "incremental/test_incremental_merge_exclude_columns.py::TestMergeExcludeColumns":
        "dbt's BaseMergeExcludeColumns with file_format delta, run by our tests/functional/test_incremental_suites.py",
    _F + "dbt_show/test_dbt_show.py": "dbt's show suites, run by our tests/functional/test_constraints_show.py",
}
