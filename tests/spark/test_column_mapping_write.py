"""Column mapping write (`delta.columnMapping.mode` name and id): files hold physical names (and field
ids), partition values and stats use physical names, and delta-rs reads every version as we do. A
column dropped and added again reads NULL for old rows, with or without mapping switched on first."""
from __future__ import annotations

import json

import deltalake
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from deltalog.column_mapping import MODE, physical_name
from deltalog.scan import read_table
from deltalog.expressions import files_matching
from deltalog.snapshot import Snapshot
from deltalog.spark import operations as ops
from deltalog.spark.reader import snapshot_dataframe
from tests.engine.test_conformance import delta_rs_rows

pytestmark = pytest.mark.spark


def _rows(table) -> list[tuple]:
    return sorted(tuple(r.values()) for r in table.to_pylist())


def _spark_rows(spark, uri) -> list[tuple]:
    return sorted(tuple(r) for r in snapshot_dataframe(spark, Snapshot.load(uri)).collect())


def _delta_rs(uri, version=None) -> list[tuple]:
    return _rows(delta_rs_rows(deltalake.DeltaTable(uri, version=version)))


@pytest.mark.parametrize("mode", ["name", "id"])
@pytest.mark.parametrize("method", ["native", "arrow"])
def test_mapped_table_round_trip(spark, tmp_path, mode, method):
    uri = str(tmp_path / "t")
    df = spark.sql("select id, cast(id % 3 as string) as part, named_struct('a', id, 'b', 'x') as s "
                   "from range(30)")
    ops.write_dataframe(df, uri, partition_by=["part"], configuration={MODE: mode}, method=method)
    snap = Snapshot.load(uri)
    assert "columnMapping" in snap.protocol.reader_features and "columnMapping" in snap.protocol.writer_features
    fields = {f["name"]: f for f in snap.schema_json["fields"]}
    physical = {n: physical_name(f) for n, f in fields.items()}
    assert all(p.startswith("col-") for p in physical.values())
    assert int(snap.configuration["delta.columnMapping.maxColumnId"]) == 5  # id, part, s, s.a, s.b

    # files: physical names at every depth; partition values and stats keyed by physical names
    add = snap.add_files()[0]
    assert set(add.partition_values) == {physical["part"]}
    stats = json.loads(add.stats)
    assert physical["id"] in stats["minValues"] and "id" not in stats["minValues"]
    file_schema = pq.read_schema(tmp_path / "t" / add.path)
    assert file_schema.names == [physical["id"], physical["s"]]
    if mode == "id":
        assert int(file_schema.field(physical["id"]).metadata[b"PARQUET:field_id"]) == fields["id"]["metadata"][
            "delta.columnMapping.id"]

    expected = sorted((i, str(i % 3), (i, "x")) for i in range(30))
    ours_arrow = sorted((r["id"], r["part"], (r["s"]["a"], r["s"]["b"])) for r in read_table(snap).to_pylist())
    assert ours_arrow == expected
    theirs = delta_rs_rows(deltalake.DeltaTable(uri)).to_pylist()
    assert sorted((r["id"], r["part"], (r["s"]["a"], r["s"]["b"])) for r in theirs) == expected
    assert files_matching(snap, "part = '1'").num_rows < snap.num_files
    assert files_matching(snap, "id = 1000").num_rows == 0

    # append, merge and delete keep the mapping; delta-rs agrees at every version
    ops.write_dataframe(spark.sql("select 100 as id, '1' as part, named_struct('a', 100L, 'b', 'y') as s"),
                        uri, method=method)
    src = spark.sql("select 5 as id, '2' as part, named_struct('a', 55L, 'b', 'm') as s")
    ops.merge(spark, uri, src, on="t.id = s.id", target_alias="t", source_alias="s",
              when_matched_update="*", when_not_matched_insert="*")
    ops.delete(spark, uri, "id < 3")
    snap = Snapshot.load(uri)
    assert {physical_name(f) for f in snap.schema_json["fields"]} == set(physical.values())
    rows = _spark_rows(spark, uri)
    assert len(rows) == 28 and (5, "2", (55, "m")) in rows and (100, "1", (100, "y")) in rows
    for v in range(snap.version + 1):
        assert len(_delta_rs(uri, v)) == len(read_table(Snapshot.load(uri, version=v)).to_pylist())


@pytest.mark.parametrize("method", ["native", "arrow"])
def test_listed_stats_columns_are_logical_names(spark, tmp_path, method):
    """delta.dataSkippingStatsColumns names logical columns; the files' stats then hold exactly those,
    under their physical names, and skipping and delta-rs use them."""
    uri = str(tmp_path / "t")
    df = spark.sql("select id as a, id * 2 as B, named_struct('x', id, 'y', 'k') as s from range(5)").coalesce(1)
    ops.write_dataframe(df, uri, method=method, configuration={
        MODE: "name", "delta.dataSkippingStatsColumns": "B, s.x"})
    snap = Snapshot.load(uri)
    fields = {f["name"]: f for f in snap.schema_json["fields"]}
    nested = {f["name"]: physical_name(f) for f in fields["s"]["type"]["fields"]}
    stats = json.loads(snap.add_files()[0].stats)
    assert stats["minValues"] == {physical_name(fields["B"]): 0, physical_name(fields["s"]): {nested["x"]: 0}}
    assert stats["maxValues"] == {physical_name(fields["B"]): 8, physical_name(fields["s"]): {nested["x"]: 4}}
    assert files_matching(snap, "B > 8").num_rows == 0 and files_matching(snap, "a > 8").num_rows == 1
    theirs = pa.table(deltalake.DeltaTable(uri).get_add_actions(flatten=True))
    assert theirs.column(f"max.{physical_name(fields['B'])}").to_pylist() == [8]
    assert not any(physical_name(fields["a"]) in c for c in theirs.column_names)


