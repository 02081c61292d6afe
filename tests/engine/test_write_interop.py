"""Interop both ways with delta-rs (`deltalake`), the reference reader and writer.

- Tables written by our `write_deltalake` (awkward partition values, overwrites, removes, checkpoints)
  read by delta-rs: same version, rows, schema, history — at the latest and at earlier versions.
- Tables written by delta-rs (checkpoints, merge, optimize compact / z-order, delete) read here: same
  version, live file set and rows, and history.
- Both writers on one table, alternately.
- Bad appends (schema mismatch) commit nothing and leave no data files behind.
"""
from __future__ import annotations

import datetime as dt
import os
from decimal import Decimal
from urllib.parse import unquote

import deltalake
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from deltalog import DeltaTable, Snapshot, write_deltalake
from deltalog.errors import InvalidTableError, SchemaMismatchError
from deltalog.paths import parse_partition_value
from deltalog.schema import partition_column_types

UTC = dt.timezone.utc
AWKWARD_STRINGS = ["plain", "with space", "a/b", "k=v", "100%", "ünïcødé 🦆", None, "q?#:*[]{}^'\"\\"]


# ---- reading, here and there -----------------------------------------------------------------------

def read_ours(uri: str, version: int | None = None) -> pa.Table:
    """Rows of our snapshot: each live file's Parquet plus its partition values from the log."""
    snap = Snapshot.load(uri, version=version)
    schema = snap.arrow_schema
    types = partition_column_types(snap.schema_json, snap.partition_columns)
    tables = []
    for add, path in zip(snap.add_files(), snap.file_uris()):
        t = pq.read_table(path)
        cols = {}
        for field in schema:
            if field.name in snap.partition_columns:
                value = parse_partition_value(add.partition_values.get(field.name), types[field.name])
                cols[field.name] = pa.array([value] * t.num_rows, field.type)
            elif field.name in t.column_names:
                cols[field.name] = t.column(field.name).cast(field.type)
            else:
                cols[field.name] = pa.nulls(t.num_rows, field.type)
        tables.append(pa.table(cols, schema=schema))
    return pa.concat_tables(tables) if tables else schema.empty_table()


def read_theirs(uri: str, version: int | None = None) -> pa.Table:
    t = deltalake.DeltaTable(uri, version=version) if version is not None else deltalake.DeltaTable(uri)
    return t.to_pyarrow_table()


def rows(table: pa.Table, key: str = "id") -> list[dict]:
    return table.sort_by(key).to_pylist()


def same_schema(ours: pa.Schema, theirs: pa.Schema) -> bool:
    return [(f.name, f.type) for f in ours] == [(f.name, f.type) for f in theirs]


def assert_same_table(uri: str, version: int | None = None, key: str = "id"):
    ours, theirs = read_ours(uri, version), read_theirs(uri, version)
    assert rows(ours, key) == rows(theirs.select(ours.column_names), key)
    return ours


def assert_same_history(uri: str):
    ours = DeltaTable(uri).history()
    theirs = deltalake.DeltaTable(uri).history()
    assert [(h["version"], h["operation"]) for h in ours] == [(h["version"], h["operation"]) for h in theirs]
    for o, t in zip(ours, theirs):
        assert o["timestamp"] == t["timestamp"]
        for key in ("operationParameters", "readVersion", "isolationLevel", "isBlindAppend", "userMetadata",
                    "engineInfo"):
            if key in t:
                assert o[key] == t[key], (o["version"], key)


def assert_same_files(uri: str):
    snap = Snapshot.load(uri)
    dt_ = deltalake.DeltaTable(uri)
    assert snap.version == dt_.version()
    # Log paths, URI-decoded once (delta-rs's file_uris() decodes differently from the protocol).
    theirs = pa.table(dt_.get_add_actions(flatten=True)).column("path").to_pylist()
    assert sorted(unquote(p) for p in snap.files.column("path").to_pylist()) == sorted(map(unquote, theirs))
    assert all(os.path.exists(p) for p in snap.file_uris())


# ---- our writer, read by delta-rs ------------------------------------------------------------------

