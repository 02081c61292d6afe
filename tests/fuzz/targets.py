"""Fuzz targets for the log reader: each takes bytes and loads a table whose log holds them in one place
(a commit, `_last_checkpoint`, a `.crc`, a checkpoint Parquet file, a deletion vector). Every input must
load or raise one of the engine's DeltaError classes naming the file — never another exception.

The tables live in memory (`MemoryLogStore`) built from seeds made by this engine
(`seed_files`), so a run needs no disk and each input is one load."""
from __future__ import annotations

import io
import json
import struct
import zlib
from typing import Any, BinaryIO, Callable

from deltalog.errors import DeltaError
from deltalog.storage.log_store import LogFile, LogStore, arrow_owned_buffer, classify

ROOT = "memory-fuzz://table"


class MemoryLogStore(LogStore):
    """A table's log and files in a dict: name (relative to `_delta_log/`, or `../` + a table path)."""

    def __init__(self, files: dict[str, bytes]):
        self.table_uri = ROOT
        self.files = dict(files)

    def list_from(self, version: int = 0) -> list[LogFile]:
        out = []
        for name, data in self.files.items():
            if name.startswith("../"):
                continue
            v, kind, part, parts, v2 = classify(name)
            if kind == "other" or (v is not None and v < version):
                continue
            out.append(LogFile(name, v, kind, len(data), 1_700_000_000_000 + (v or 0), part, parts, v2))
        out.sort(key=lambda f: (f.version is None, f.version or 0, f.name))
        return out

    def read(self, name: str) -> bytes:
        try:
            return self.files[name]
        except KeyError:
            raise FileNotFoundError(name) from None

    def write_if_absent(self, name: str, data: bytes) -> None:
        if name in self.files:
            raise FileExistsError(name)
        self.files[name] = data

    def write_atomic(self, name: str, data: bytes) -> None:
        self.files[name] = data

    def delete(self, name: str) -> None:
        self.files.pop(name, None)

    def exists(self) -> bool:
        return bool(self.files)

    def parquet_source(self, name: str) -> Any:
        return arrow_owned_buffer(self.read(name))

    def open_data_file(self, relative: str) -> BinaryIO:
        return io.BytesIO()

    def close_data_file(self, handle: BinaryIO, relative: str) -> tuple[int, int]:
        raise NotImplementedError

    def delete_data_file(self, relative: str) -> None:
        self.files.pop("../" + relative, None)

    def read_data_range(self, path: str, offset: int, length: int) -> bytes:
        key = "../" + path.removeprefix(ROOT + "/")
        if key not in self.files:
            raise FileNotFoundError(path)
        return self.files[key][offset:offset + length]


def _load(files: dict[str, bytes]) -> None:
    from deltalog.snapshot import Snapshot

    snap = Snapshot.load(ROOT, store=MemoryLogStore(files))
    snap.add_files()
    snap.schema_json
    snap.files.column("deletion_vector").to_pylist()


def _line(action: str, body: dict) -> bytes:
    return json.dumps({action: body}).encode() + b"\n"


_SCHEMA = json.dumps({"type": "struct", "fields": [
    {"name": "id", "type": "long", "nullable": True, "metadata": {}},
    {"name": "p", "type": "string", "nullable": True, "metadata": {}}]})