def _drop_and_readd(spark, uri, configuration=None):
    ops.write_dataframe(spark.sql("select id, id * 10 as v from range(4)"), uri, configuration=configuration)
    # the run that drops v (as dbt's sync_all_columns does: the new schema rides in the data commit)
    ops.write_dataframe(spark.sql("select 10 as id"), uri,
                        table_schema={"type": "struct", "fields": [
                            {"name": "id", "type": "long", "nullable": True, "metadata": {}}]})
    # a later run adds a column called v again
    ops.write_dataframe(spark.sql("select 20 as id, 7L as v"), uri,
                        table_schema={"type": "struct", "fields": [
                            {"name": "id", "type": "long", "nullable": True, "metadata": {}},
                            {"name": "v", "type": "long", "nullable": True, "metadata": {}}]})


@pytest.mark.parametrize("configuration", [None, {MODE: "name"}], ids=["unmapped", "mapped"])
def test_a_dropped_column_added_again_reads_null_for_old_rows(spark, tmp_path, configuration):
    uri = str(tmp_path / "t")
    _drop_and_readd(spark, uri, configuration)
    expected = [(0, None), (1, None), (2, None), (3, None), (10, None), (20, 7)]
    assert _spark_rows(spark, uri) == expected
    assert _rows(read_table(Snapshot.load(uri))) == expected
    assert _delta_rs(uri) == expected
    snap = Snapshot.load(uri)
    assert snap.configuration[MODE] == "name"
    assert snap.version == 2  # no extra commit: the drop's own commit switched mapping on
    if configuration is None:
        # the upgrade kept the existing column's name as its physical name: no file was rewritten
        assert physical_name(snap.schema_json["fields"][0]) == "id"
        assert physical_name(snap.schema_json["fields"][1]).startswith("col-")
        assert Snapshot.load(uri, version=1).configuration[MODE] == "name"
        assert _delta_rs(uri, 0) == [(0, 0), (1, 10), (2, 20), (3, 30)]  # time travel still reads v


def test_mapping_mode_cannot_change_on_an_existing_table(spark, tmp_path):
    from deltalog.errors import InvalidTableError

    uri = str(tmp_path / "t")
    ops.write_dataframe(spark.sql("select 1 as id"), uri, configuration={MODE: "name"})
    with pytest.raises(InvalidTableError, match="cannot change from 'name' to 'id'"):
        ops.write_dataframe(spark.sql("select 2 as id"), uri, configuration={MODE: "id"})
    with pytest.raises(InvalidTableError, match="not allowed. Allowed: none, name, id"):
        ops.write_dataframe(spark.sql("select 2 as id"), str(tmp_path / "u"), configuration={MODE: "bogus"})
    assert Snapshot.load(uri).version == 0


def test_delta_rs_written_mapped_table_is_appended_to(spark, tmp_path):
    """A table delta-rs created with column mapping (physical names its own way) takes our appends."""
    import pyarrow as pa

    uri = str(tmp_path / "t")
    try:
        deltalake.write_deltalake(uri, pa.table({"id": [1, 2], "name": ["a", "b"]}),
                                  configuration={MODE: "name"})
    except Exception as e:  # noqa: BLE001
        pytest.skip(f"this delta-rs cannot write column mapping: {e}")
    ops.write_dataframe(spark.sql("select 3L as id, 'c' as name"), uri)
    assert _delta_rs(uri) == [(1, "a"), (2, "b"), (3, "c")]
    assert _spark_rows(spark, uri) == [(1, "a"), (2, "b"), (3, "c")]


@pytest.mark.parametrize("method", ["native", "arrow"])
def test_names_other_engines_refuse_without_mapping_turn_it_on(spark, tmp_path, method):
    """Column names with ` ,;{}()\\n\\t=` (here `a b`, `x,y` and a nested `k=v`) make a name-mode
    column-mapped table (delta-spark and delta-kernel-rs refuse such names without mapping): files hold
    `col-…` physical names, delta-rs reads the logical names back; appends keep the mapping."""
    uri = str(tmp_path / "t")
    df = spark.sql("select id as `a b`, cast(id as string) as `x,y`, named_struct('k=v', id) as s from range(3)")
    assert ops.write_dataframe(df, uri, mode="overwrite", method=method) == 0
    snapshot = Snapshot.load(uri)
    assert snapshot.configuration[MODE] == "name"
    assert snapshot.protocol.min_reader_version >= 2
    fields = snapshot.schema_json["fields"]
    assert [f["name"] for f in fields] == ["a b", "x,y", "s"]
    assert all(physical_name(f).startswith("col-") for f in fields)
    files = [pq.read_schema(str(tmp_path / "t" / a.path)).names for a in snapshot.add_files()]
    assert all(n.startswith("col-") for names in files for n in names)
    ops.write_dataframe(df, uri, mode="append", method=method)
    got = _delta_rs(uri)
    assert [c for c in deltalake.DeltaTable(uri).schema().to_arrow().names] == ["a b", "x,y", "s"]
    assert got == sorted([(i, str(i), {"k=v": i}) for i in range(3)] * 2)


def test_names_needing_mapping_with_mapping_off_explicitly_are_refused(spark, tmp_path):
    from deltalog.errors import InvalidTableError

    uri = str(tmp_path / "t")
    df = spark.sql("select id as `a b` from range(3)")
    with pytest.raises(InvalidTableError, match=r"\['a b'\].*delta.columnMapping.mode=none"):
        ops.write_dataframe(df, uri, mode="overwrite", configuration={MODE: "none"})
    assert not (tmp_path / "t").exists() or not any((tmp_path / "t").iterdir())