def awkward_batch(start: int, n: int) -> pa.Table:
    ids = list(range(start, start + n))
    return pa.table({
        "id": pa.array(ids, pa.int64()),
        "s": pa.array([AWKWARD_STRINGS[i % len(AWKWARD_STRINGS)] for i in ids]),
        "d": pa.array([None if i % 5 == 0 else dt.date(2024, 1, 1 + i % 3) for i in ids], pa.date32()),
        "ts": pa.array([None if i % 7 == 0 else dt.datetime(2024, 3, 1, 12, 30, i % 60, 123456 * (i % 2),
                                                            tzinfo=UTC) for i in ids], pa.timestamp("us", "UTC")),
        "dec": pa.array([None if i % 4 == 0 else Decimal(f"{i % 3}.{i % 100:02d}") for i in ids],
                        pa.decimal128(10, 2)),
        "v": pa.array([i * 0.5 for i in ids], pa.float64()),
    })


@pytest.mark.parametrize("partition_by", [["s", "d"], ["ts", "dec"], []], ids=["s_d", "ts_dec", "none"])
def test_ours_read_by_delta_rs(tmp_path, partition_by):
    uri = str(tmp_path / "t")
    v = write_deltalake(uri, awkward_batch(0, 24), partition_by=partition_by,
                        configuration={"delta.checkpointInterval": "2"}, description="awkward")
    assert v == 0
    write_deltalake(uri, awkward_batch(100, 16), mode="append", user_metadata="second batch")
    if partition_by == ["s", "d"]:
        # Replace one awkward partition: only its rows change.
        write_deltalake(uri, awkward_batch(200, 16).filter(pc.equal(pc.field("s"), "a/b")),
                        mode="overwrite", predicate="s = 'a/b'")
    elif partition_by == ["ts", "dec"]:
        write_deltalake(uri, awkward_batch(300, 4).filter(pc.is_null(pc.field("dec"))),
                        mode="overwrite", predicate={"dec": None})
    else:
        write_deltalake(uri, awkward_batch(200, 8), mode="overwrite")
    # A delete through a transaction: remove every file holding id 101.
    t = DeltaTable(uri)
    txn = t.transaction()
    victims = [f for f in txn.snapshot.add_files() if _holds(uri, f.path, 101)]
    txn.read_files(victims)
    txn.add_actions([f.remove() for f in victims])
    txn.commit(operation="DELETE", parameters={"predicate": '["id = 101"]'})
    write_deltalake(uri, awkward_batch(400, 8), mode="append")

    latest = t.version()
    assert latest == 4 and deltalake.DeltaTable(uri).version() == latest
    assert "%020d.checkpoint.parquet" % 4 in os.listdir(os.path.join(uri, "_delta_log"))
    for version in range(latest + 1):
        assert_same_table(uri, version)
    ours = assert_same_table(uri)
    assert ours.num_rows > 0 and 101 not in ours.column("id").to_pylist()
    assert same_schema(Snapshot.load(uri).arrow_schema, pa.schema(deltalake.DeltaTable(uri).schema().to_arrow()))
    assert deltalake.DeltaTable(uri).metadata().partition_columns == partition_by
    assert_same_history(uri)
    assert_same_files(uri)


def _holds(uri: str, path: str, value: int) -> bool:
    return value in pq.read_table(os.path.join(uri, unquote(path)), columns=["id"]).column("id").to_pylist()


def test_awkward_values_round_trip_exactly(tmp_path):
    uri = str(tmp_path / "t")
    data = awkward_batch(0, 40)
    write_deltalake(uri, data, partition_by=["s", "d", "ts", "dec"])
    assert rows(read_theirs(uri)) == rows(data)
    assert rows(read_ours(uri)) == rows(data)
    # The folders are Hive-escaped, the log paths URI-encoded once more.
    folders = set(os.listdir(uri))
    assert {"s=a%2Fb", "s=k%3Dv", "s=100%25", "s=with space", "s=ünïcødé 🦆",
            "s=__HIVE_DEFAULT_PARTITION__"} <= folders
    paths = [f.path for f in Snapshot.load(uri).add_files()]
    assert any(p.startswith("s=a%252Fb/") for p in paths) and any(p.startswith("s=with%20space/") for p in paths)