def seed_files() -> dict[str, bytes]:
    """A small table's log in memory: version 0 (protocol, metadata, two adds), version 1 (a remove and
    an add with an inline DV), a checkpoint of version 1 with `_last_checkpoint`, a `.crc` of version 1."""
    from deltalog.checkpoint_write import write_checkpoint
    from deltalog.checksum import write_checksum
    from deltalog.snapshot import Snapshot

    v0 = (_line("commitInfo", {"timestamp": 1, "operation": "WRITE"})
          + _line("protocol", {"minReaderVersion": 3, "minWriterVersion": 7, "readerFeatures": ["deletionVectors"],
                               "writerFeatures": ["deletionVectors"]})
          + _line("metaData", {"id": "fuzz", "format": {"provider": "parquet", "options": {}},
                               "schemaString": _SCHEMA, "partitionColumns": ["p"],
                               "configuration": {"delta.enableDeletionVectors": "true"}, "createdTime": 1})
          + _line("add", {"path": "p=a/f1.parquet", "partitionValues": {"p": "a"}, "size": 10,
                          "modificationTime": 1, "dataChange": True,
                          "stats": json.dumps({"numRecords": 3, "minValues": {"id": 1}, "maxValues": {"id": 3},
                                               "nullCount": {"id": 0}})})
          + _line("add", {"path": "p=b/f2.parquet", "partitionValues": {"p": "b"}, "size": 10,
                          "modificationTime": 1, "dataChange": True}))
    dv = {"storageType": "i", "pathOrInlineDv": "^Bg9^0rr910000000000iXQKl0rr91000005c8Xg##093",
          "offset": None, "sizeInBytes": 34, "cardinality": 1}
    v1 = (_line("commitInfo", {"timestamp": 2, "operation": "DELETE"})
          + _line("remove", {"path": "p=a/f1.parquet", "deletionTimestamp": 2, "dataChange": True})
          + _line("add", {"path": "p=a/f1.parquet", "partitionValues": {"p": "a"}, "size": 10,
                          "modificationTime": 1, "dataChange": True, "deletionVector": dv}))
    store = MemoryLogStore({"%020d.json" % 0: v0, "%020d.json" % 1: v1})
    snap = Snapshot.load(ROOT, store=store)
    write_checkpoint(store, snap)
    write_checksum(store, snap)
    return store.files


def _with(name: str) -> Callable[[bytes], None]:
    def target(data: bytes) -> None:
        files = seed_files_cached()
        files = {**files, name: data}
        if name.endswith(".checkpoint.parquet"):
            files.pop("%020d.json" % 1, None)  # the checkpoint is the only source of version 1
        _load(files)
    return target


_SEEDS: dict[str, bytes] | None = None


def seed_files_cached() -> dict[str, bytes]:
    global _SEEDS
    if _SEEDS is None:
        _SEEDS = seed_files()
    return _SEEDS


def deletion_vector_target(data: bytes) -> None:
    """The input as an inline DV's Z85 text, as a DV file (framed: size, bitmap, CRC-32) and as a bare
    bitmap."""
    from deltalog.deletion_vectors import read_deletion_vector

    store = MemoryLogStore(seed_files_cached())
    text = data.decode("latin-1")
    try:
        read_deletion_vector(store, {"storageType": "i", "pathOrInlineDv": text, "offset": None,
                                     "sizeInBytes": len(data), "cardinality": 1})
    except DeltaError:
        pass
    framed = b"\x01" + struct.pack(">i", len(data)) + data + struct.pack(">I", zlib.crc32(data))
    store.files["../dv.bin"] = framed
    read_deletion_vector(store, {"storageType": "p", "pathOrInlineDv": ROOT + "/dv.bin", "offset": 1,
                                 "sizeInBytes": len(data), "cardinality": 1})


_ODD_VALUES: list[Any] = [None, True, 0, -1, 2 ** 63, -(2 ** 70), 1.5, float("nan"), "", "x", "../../etc",
                          "/abs/path", "%zz", "\u0000", [], [1, "a"], {}, {"a": {"b": None}}]


def _mutate(obj: Any, rng: Any) -> Any:
    """`obj` (parsed JSON) with one value somewhere replaced by an odd one, or a key dropped."""
    if isinstance(obj, dict) and obj:
        key = rng.choice(sorted(obj))
        if rng.random() < 0.15:
            return {k: v for k, v in obj.items() if k != key}
        return {**obj, key: _mutate(obj[key], rng) if rng.random() < 0.6 else rng.choice(_ODD_VALUES)}
    if isinstance(obj, list) and obj:
        i = rng.randrange(len(obj))
        return obj[:i] + [_mutate(obj[i], rng)] + obj[i + 1:]
    if isinstance(obj, str) and obj.startswith(("{", "[")):  # JSON in a string: schemaString, stats
        try:
            return json.dumps(_mutate(json.loads(obj), rng))
        except ValueError:
            pass
    return rng.choice(_ODD_VALUES)


