"""The Iceberg metadata the engine writes after each commit of a `delta.universalFormat.enabledFormats =
iceberg` table (deltalog/iceberg/): incremental, caught up after a failed conversion, never backwards
when two converters race, and rebuilt whole when the commits it would replay have expired. Each time
pyiceberg reads every snapshot equal to delta-rs on the Delta version it names."""

from __future__ import annotations

import json
import os
import shutil
import threading

import pytest

from deltalog import Snapshot
from deltalog.iceberg import convert, latest_metadata
from deltalog.storage import log_store_for
from tests.support import iceberg_readers as ice

pytestmark = pytest.mark.spark

ICEBERG = {"delta.columnMapping.mode": "name", "delta.enableIcebergCompatV2": "true",
           "delta.universalFormat.enabledFormats": "iceberg"}


def _rows(spark, start: int, n: int):
    return spark.sql(f"select id, concat('v', id) as v, id % 3 as grp from range({start}, {start + n})")


def _manifests(path) -> set:
    return {n for n in os.listdir(os.path.join(path, "metadata")) if n.endswith("-m0.avro")}


def test_an_append_writes_one_manifest_and_keeps_the_others(spark, tmp_path):
    from deltalog.spark.operations import write_dataframe

    path = str(tmp_path / "t")
    write_dataframe(_rows(spark, 0, 10), path, partition_by=["grp"], configuration=ICEBERG)
    before = _manifests(path)
    write_dataframe(_rows(spark, 10, 10), path)
    added = _manifests(path) - before
    assert len(added) == 1  # the new files' manifest; the first one is carried by reference
    table = ice.iceberg_table(path)
    head = table.metadata.snapshots[-1]
    assert {m.manifest_path.rsplit("/", 1)[1] for m in head.manifests(table.io)} == before | added
    assert ice.assert_every_snapshot_matches_delta(path) == 2


def test_a_failed_conversion_is_caught_up_by_the_next_write(spark, tmp_path, monkeypatch):
    from deltalog.iceberg import conversion
    from deltalog.spark.operations import delete, write_dataframe

    path = str(tmp_path / "t")
    write_dataframe(_rows(spark, 0, 10), path, configuration=ICEBERG)

    def crash(*args, **kwargs):
        raise OSError("the process died between the Delta commit and its Iceberg metadata")

    monkeypatch.setattr(conversion._Builder, "metadata_json", crash)
    write_dataframe(_rows(spark, 10, 5), path)  # committed to Delta; Iceberg still at version 0
    assert int(ice.iceberg_table(path).metadata.properties["delta-version"]) == 0
    monkeypatch.undo()
    delete(spark, path, "id < 3")
    table = ice.iceberg_table(path)
    assert [s.summary["delta-version"] for s in table.metadata.snapshots] == ["0", "1", "2"]
    assert ice.assert_every_snapshot_matches_delta(path) == 3