def test_empty_string_partition_is_null(tmp_path):
    """Spark writes an empty partition string as null; so do we, and delta-rs agrees."""
    uri = str(tmp_path / "t")
    write_deltalake(uri, pa.table({"id": pa.array([1, 2], pa.int64()), "s": ["", "x"]}), partition_by=["s"])
    assert rows(read_theirs(uri)) == [{"id": 1, "s": None}, {"id": 2, "s": "x"}]
    assert rows(read_ours(uri)) == rows(read_theirs(uri))


def test_schema_merge_read_by_delta_rs(tmp_path):
    uri = str(tmp_path / "t")
    write_deltalake(uri, pa.table({"id": pa.array([1], pa.int64())}))
    write_deltalake(uri, pa.table({"id": pa.array([2], pa.int32()), "extra": ["x"]}), mode="append",
                    schema_mode="merge")
    assert rows(read_theirs(uri)) == [{"id": 1, "extra": None}, {"id": 2, "extra": "x"}]
    assert_same_table(uri)
    # Overwriting the schema replaces it (and keeps the table id).
    table_id = Snapshot.load(uri).metadata.id
    write_deltalake(uri, pa.table({"name": ["n"]}), mode="overwrite", schema_mode="overwrite")
    assert read_theirs(uri).to_pylist() == [{"name": "n"}]
    assert Snapshot.load(uri).metadata.id == table_id


def test_schema_mismatch_commits_nothing(tmp_path):
    uri = str(tmp_path / "t")
    write_deltalake(uri, pa.table({"id": pa.array([1], pa.int64()), "s": ["a"]}), partition_by=["s"])
    before = sorted(os.listdir(uri)), sorted(os.listdir(os.path.join(uri, "s=a")))
    bad = pa.table({"id": pa.array(["x"]), "s": ["b"], "surprise": [1.5]})
    with pytest.raises(SchemaMismatchError) as err:
        write_deltalake(uri, bad, mode="append")
    msg = str(err.value)
    assert uri in msg and "'id'" in msg and "'surprise'" in msg and "string" in msg and "long" in msg
    assert (sorted(os.listdir(uri)), sorted(os.listdir(os.path.join(uri, "s=a")))) == before
    assert DeltaTable(uri).version() == 0
    with pytest.raises(InvalidTableError, match="partitioned by"):
        write_deltalake(uri, pa.table({"id": pa.array([2], pa.int64()), "s": ["b"]}), mode="append",
                        partition_by=["id"])
    with pytest.raises(InvalidTableError, match="already exists"):
        write_deltalake(uri, pa.table({"id": pa.array([2], pa.int64()), "s": ["b"]}))
    with pytest.raises(InvalidTableError, match="not a partition column"):
        write_deltalake(uri, pa.table({"id": pa.array([2], pa.int64()), "s": ["b"]}), mode="overwrite",
                        predicate="id = 2")
    with pytest.raises(InvalidTableError, match="outside"):
        write_deltalake(uri, pa.table({"id": pa.array([2], pa.int64()), "s": ["b"]}), mode="overwrite",
                        predicate="s = 'a'")
    assert DeltaTable(uri).version() == 0 and sorted(os.listdir(uri)) == before[0]


def test_data_files_deleted_when_commit_fails(tmp_path, monkeypatch):
    """A failure after data files were written (here: the commit itself) removes them again."""
    uri = str(tmp_path / "t")
    write_deltalake(uri, pa.table({"id": pa.array([1], pa.int64())}))
    before = sorted(os.listdir(uri))
    from deltalog.transaction import Transaction

    def failing_commit(self, *a, **k):
        raise OSError("simulated crash before the commit landed")
    monkeypatch.setattr(Transaction, "commit", failing_commit)
    with pytest.raises(OSError):
        write_deltalake(uri, pa.table({"id": pa.array([2, 3], pa.int64())}), mode="append")
    assert sorted(os.listdir(uri)) == before


def test_reader_batches_and_file_splitting(tmp_path):
    uri = str(tmp_path / "t")
    data = pa.table({"id": pa.array(range(10), pa.int64()), "p": ["a", "b"] * 5})
    reader = pa.RecordBatchReader.from_batches(data.schema, data.to_batches(max_chunksize=3))
    write_deltalake(uri, reader, partition_by=["p"], max_rows_per_file=2)
    snap = Snapshot.load(uri)
    assert snap.num_files == 6  # 5 rows per partition, at most 2 per file
    assert sorted(f.num_records for f in snap.add_files()) == [1, 1, 2, 2, 2, 2]
    assert rows(read_theirs(uri)) == rows(data)