def commit_fields_target(data: bytes) -> None:
    """The seed table's two commits (no checkpoint) with values replaced by values of other types and
    shapes, chosen from the input: every field of every action is reached, which byte mutations of the
    JSON text rarely do."""
    import random

    rng = random.Random(data)
    files = {k: v for k, v in seed_files_cached().items() if k.endswith(".json")}
    for _ in range(1 + len(data) % 3):
        name = rng.choice(sorted(files))
        lines = [json.loads(line) for line in files[name].splitlines() if line.strip()]
        i = rng.randrange(len(lines))
        lines[i] = _mutate(lines[i], rng)
        files[name] = b"".join(json.dumps(line, allow_nan=True).encode() + b"\n" for line in lines)
    _load(files)


V2_MANIFEST = "%020d.checkpoint.80a083e8-7026-4e79-81be-64bd76c43a11.json" % 1


def v2_manifest_seed() -> bytes:
    """A v2 checkpoint (JSON manifest) of the seed table's version 1, file actions inline."""
    from deltalog.snapshot import Snapshot

    snap = Snapshot.load(ROOT, store=MemoryLogStore({k: v for k, v in seed_files_cached().items()
                                                     if k.endswith(".json")}))
    protocol = {"minReaderVersion": 3, "minWriterVersion": 7,
                "readerFeatures": ["deletionVectors", "v2Checkpoint"], "writerFeatures": ["deletionVectors", "v2Checkpoint"]}
    lines = [_line("checkpointMetadata", {"version": 1}), _line("protocol", protocol),
             _line("metaData", json.loads(seed_files_cached()["%020d.json" % 0].splitlines()[2])["metaData"])]
    lines += [_line("add", a.to_dict()["add"] if "add" in a.to_dict() else a.to_dict()) for a in snap.add_files()]
    return b"".join(lines)


def v2_manifest_target(data: bytes) -> None:
    """The table's version 1 only from a v2 checkpoint's JSON manifest (the input)."""
    files = {"%020d.json" % 0: seed_files_cached()["%020d.json" % 0], V2_MANIFEST: data}
    _load(files)


TARGETS: dict[str, Callable[[bytes], None]] = {
    "v2_manifest": v2_manifest_target,
    "commit_fields": commit_fields_target,
    "commit": _with("%020d.json" % 2),
    "last_checkpoint": _with("_last_checkpoint"),
    "crc": _with("%020d.crc" % 1),
    "checkpoint": _with("%020d.checkpoint.parquet" % 1),
    "deletion_vector": deletion_vector_target,
}


def seed_inputs() -> dict[str, list[bytes]]:
    """Each target's starting inputs: the seed table's own file in that place."""
    files = seed_files_cached()
    return {
        "commit_fields": [b"0", b"seed-1", b"seed-22"],
        "v2_manifest": [v2_manifest_seed()],
        "commit": [files["%020d.json" % 1]],
        "last_checkpoint": [files["_last_checkpoint"]],
        "crc": [files["%020d.crc" % 1]],
        "checkpoint": [files["%020d.checkpoint.parquet" % 1]],
        "deletion_vector": [b"^Bg9^0rr910000000000iXQKl0rr91000005c8Xg##093", _inline_bitmap()],
    }


def _inline_bitmap() -> bytes:
    from deltalog.deletion_vectors import z85_decode

    return z85_decode("^Bg9^0rr910000000000iXQKl0rr91000005c8Xg##093")[:34]


def run_one(target: str, data: bytes) -> None:
    """The contract: load, or raise a DeltaError."""
    try:
        TARGETS[target](data)
    except DeltaError:
        pass