def test_two_converters_at_once_never_go_backwards(spark, tmp_path):
    from deltalog.spark.operations import write_dataframe

    path = str(tmp_path / "t")
    write_dataframe(_rows(spark, 0, 5), path, configuration=ICEBERG)
    for i in range(1, 4):
        write_dataframe(_rows(spark, i * 5, 5), path)
    store = log_store_for(path)
    snapshots = [Snapshot.load(path, version=v) for v in range(4)]
    barrier = threading.Barrier(4)
    errors = []

    def run(v):
        barrier.wait()
        try:
            convert(snapshots[v], store)
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(v,)) for v in (3, 2, 1, 3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    number, metadata = latest_metadata(path, store)
    assert int(metadata.properties["delta-version"]) == 3
    versions = []
    for n in range(1, number + 1):
        versions.append(int(ice.iceberg_table(path, n).metadata.properties["delta-version"]))
    assert versions == sorted(versions)  # each metadata file names a version at or after the one before
    assert ice.assert_every_snapshot_matches_delta(path) >= 1


def test_without_metadata_the_whole_table_is_one_snapshot(spark, tmp_path):
    """Turned on for a table that was Delta only, or with its metadata folder lost: the next commit's
    conversion writes one snapshot of every live file (there are no earlier Iceberg snapshots to extend)."""
    import shutil

    from deltalog.spark.operations import write_dataframe

    path = str(tmp_path / "t")
    write_dataframe(_rows(spark, 0, 5), path, configuration={"delta.columnMapping.mode": "name"})
    write_dataframe(_rows(spark, 5, 5), path)
    assert not os.path.exists(os.path.join(path, "metadata"))
    write_dataframe(_rows(spark, 10, 5), path, configuration=ICEBERG)
    table = ice.iceberg_table(path)
    assert [s.summary["delta-version"] for s in table.metadata.snapshots] == ["2"]
    assert ice.iceberg_rows(table) == ice.delta_rows(path) and len(ice.delta_rows(path)) == 15

    shutil.rmtree(os.path.join(path, "metadata"))
    write_dataframe(_rows(spark, 20, 5), path)
    table = ice.iceberg_table(path)
    assert [s.summary["delta-version"] for s in table.metadata.snapshots] == ["3"]
    assert ice.iceberg_rows(table) == ice.delta_rows(path)


def test_vacuum_keeps_the_metadata_and_expires_the_snapshots_whose_files_it_deleted(spark, tmp_path):
    from deltalog.operations.vacuum import vacuum
    from deltalog.spark.operations import write_dataframe

    path = str(tmp_path / "t")
    write_dataframe(_rows(spark, 0, 10), path, partition_by=["grp"], configuration=ICEBERG)
    write_dataframe(_rows(spark, 10, 10), path)
    write_dataframe(_rows(spark, 100, 5), path, mode="overwrite")  # the first two versions' files removed
    write_dataframe(_rows(spark, 200, 5), path)
    before = set(os.listdir(os.path.join(path, "metadata")))
    deleted = vacuum(path, retain_hours=0, force=True)
    assert deleted and not any(d.startswith("metadata/") for d in deleted)
    after = set(os.listdir(os.path.join(path, "metadata")))
    assert {n for n in before if n.endswith(".metadata.json")} <= after  # every metadata version stays
    table = ice.iceberg_table(path)
    assert [s.summary["delta-version"] for s in table.metadata.snapshots] == ["2", "3"]
    assert ice.assert_every_snapshot_matches_delta(path) == 2
    # the manifests only the expired snapshots listed are gone; the kept snapshots' all read
    listed = {m.manifest_path.rsplit("/", 1)[1] for s in table.metadata.snapshots for m in s.manifests(table.io)}
    assert {n for n in after if n.endswith("-m0.avro")} == listed


def test_on_s3_through_the_tables_store(spark):
    """The same on an object store (S3 on SeaweedFS): metadata written through the table's own store and
    client, read by pyiceberg over S3 equal to delta-rs."""
    from pyiceberg.table import StaticTable

    from deltalog.storage import files as filesystem
    from deltalog.spark.operations import delete, write_dataframe
    from tests.support.seaweed import seaweedfs_or_skip

    with seaweedfs_or_skip() as s3:
        filesystem.configure(s3.uri(), s3.storage_options())
        try:
            uri = s3.uri("iceberg", "t")
            write_dataframe(_rows(spark, 0, 10), uri, partition_by=["grp"], configuration=ICEBERG)
            write_dataframe(_rows(spark, 10, 10), uri)
            delete(spark, uri, "id < 4")
            options = s3.storage_options()
            io = {"s3.endpoint": options["AWS_ENDPOINT_URL"], "s3.access-key-id": options["AWS_ACCESS_KEY_ID"],
                  "s3.secret-access-key": options["AWS_SECRET_ACCESS_KEY"], "s3.region": options["AWS_REGION"]}
            number, metadata = latest_metadata(uri, log_store_for(uri))
            assert int(metadata.properties["delta-version"]) == 2 and number == 3
            table = StaticTable.from_metadata(f"{uri}/metadata/v{number}.metadata.json", properties=io)
            import deltalake
            import pyarrow as pa

            for snapshot in table.metadata.snapshots:
                version = int(snapshot.summary["delta-version"])
                delta = deltalake.DeltaTable(uri, version=version, storage_options=options)
                expected = pa.table(deltalake.QueryBuilder().register("t", delta).execute("select * from t").read_all())
                assert ice.iceberg_rows(table, snapshot.snapshot_id) == ice.rows(expected), version
        finally:
            filesystem.configure(s3.uri(), None)


def test_a_stream_into_an_iceberg_table_makes_one_snapshot_a_micro_batch(spark, tmp_path):
    """A streaming table's exactly-once sink: each micro-batch is one Delta commit, and so one Iceberg
    snapshot; a batch run again after a crash (same batch id) commits nothing, and adds no snapshot."""
    from deltalog.spark.operations import write_dataframe
    from deltalog.spark.streaming import batch_writer
    from deltalog.spark.table_stream import stream_table

    source, target = str(tmp_path / "source"), str(tmp_path / "target")
    for i in range(3):
        write_dataframe(_rows(spark, i * 10, 10), source)
    sink = batch_writer(target, app_id="iceberg-stream", configuration=ICEBERG)
    query = (stream_table(spark, source, maxFilesPerTrigger=1).writeStream.foreachBatch(sink)
             .option("checkpointLocation", str(tmp_path / "checkpoint")).trigger(availableNow=True).start())
    query.awaitTermination()
    table = ice.iceberg_table(target)
    batches = len(table.metadata.snapshots)
    assert batches >= 3
    assert ice.assert_every_snapshot_matches_delta(target) == batches
    sink(_rows(spark, 0, 10), 0)  # batch 0 again: already committed
    assert len(ice.iceberg_table(target).metadata.snapshots) == batches


ICEBERG_V3 = {"delta.columnMapping.mode": "name", "delta.enableIcebergCompatV3": "true",
              "delta.enableRowTracking": "true", "delta.enableDeletionVectors": "true",
              "delta.universalFormat.enabledFormats": "iceberg"}


def _deletion_vectors(table) -> dict:
    """The live Iceberg DVs of the current snapshot: referenced data file -> (Puffin file, offset, size),
    read with the v3 fields (pyiceberg's own manifest reader leaves them out)."""
    from deltalog.iceberg.conversion import _live_entries
    from deltalog.iceberg.data_files import v3_field

    out = {}
    for manifest in table.current_snapshot().manifests(table.io):
        for entry in _live_entries(table.io, manifest):
            if entry.data_file.file_format.name == "PUFFIN":
                referenced = v3_field(entry.data_file, "referenced_data_file")
                assert referenced not in out, f"two live deletion vectors for {referenced}"
                out[referenced] = (entry.data_file.file_path, v3_field(entry.data_file, "content_offset"),
                                   v3_field(entry.data_file, "content_size_in_bytes"))
    return out


def test_iceberg_compat_v3_gives_deletion_vectors_and_row_ids_to_iceberg_v3(spark, tmp_path, monkeypatch):
    """Deletion vectors become Iceberg v3 DVs (one live DV per data file, replaced when Delta's grows, gone
    with its file), each file's first row ID is its baseRowId, and a gap rebuilds the table with its DVs;
    pyiceberg reads every snapshot as delta-rs reads its version."""
    from pyroaring import BitMap64

    from deltalog.deletion_vectors import MAGIC
    from deltalog.iceberg import conversion
    from deltalog.spark.operations import delete, write_dataframe
    from deltalog.spark.optimize import optimize

    path = str(tmp_path / "t")
    write_dataframe(_rows(spark, 0, 30).repartition(2), path, partition_by=["grp"], configuration=ICEBERG_V3)
    delete(spark, path, "id % 4 = 0")
    delete(spark, path, "id % 4 = 1")  # the same files' DVs grow: the first ones' entries go
    table = ice.iceberg_table(path)
    assert table.metadata.format_version == 3
    assert [s.summary.operation.value for s in table.metadata.snapshots] == ["append", "delete", "delete"]
    snapshot = Snapshot.load(path)
    adds = {"file://" + os.path.join(path, a.path): a for a in snapshot.add_files()}
    dvs = _deletion_vectors(table)
    assert set(dvs) == set(adds)  # every data file has one DV, the newest
    for data_path, (puffin, offset, size) in dvs.items():
        with table.io.new_input(puffin).open() as f:
            body = f.read()
        assert body[:4] == body[-4:] == b"PFA1"
        blob = body[offset:offset + size]
        assert int.from_bytes(blob[4:8], "little") == MAGIC
        assert len(BitMap64.deserialize(blob[8:-4])) == adds[data_path].deletion_vector["cardinality"]
    # row lineage: the data files' first row IDs are Delta's baseRowIds, the table's next row ID past them
    from deltalog.iceberg.conversion import _live_entries
    from deltalog.iceberg.data_files import v3_field

    first_ids = {e.data_file.file_path: v3_field(e.data_file, "first_row_id")
                 for m in table.current_snapshot().manifests(table.io) for e in _live_entries(table.io, m)
                 if e.data_file.file_format.name == "PARQUET"}
    assert first_ids == {p: a.base_row_id for p, a in adds.items()}
    assert table.metadata.next_row_id == max(a.base_row_id + json.loads(a.stats)["numRecords"]
                                             for a in adds.values())
    assert ice.assert_every_snapshot_matches_delta(path) == 3

    optimize(spark, path)  # rewrites the files without the deleted rows: no DV is left
    write_dataframe(_rows(spark, 30, 30).repartition(1), path)
    table = ice.iceberg_table(path)
    assert _deletion_vectors(table) == {}
    assert ice.assert_every_snapshot_matches_delta(path) == 5

    delete(spark, path, "id = 31")
    monkeypatch.setattr(conversion, "MAX_CATCH_UP", 0)  # a gap: one snapshot of the whole table, DVs too
    shutil.rmtree(os.path.join(path, "metadata"))
    delete(spark, path, "id = 33")
    table = ice.iceberg_table(path)
    assert len(table.metadata.snapshots) == 1 and len(_deletion_vectors(table)) == 2  # grp 1 and grp 0
    assert ice.iceberg_rows(table) == ice.delta_rows(path)
    assert len(ice.delta_rows(path)) == 42  # 14 left of the first 30, 28 of the next


def test_vacuum_deletes_the_puffin_files_only_expired_snapshots_used(spark, tmp_path):
    from deltalog.operations.vacuum import vacuum
    from deltalog.spark.operations import delete, write_dataframe
    from deltalog.spark.optimize import optimize

    path = str(tmp_path / "t")
    write_dataframe(_rows(spark, 0, 20), path, configuration=ICEBERG_V3)
    delete(spark, path, "id < 3")
    optimize(spark, path)  # the DV'd file is removed: the snapshots naming it expire with VACUUM
    delete(spark, path, "id = 10")  # a DV the current snapshot keeps
    metadata = os.path.join(path, "metadata")
    assert len([n for n in os.listdir(metadata) if n.endswith(".puffin")]) == 2
    vacuum(path, retain_hours=0, force=True)
    kept = [n for n in os.listdir(metadata) if n.endswith(".puffin")]
    table = ice.iceberg_table(path)
    assert [os.path.basename(p) for p, _, _ in _deletion_vectors(table).values()] == kept and len(kept) == 1
    assert ice.assert_every_snapshot_matches_delta(path) == len(table.metadata.snapshots)
    assert len(ice.delta_rows(path)) == 16


def _puffin_references(body: bytes) -> list[str]:
    """The `referenced-data-file` of each blob in a Puffin file's footer."""
    length = int.from_bytes(body[-12:-8], "little")
    footer = json.loads(body[-12 - length:-12])
    return [b["properties"]["referenced-data-file"] for b in footer["blobs"]]


def test_every_location_in_the_metadata_is_a_uri_with_its_scheme(spark, tmp_path):
    """Iceberg's spec names files by full URIs, locally `file:///...`: Trino's native local file system
    refuses a bare path, and its register_table wants the location the metadata names. The table's
    location, the metadata log, manifest lists, manifests, data files, Puffin files and the data files
    their deletion vectors reference are all such URIs, and pyiceberg reads the table through a file IO
    that refuses any location without a scheme."""
    from deltalog.iceberg.conversion import _live_entries
    from deltalog.iceberg.data_files import v3_field
    from deltalog.spark.operations import delete, write_dataframe

    path = str(tmp_path / "t")
    write_dataframe(_rows(spark, 0, 20).repartition(2), path, partition_by=["grp"], configuration=ICEBERG_V3)
    delete(spark, path, "id < 3")  # a deletion vector: a Puffin file
    write_dataframe(_rows(spark, 20, 5), path)
    root = "file://" + os.path.abspath(path)
    number, _ = latest_metadata(path, log_store_for(path))
    with open(os.path.join(path, "metadata", f"v{number}.metadata.json")) as f:
        document = json.load(f)
    assert document["location"] == root
    assert [e["metadata-file"] for e in document["metadata-log"]] == [
        f"{root}/metadata/v{n}.metadata.json" for n in range(1, number)]
    table = ice.strict_iceberg_table(f"{root}/metadata/v{number}.metadata.json")
    named = {"manifest list": [], "manifest": [], "data file": [], "puffin file": [], "referenced data file": []}
    for snapshot in table.metadata.snapshots:
        named["manifest list"].append(snapshot.manifest_list)
        for manifest in snapshot.manifests(table.io):
            named["manifest"].append(manifest.manifest_path)
            for entry in _live_entries(table.io, manifest):
                if entry.data_file.file_format.name == "PUFFIN":
                    named["puffin file"].append(entry.data_file.file_path)
                    named["referenced data file"].append(v3_field(entry.data_file, "referenced_data_file"))
                    with table.io.new_input(entry.data_file.file_path).open() as f:
                        named["referenced data file"] += _puffin_references(f.read())
                else:
                    named["data file"].append(entry.data_file.file_path)
    for kind, locations in named.items():
        assert locations, f"no {kind} to check"
        bare = [loc for loc in locations if not loc.startswith(f"{root}/")]
        assert not bare, f"{kind}s named without the file:// scheme: {bare}"
    assert ice.iceberg_rows(table) == ice.delta_rows(path) and len(ice.delta_rows(path)) == 22
    for snapshot in table.metadata.snapshots:
        version = int(snapshot.summary["delta-version"])
        assert ice.iceberg_rows(table, snapshot.snapshot_id) == ice.delta_rows(path, version), version


def test_metadata_naming_local_files_by_bare_paths_is_still_read_and_caught_up(spark, tmp_path, monkeypatch):
    """Metadata written before its locations were URIs names local files by bare paths: the next
    conversion removes the files a commit removed though its manifests name them bare, writes its own
    locations as URIs, and VACUUM expires the snapshots naming the files it deleted, named either way."""
    from deltalog.iceberg import conversion
    from deltalog.operations.vacuum import vacuum
    from deltalog.spark.operations import write_dataframe

    path = str(tmp_path / "t")
    monkeypatch.setattr(conversion, "location_uri", lambda location: location)  # the writer before
    write_dataframe(_rows(spark, 0, 10), path, partition_by=["grp"], configuration=ICEBERG)
    write_dataframe(_rows(spark, 10, 10), path)
    assert ice.iceberg_table(path).metadata.location == os.path.abspath(path)
    monkeypatch.undo()
    write_dataframe(_rows(spark, 100, 5), path, mode="overwrite")  # removes every file named bare
    write_dataframe(_rows(spark, 200, 5), path)
    table = ice.iceberg_table(path)
    assert table.metadata.location == "file://" + os.path.abspath(path)
    assert ice.assert_every_snapshot_matches_delta(path) == 4
    assert len(ice.delta_rows(path)) == 10
    vacuum(path, retain_hours=0, force=True)
    table = ice.iceberg_table(path)
    assert [s.summary["delta-version"] for s in table.metadata.snapshots] == ["2", "3"]
    assert ice.assert_every_snapshot_matches_delta(path) == 2
    listed = {m.manifest_path.rsplit("/", 1)[1] for s in table.metadata.snapshots for m in s.manifests(table.io)}
    assert {n for n in os.listdir(os.path.join(path, "metadata")) if n.endswith("-m0.avro")} == listed


def test_refused_where_iceberg_readers_could_not_read_it(spark, tmp_path):
    from deltalog import InvalidTableError
    from deltalog.spark.operations import write_dataframe

    refused = {"a": ({**ICEBERG_V3, "delta.enableRowTracking": "false"},
                     "enableIcebergCompatV3=true needs row tracking"),
               "b": ({**ICEBERG_V3, "delta.enableIcebergCompatV2": "true"}, "cannot both be true"),
               "c": ({**ICEBERG, "delta.enableDeletionVectors": "true"},
                     "Iceberg v2 readers do not read deletion vectors")}
    for name, (configuration, message) in refused.items():
        with pytest.raises(InvalidTableError, match=message):
            write_dataframe(_rows(spark, 0, 2), str(tmp_path / name), configuration=configuration)
        assert not os.path.exists(tmp_path / name / "_delta_log" / f"{0:020d}.json")  # nothing committed