# ---- delta-rs's writer, read here ------------------------------------------------------------------

def test_delta_rs_tables_read_here(tmp_path):
    uri = str(tmp_path / "t")
    base = awkward_batch(0, 30)
    deltalake.write_deltalake(uri, base, partition_by=["s"], configuration={"delta.checkpointInterval": "100"})
    assert_same_table(uri)
    for k in range(1, 4):
        deltalake.write_deltalake(uri, awkward_batch(k * 100, 10), mode="append")
    dt_ = deltalake.DeltaTable(uri)
    dt_.create_checkpoint()
    assert any(n.endswith(".checkpoint.parquet") for n in os.listdir(os.path.join(uri, "_delta_log")))
    assert_same_table(uri)
    assert_same_files(uri)

    source = awkward_batch(0, 5).set_column(5, "v", pa.array([-1.0] * 5))
    source = pa.concat_tables([source, awkward_batch(1000, 3)])
    (dt_.merge(source, predicate="t.id = s.id", source_alias="s", target_alias="t")
        .when_matched_update_all().when_not_matched_insert_all().execute())
    assert_same_table(uri)
    assert_same_files(uri)
    deltalake.DeltaTable(uri).optimize.compact()
    assert_same_table(uri)
    assert_same_files(uri)
    deltalake.DeltaTable(uri).optimize.z_order(["id", "v"])
    assert_same_table(uri)
    deltalake.DeltaTable(uri).delete("id > 300 AND id < 320")
    deltalake.DeltaTable(uri).delete("s = 'a/b'")
    ours = assert_same_table(uri)
    assert_same_files(uri)
    assert_same_history(uri)
    assert "a/b" not in ours.column("s").to_pylist() and -1.0 in ours.column("v").to_pylist()
    latest = deltalake.DeltaTable(uri).version()
    for version in range(latest + 1):
        assert_same_table(uri, version)
    assert same_schema(Snapshot.load(uri).arrow_schema, pa.schema(deltalake.DeltaTable(uri).schema().to_arrow()))


def test_unpartitioned_delta_rs_with_checkpoints_read_here(tmp_path):
    uri = str(tmp_path / "t")
    deltalake.write_deltalake(uri, awkward_batch(0, 10), configuration={"delta.checkpointInterval": "2"})
    for k in range(1, 6):
        deltalake.write_deltalake(uri, awkward_batch(k * 100, 5), mode="append")
    deltalake.DeltaTable(uri).optimize.z_order(["v"])
    deltalake.DeltaTable(uri).delete("id < 3")
    assert_same_table(uri)
    assert_same_files(uri)
    assert_same_history(uri)


# ---- both writers on one table ---------------------------------------------------------------------

def test_alternating_writers(tmp_path):
    uri = str(tmp_path / "t")
    deltalake.write_deltalake(uri, awkward_batch(0, 10), partition_by=["s"],
                              configuration={"delta.checkpointInterval": "3"})
    write_deltalake(uri, awkward_batch(100, 10), mode="append")
    deltalake.write_deltalake(uri, awkward_batch(200, 10), mode="append")
    write_deltalake(uri, awkward_batch(300, 10).filter(pc.equal(pc.field("s"), "plain")), mode="overwrite",
                    predicate="s = 'plain'")        # version 3: our checkpoint
    deltalake.DeltaTable(uri).delete("id = 101")
    deltalake.DeltaTable(uri).optimize.compact()
    write_deltalake(uri, awkward_batch(400, 10), mode="append")
    assert "%020d.checkpoint.parquet" % 3 in os.listdir(os.path.join(uri, "_delta_log"))
    ours = assert_same_table(uri)
    assert_same_files(uri)
    assert_same_history(uri)
    ids = ours.column("id").to_pylist()
    assert 101 not in ids and 304 in ids and len(ids) == len(set(ids))


