"""A commit of many adds is parsed by Arrow's JSON reader (deltalog/file_actions.py), a small one line by
line: both must give the same snapshot, and the same error naming the same line, for every shape of add
line the log may hold."""
from __future__ import annotations

import json
import time

import pyarrow as pa
import pytest

import deltalog.snapshot as snapshot_module
from deltalog.errors import CorruptLogError
from deltalog.file_actions import adds_from_json, files_table
from deltalog.snapshot import Snapshot

MANY = 2100  # above snapshot._ADDS_READ_AS_COLUMNS
NOW = int(time.time() * 1000)  # tombstones this recent are kept


def _add(i: int, **fields) -> dict:
    return {"path": f"part={i % 3}/f{i}.parquet", "partitionValues": {"part": str(i % 3)}, "size": 100 + i,
            "modificationTime": 1_700_000_000_000 + i, "dataChange": True,
            "stats": json.dumps({"numRecords": i, "minValues": {"id": i}}), **fields}


def _line(key: str, value: dict) -> str:
    return json.dumps({key: value}, separators=(",", ":"))


def _write(table, commits: list[list[str]], newline: str = "\n") -> str:
    log = table / "_delta_log"
    log.mkdir(parents=True)
    schema = {"type": "struct", "fields": [{"name": n, "type": t, "nullable": True, "metadata": {}}
                                           for n, t in (("id", "long"), ("part", "string"))]}
    first = [_line("protocol", {"minReaderVersion": 3, "minWriterVersion": 7, "readerFeatures": ["deletionVectors"],
                                "writerFeatures": ["deletionVectors"]}),
             _line("metaData", {"id": "t", "format": {"provider": "parquet", "options": {}},
                                "schemaString": json.dumps(schema), "partitionColumns": ["part"],
                                "configuration": {}, "createdTime": 1})]
    for version, lines in enumerate([first, *commits]):
        (log / f"{version:020d}.json").write_bytes(newline.join(lines).encode() + newline.encode())
    return str(table)


def _both_ways(uri: str, monkeypatch) -> tuple[Snapshot, Snapshot]:
    fast = Snapshot.load(uri)
    with monkeypatch.context() as m:
        m.setattr(snapshot_module, "_ADDS_READ_AS_COLUMNS", 10**9)
        slow = Snapshot.load(uri)
    return fast, slow


def _rows(table: pa.Table) -> list:
    return sorted(table.to_pylist(), key=lambda r: (r["path"], repr(r)))


def _same(fast: Snapshot, slow: Snapshot) -> None:
    assert _rows(fast.files) == _rows(slow.files)
    assert _rows(fast.tombstones) == _rows(slow.tombstones)
    assert fast.app_transactions == slow.app_transactions


def test_every_shape_of_add_line_reads_as_line_by_line(tmp_path, monkeypatch):
    dv = {"storageType": "u", "pathOrInlineDv": "ab^-aqEH.-t@S}K{vb[*k^", "offset": 1, "sizeInBytes": 36,
          "cardinality": 2}
    tags = {"INSERTION_TIME": "1700000000000000", "OPTIMIZE_TARGET_SIZE": "268435456"}
    first = [_line("commitInfo", {"operation": "WRITE"})]
    for i in range(MANY):
        fields = {}
        if i % 7 == 0:
            fields["partitionValues"] = {"part": None}  # a null partition value
        if i % 5 == 0:
            fields["deletionVector"] = {**dv, "maxRowIndex": 9}  # a field beyond the protocol's
        if i % 11 == 0:
            fields["clusteringProvider"] = "liquid"
        first.append(_line("add", _add(i, tags=tags, **fields)))
    first.insert(1300, _line("txn", {"appId": "app", "version": 4}))
    first.insert(1301, "")
    # in one commit: f1 removed and added again, f602 added and removed (the later line wins), f4 added
    # again with its path and partition values only, and an add not spelled as writers spell it
    second = [_line("remove", {"path": "part=1/f1.parquet", "deletionTimestamp": NOW, "dataChange": True})]
    second += [_line("add", _add(i + MANY)) for i in range(MANY)]
    second.append(_line("remove", {"path": f"part={(MANY + 2) % 3}/f{MANY + 2}.parquet", "deletionTimestamp": NOW}))
    second.append(_line("add", {k: v for k, v in _add(4).items() if k in ("path", "partitionValues")}))
    second.append('{ "add": ' + json.dumps(_add(MANY * 3)) + "}")  # read as a dict
    second.append(_line("add", _add(1)))
    uri = _write(tmp_path / "t", [first, second])
    fast, slow = _both_ways(uri, monkeypatch)
    _same(fast, slow)
    assert fast.num_files == 2 * MANY - 1 + 1 and fast.app_transactions == {"app": 4}
    assert fast.tombstones.column("path").to_pylist() == [f"part=2/f{MANY + 2}.parquet"]
    bare = fast.files.filter(pa.compute.equal(fast.files.column("path"), "part=1/f4.parquet")).to_pylist()[0]
    assert (bare["size"], bare["modification_time"], bare["data_change"], bare["tags"]) == (0, 0, True, None)


@pytest.mark.parametrize("newline", ["\n", "\r\n"])
def test_unpartitioned_adds_with_tags_that_differ(tmp_path, monkeypatch, newline):
    lines = []
    for i in range(MANY):
        a = _add(i, partitionValues={})
        if i % 2:
            a["tags"] = {f"k{i % 4}": "v"}  # keys differ from add to add: read line by line
        lines.append(_line("add", a))
    fast, slow = _both_ways(_write(tmp_path / "t", [lines], newline), monkeypatch)
    _same(fast, slow)
    assert fast.num_files == MANY


@pytest.mark.parametrize("bad, why", [
    ('"size":"12"', "size"), ('"dataChange":"yes"', "dataChange"),
    ('"partitionValues":{"part":3}', "partitionValues"), ('"tags":{"a":null}', "tags"),
    ('"deletionVector":[]', "deletionVector"), ('"deletionVector":{"storageType":"u"}', "deletionVector"),
])
def test_a_bad_add_among_many_is_named_by_its_line(tmp_path, monkeypatch, bad, why):
    lines = [_line("add", _add(i)) for i in range(MANY)]
    lines[1400] = lines[1400][:-2] + "," + bad + "}}"
    uri = _write(tmp_path / "t", [lines])
    for threshold in (snapshot_module._ADDS_READ_AS_COLUMNS, 10**9):
        with monkeypatch.context() as m:
            m.setattr(snapshot_module, "_ADDS_READ_AS_COLUMNS", threshold)
            with pytest.raises(CorruptLogError, match=r"00000000000000000001\.json, line 1401") as err:
                Snapshot.load(uri)
            assert why in str(err.value)


def test_the_json_reader_leaves_to_files_table_what_it_cannot_decide():
    def lines(*adds):
        return "\n".join(_line("add", a) for a in adds).encode()
    assert adds_from_json(lines(_add(1), _add(2, tags={"a": None}))) is None  # a null tag
    assert adds_from_json(lines(_add(1, tags={"a": "1"}), _add(2, tags={"b": "x"}))) is None  # keys differ
    assert adds_from_json(lines(_add(1, partitionValues={"part": 1}))) is None  # not a string
    no_values = _add(1)
    del no_values["partitionValues"]
    assert adds_from_json(lines(no_values)) is None  # absent: files_table reads no values
    both = [_add(1, tags={"a": "1"}), _add(2, tags={"a": "2"}), _add(3)]
    assert adds_from_json(lines(*both)).to_pylist() == files_table(both).to_pylist()
