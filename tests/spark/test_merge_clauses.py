"""MERGE's not-matched-by-source clauses (delete, or update with a condition) next to the matched and
not-matched clauses, checked against delta-rs running the same MERGE on a copy of the same table."""
import shutil

import pyarrow as pa
import pytest

from deltalog.spark.operations import merge, write_dataframe

deltalake = pytest.importorskip("deltalake")
pytestmark = pytest.mark.spark

TARGET = [(1, "a", 10), (2, "b", 20), (3, "c", 30), (4, "d", 40), (5, "e", 50)]
SOURCE = [(2, "B", 21), (4, "D", 41), (6, "F", 60)]


def rows(uri):
    return sorted(deltalake.DeltaTable(uri).to_pyarrow_table().to_pylist(), key=lambda r: r["id"])


def setup(spark, tmp_path):
    ours, theirs = str(tmp_path / "ours"), str(tmp_path / "theirs")
    # two files, so unmatched rows sit both in touched and in untouched files
    write_dataframe(spark.createDataFrame(TARGET[:3], "id long, name string, qty long"), ours, mode="error")
    write_dataframe(spark.createDataFrame(TARGET[3:], "id long, name string, qty long"), ours, mode="append")
    shutil.copytree(ours, theirs)
    return ours, theirs, spark.createDataFrame(SOURCE, "id long, name string, qty long")


SOURCE_ARROW = pa.table({"id": pa.array([r[0] for r in SOURCE], pa.int64()), "name": [r[1] for r in SOURCE],
                         "qty": pa.array([r[2] for r in SOURCE], pa.int64())})


@pytest.mark.parametrize("clause", ["delete", "delete_when", "update_when"])
def test_not_matched_by_source(spark, tmp_path, clause):
    ours, theirs, source = setup(spark, tmp_path)
    kwargs = {}
    m = deltalake.DeltaTable(theirs).merge(SOURCE_ARROW, "s.id = t.id", source_alias="s", target_alias="t")
    m = m.when_matched_update_all().when_not_matched_insert_all()
    if clause == "delete":
        kwargs = {"when_not_matched_by_source_delete": True}
        m = m.when_not_matched_by_source_delete()
    elif clause == "delete_when":
        kwargs = {"when_not_matched_by_source_delete": True, "when_not_matched_by_source_condition": "t.qty > 20"}
        m = m.when_not_matched_by_source_delete(predicate="t.qty > 20")
    else:
        kwargs = {"when_not_matched_by_source_update": {"qty": "t.qty * -1", "name": "concat(t.name, '-gone')"},
                  "when_not_matched_by_source_condition": "t.id <> 1"}
        m = m.when_not_matched_by_source_update(updates={"qty": "t.qty * -1", "name": "concat(t.name, '-gone')"},
                                                predicate="t.id <> 1")
    m.execute()
    version = merge(spark, ours, source, on="s.id = t.id", source_alias="s", target_alias="t",
                    when_matched_update="*", when_not_matched_insert="*", **kwargs)
    assert version == 2
    assert rows(ours) == rows(theirs)
    metrics = deltalake.DeltaTable(ours).history(1)[0]["operationMetrics"]
    expected_rows = {"delete": 3, "delete_when": 2, "update_when": 2}[clause]
    key = "numTargetRowsNotMatchedBySourceDeleted" if clause.startswith("delete") else \
        "numTargetRowsNotMatchedBySourceUpdated"
    assert int(metrics[key]) == expected_rows


def test_an_empty_source_still_deletes_every_unmatched_row(spark, tmp_path):
    ours, _, _ = setup(spark, tmp_path)
    empty = spark.createDataFrame([], "id long, name string, qty long")
    assert merge(spark, ours, empty, on="s.id = t.id", source_alias="s", target_alias="t",
                 when_not_matched_by_source_delete=True, when_not_matched_by_source_condition="t.qty >= 40") == 2
    assert [r["id"] for r in rows(ours)] == [1, 2, 3]