def test_delta_rs_removes_our_non_ascii_files(tmp_path):
    """delta-rs deletes rows from a file we wrote under a non-ASCII partition folder without leaving the
    old file live (its remove must match our add's path; see write._log_path)."""
    uri = str(tmp_path / "t")
    write_deltalake(uri, pa.table({"id": pa.array([1, 2], pa.int64()), "s": ["ünï 🦆", "ünï 🦆"]}),
                    partition_by=["s"])
    deltalake.DeltaTable(uri).delete("id = 1")
    assert read_theirs(uri).column("id").to_pylist() == [2]
    assert read_ours(uri).column("id").to_pylist() == [2]


def test_replace_where_forms(tmp_path):
    """Dict, SQL text (=, IN, IS NULL) and skipping expressions select the partitions replaced."""
    from deltalog.expressions import col
    uri = str(tmp_path / "t")
    data = pa.table({"id": pa.array(range(6), pa.int64()),
                     "d": pa.array([dt.date(2024, 1, 1 + i % 3) for i in range(5)] + [None], pa.date32()),
                     "n": pa.array([i % 2 for i in range(6)], pa.int32())})
    write_deltalake(uri, data, partition_by=["d", "n"])

    def ids():
        return sorted(read_theirs(uri).column("id").to_pylist())
    new = lambda i, d, n: pa.table({"id": pa.array([i], pa.int64()), "d": pa.array([d], pa.date32()),
                                    "n": pa.array([n], pa.int32())})
    write_deltalake(uri, new(10, dt.date(2024, 1, 1), 0), mode="overwrite", predicate={"d": dt.date(2024, 1, 1), "n": 0})
    assert ids() == [1, 2, 3, 4, 5, 10]                    # only id 0 was in (d=2024-01-01, n=0)
    write_deltalake(uri, new(11, None, 1), mode="overwrite", predicate="d IS NULL")
    assert ids() == [1, 2, 3, 4, 10, 11]
    write_deltalake(uri, new(12, dt.date(2024, 1, 2), 1), mode="overwrite",
                    predicate="d IN ('2024-01-02', '2024-01-03') AND n = 1")
    assert ids() == [2, 3, 4, 10, 11, 12]
    write_deltalake(uri, new(13, dt.date(2024, 1, 3), 0), mode="overwrite", predicate=col("d") >= "2024-01-02")
    assert ids() == [3, 10, 11, 13]
    assert_same_table(uri)
    with pytest.raises(InvalidTableError, match="not a partition column"):
        write_deltalake(uri, new(14, dt.date(2024, 1, 3), 0), mode="overwrite", predicate=col("id") == 1)
    hist = DeltaTable(uri).history()
    assert hist[0]["operationParameters"]["predicate"].startswith('["')


def test_replace_where_reads_sql_as_the_spark_writer_does(tmp_path):
    """The Arrow writer's replace-where reads SQL with sqlglot into skipping's expression model, as the
    Spark writer does: ranges, OR, BETWEEN and NOT IN replace exactly the partitions they name (a NULL
    partition only when the predicate says IS NULL); what it cannot read exactly is refused by name, and
    nothing is written."""
    uri = str(tmp_path / "t")
    data = pa.table({"id": pa.array(range(5), pa.int64()), "n": pa.array([1, 2, 3, 4, None], pa.int32()),
                     "s": ["a", "b", "c", "d", "e"]})
    write_deltalake(uri, data, partition_by=["n"])

    def ids():
        return sorted(read_theirs(uri).column("id").to_pylist())

    def new(i, n):
        return pa.table({"id": pa.array([i], pa.int64()), "n": pa.array([n], pa.int32()), "s": ["new"]})
    write_deltalake(uri, new(10, 2), mode="overwrite", predicate="n >= 2 AND n < 3 OR n = 1")
    assert ids() == [2, 3, 4, 10]                       # n=1 and n=2 replaced, n IS NULL kept
    write_deltalake(uri, new(11, 3), mode="overwrite", predicate="n NOT IN (1, 2, 4)")
    assert ids() == [3, 4, 10, 11]                      # NOT IN keeps the NULL partition, as SQL does
    write_deltalake(uri, new(12, 4), mode="overwrite", predicate="n BETWEEN 4 AND 9")
    assert ids() == [4, 10, 11, 12]
    before = DeltaTable(uri).version()
    for bad, says in [("n + 1 = 2", "cannot read"), ("s = 'a'", "not a partition column"),
                      ("n = 'x'", "does not fit"), ("n = 1.5", "does not fit"), ({"n": "x"}, "does not fit")]:
        with pytest.raises(InvalidTableError, match=says):
            write_deltalake(uri, new(13, 1), mode="overwrite", predicate=bad)
    with pytest.raises(InvalidTableError, match="outside"):
        write_deltalake(uri, new(13, 5), mode="overwrite", predicate="n = 1 OR n IS NULL")
    assert DeltaTable(uri).version() == before and ids() == [4, 10, 11, 12]


