"""INSERT and UPDATE statements (hooks, run-operation, custom incremental strategies: dbt/adapters/deltalog/
dml.py) on a table with declared columns: an INSERT that leaves out an identity, generated or default
column has it filled in as a model's write would; an UPDATE keeps identity values and computes generated
columns again from the new values."""
import pytest

from dbt.adapters.deltalog.dml import TargetRows, parse_dml
from deltalog import identity
from deltalog.column_defaults import DEFAULT_KEY
from deltalog.errors import SchemaMismatchError
from deltalog.generated_columns import GENERATION_EXPRESSION_KEY
from deltalog.snapshot import Snapshot
from deltalog.spark.operations import write_dataframe
from deltalog.spark.reader import snapshot_dataframe

pytestmark = pytest.mark.spark

VIEW = "`s.t`"


def _schema(always=True):
    return {"type": "struct", "fields": [
        {"name": "id", "type": "long", "nullable": True, "metadata": {
            identity.START: 1, identity.STEP: 1, identity.ALLOW_EXPLICIT_INSERT: not always}},
        {"name": "amount", "type": "long", "nullable": True, "metadata": {}},
        {"name": "doubled", "type": "long", "nullable": True, "metadata": {GENERATION_EXPRESSION_KEY: "amount * 2"}},
        {"name": "status", "type": "string", "nullable": True, "metadata": {DEFAULT_KEY: "'new'"}}]}


def _rows(spark, uri):
    return sorted(tuple(r) for r in snapshot_dataframe(spark, Snapshot.load(uri)).collect())


def _script(spark, uri, *statements):
    """What run_custom_strategy does: the statements' rows, committed at once."""
    snap = Snapshot.load(uri)
    rows = TargetRows(spark, VIEW, snapshot_dataframe(spark, snap), snap.schema_json)
    try:
        for sql in statements:
            rows.apply(parse_dml(sql))
        if rows.rewrites:
            return write_dataframe(rows.rows, uri, mode="overwrite", own_rows=True, read_version=snap.version)
        return write_dataframe(rows.inserted, uri, mode="append", read_version=snap.version)
    finally:
        rows.close()


def test_a_script_fills_defaults_and_generated_columns_and_an_update_recomputes_them(spark, tmp_path):
    uri = str(tmp_path / "t")
    write_dataframe(spark.createDataFrame([(10,), (20,)], "amount bigint").coalesce(1), uri, mode="error",
                    table_schema=_schema())
    assert _rows(spark, uri) == [(1, 10, 20, "new"), (2, 20, 40, "new")]
    _script(spark, uri, f"update {VIEW} set amount = amount + 1 where id = 2",
            f"update {VIEW} set status = 'seen' where amount = 10")
    assert _rows(spark, uri) == [(1, 10, 20, "seen"), (2, 21, 42, "new")]  # ids kept, doubled recomputed


def test_a_script_may_not_number_identity_rows_and_says_what_to_do(spark, tmp_path):
    uri = str(tmp_path / "t")
    write_dataframe(spark.createDataFrame([(10,)], "amount bigint"), uri, mode="error", table_schema=_schema())
    before = Snapshot.load(uri).version
    with pytest.raises(ValueError, match="column 'id' is an identity column.*as a statement of its own"):
        _script(spark, uri, f"delete from {VIEW} where amount > 100", f"insert into {VIEW} (amount) values (5)")
    assert Snapshot.load(uri).version == before


def test_by_default_identity_a_script_inserts_given_ids_with_defaults_and_generated(spark, tmp_path):
    uri = str(tmp_path / "t")
    # rows made in Python (no size estimate): counted as few, numbered in one task, so from 1
    write_dataframe(spark.createDataFrame([(10,)], "amount bigint").repartition(2), uri, mode="error",
                    table_schema=_schema(always=False))
    _script(spark, uri, f"insert into {VIEW} (id, amount) values (50, 7)")
    assert _rows(spark, uri) == [(1, 10, 20, "new"), (50, 7, 14, "new")]


def test_an_update_that_sets_an_identity_column_is_refused_by_name_and_commits_nothing(spark, tmp_path):
    uri = str(tmp_path / "t")
    write_dataframe(spark.createDataFrame([(10,)], "amount bigint"), uri, mode="error", table_schema=_schema(False))
    before = Snapshot.load(uri).version
    with pytest.raises(SchemaMismatchError, match="column 'id' is an identity column.*may not set it"):
        _script(spark, uri, f"update {VIEW} set id = 7 where amount = 10")
    assert Snapshot.load(uri).version == before and _rows(spark, uri) == [(1, 10, 20, "new")]