def test_append_to_delta_spark_table_matches_its_partition_encoding(tmp_path):
    """Appending the rows of a table Delta Lake on Spark wrote (12 partition column types, nulls, a
    literal 'null' string) produces exactly its partitionValues strings and its folders."""
    import shutil
    from tests.support.shared_data import GOLDEN, require
    uri = str(tmp_path / "t")
    shutil.copytree(require(GOLDEN / "data-reader-partition-values"), uri)
    original = read_theirs(uri)
    theirs = {f.path: f for f in Snapshot.load(uri).add_files()}
    v = write_deltalake(uri, original, mode="append")
    ours = [f for f in Snapshot.load(uri).add_files() if f.path not in theirs]
    assert len(ours) == len(theirs) == 3
    folder = lambda p: unquote(p).rsplit("/", 1)[0]
    assert sorted(map(lambda f: sorted(f.partition_values.items(), key=str), ours), key=str) == \
        sorted(map(lambda f: sorted(f.partition_values.items(), key=str), theirs.values()), key=str)
    assert {folder(f.path) for f in ours} == {folder(p) for p in theirs}
    both = read_theirs(uri)
    assert both.num_rows == 2 * original.num_rows and deltalake.DeltaTable(uri).version() == v
    assert_same_table(uri, key="value")


# ---- streaming, and the table created under a running write -------------------------------------

def _reader(batches, schema, during=None, fail_after=None):
    """A RecordBatchReader over a generator; `during()` runs after the first batch was consumed."""
    def gen():
        for i, b in enumerate(batches):
            if fail_after is not None and i == fail_after:
                raise RuntimeError("source failed mid-stream")
            yield b
            if i == 0 and during is not None:
                during()
    return pa.RecordBatchReader.from_batches(schema, gen())


def _data_files(uri):
    return sorted(os.path.relpath(os.path.join(d, f), uri) for d, _, fs in os.walk(uri)
                  for f in fs if f.endswith(".parquet") and "_delta_log" not in d)


def test_stream_failure_leaves_nothing(tmp_path):
    uri = str(tmp_path / "t")
    schema = pa.schema([("id", pa.int64()), ("p", pa.string())])
    write_deltalake(uri, schema.empty_table(), partition_by=["p"])
    batches = [pa.record_batch([pa.array([i], pa.int64()), pa.array([f"p{i}"])], schema=schema) for i in range(5)]
    with pytest.raises(RuntimeError, match="mid-stream"):
        write_deltalake(uri, _reader(batches, schema, fail_after=3), mode="append", max_rows_per_file=1)
    assert _data_files(uri) == [] and DeltaTable(uri).version() == 0
    # The same stream, complete: one file per partition, streamed batch by batch.
    write_deltalake(uri, _reader(batches, schema), mode="append")
    assert sorted(read_theirs(uri).column("id").to_pylist()) == list(range(5))
    assert len(_data_files(uri)) == 5


def test_many_small_batches_make_few_row_groups(tmp_path):
    uri = str(tmp_path / "t")
    schema = pa.schema([("id", pa.int64())])
    batches = [pa.record_batch([pa.array(range(i * 10, i * 10 + 10), pa.int64())], schema=schema)
               for i in range(500)]
    write_deltalake(uri, _reader(batches, schema))
    [path] = Snapshot.load(uri).file_uris()
    assert pq.ParquetFile(path).metadata.num_row_groups == 1
    assert Snapshot.load(uri).add_files()[0].num_records == 5000


@pytest.mark.parametrize("mode", ["append", "overwrite", "error", "ignore"])
def test_table_created_while_writing(tmp_path, mode):
    """Another writer creates the table after this write started (it saw no table): the prepared
    files are committed into that table when they fit it, else nothing is committed."""
    uri = str(tmp_path / "t")
    schema = pa.schema([("id", pa.int64()), ("p", pa.string())])
    first = pa.table({"id": pa.array([100], pa.int64()), "p": ["x"]})
    batches = [pa.record_batch([pa.array([i], pa.int64()), pa.array(["a"])], schema=schema) for i in range(3)]
    run = lambda: write_deltalake(uri, _reader(batches, schema, during=lambda: write_deltalake(
        uri, first, partition_by=["p"])), mode=mode, partition_by=["p"])
    if mode == "error":
        with pytest.raises(InvalidTableError, match="created concurrently"):
            run()
        expected = [100]
    elif mode == "ignore":
        assert run() == 0
        expected = [100]
    else:
        assert run() == 1
        expected = [0, 1, 2] + ([100] if mode == "append" else [])
    assert sorted(read_theirs(uri).column("id").to_pylist()) == expected
    assert len(_data_files(uri)) == (1 if mode in ("error", "ignore") else 2)  # removed files stay until vacuum
    assert_same_table(uri)


def test_table_created_while_writing_with_another_schema(tmp_path):
    uri = str(tmp_path / "t")
    schema = pa.schema([("id", pa.int64())])
    batches = [pa.record_batch([pa.array([1], pa.int64())], schema=schema)] * 2
    other = pa.table({"id": pa.array(["one"])})
    with pytest.raises(SchemaMismatchError, match="created concurrently"):
        write_deltalake(uri, _reader(batches, schema, during=lambda: write_deltalake(uri, other)), mode="append")
    assert read_theirs(uri).to_pylist() == [{"id": "one"}] and len(_data_files(uri)) == 1


# ---- writing to tables with reader-writer features delta-spark made --------------------------------

@pytest.mark.parametrize("name", ["v2-checkpoint-json", "v2-checkpoint-parquet", "type-widening"])
def test_we_write_to_v2_checkpoint_and_type_widened_golden_tables(golden, tmp_path, name):
    """Delta Lake's own v2-checkpoint tables (a UUID-named checkpoint with sidecars) and a type-widened
    table (files of the narrow types beside the wide schema): an append lands, a checkpoint of ours
    (V2 spec in the classic name on a v2Checkpoint table) holds the state, every row reads back; the
    widened columns keep their `delta.typeChanges`."""
    import json
    import shutil

    from deltalog.checkpoint_write import checkpoint_name, write_checkpoint
    from deltalog.scan import read_table
    from deltalog.storage import log_store_for

    uri = str(tmp_path / name)
    shutil.copytree(os.path.join(golden, name), uri)
    before = read_table(Snapshot.load(uri))
    new_rows = before.slice(0, 2)
    version = write_deltalake(uri, new_rows, mode="append")
    snapshot = Snapshot.load(uri)
    assert version == snapshot.version
    write_checkpoint(log_store_for(uri), snapshot)
    checkpoint = pq.read_table(os.path.join(uri, "_delta_log", checkpoint_name(version)))
    assert ("checkpointMetadata" in checkpoint.column_names) == name.startswith("v2-checkpoint")
    if "checkpointMetadata" in checkpoint.column_names:
        assert [r for r in checkpoint.column("checkpointMetadata").to_pylist() if r] == [
            {"version": version, "tags": None}]
    shutil.rmtree(os.path.join(uri, "_delta_log", "_sidecars"), ignore_errors=True)  # ours needs none
    for f in os.listdir(os.path.join(uri, "_delta_log")):
        if f.endswith(".json") and int(f.split(".")[0]) <= version and ".checkpoint." not in f:
            os.remove(os.path.join(uri, "_delta_log", f))  # only our checkpoint left to read from
    after = read_table(Snapshot.load(uri))
    key = lambda t: sorted(map(repr, t.to_pylist()))  # noqa: E731
    assert key(after) == key(pa.concat_tables([before, new_rows]))
    fields = json.loads(Snapshot.load(uri).metadata.schema_string)["fields"]
    if name == "type-widening":
        assert all("delta.typeChanges" in f["metadata"] for f in fields)
