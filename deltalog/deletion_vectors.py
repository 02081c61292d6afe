"""Deletion vectors (the `deletionVectors` reader feature): which rows of a data file are deleted.

An `add` may carry a descriptor `{storageType, pathOrInlineDv, offset, sizeInBytes, cardinality}`:
- `u`: in a file of the table, `<table>/<prefix>/deletion_vector_<uuid>.bin`, where pathOrInlineDv is
  the optional prefix followed by the UUID in Z85 (its last 20 characters);
- `p`: in the file at the absolute path pathOrInlineDv;
- `i`: inline, pathOrInlineDv is the Z85 text of the bitmap itself.

A DV file is a version byte (1), then per DV: its size (4 bytes, big-endian), the bitmap, and the
CRC-32 of the bitmap (4 bytes, big-endian); `offset` points at the size. The bitmap is Delta's
RoaringBitmapArray: a magic number (1681511377, little-endian int32) followed by a 64-bit Roaring bitmap
in the portable format, which pyroaring's BitMap64 reads as it is.

A file's identity in log replay is its path together with its DV (`file_key`).

Writing (merge-on-read DML): `write_deletion_vectors` puts the bitmaps of one commit into one new
`deletion_vector_<uuid>.bin` at the table root and returns their `u` descriptors; `mark_rows` turns the
rows a DML deletes from some files into the `remove` + `add` pairs that carry the old and new DV.
"""
from __future__ import annotations

import dataclasses
import json
import struct
import uuid
import zlib
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .errors import CorruptLogError
from .table_configuration import DELETION_VECTORS_KEY, flag

MAGIC = 1681511377
_Z85 = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"
_Z85_INDEX = {c: i for i, c in enumerate(_Z85)}


def z85_decode(text: str) -> bytes:
    """ZeroMQ's Z85 (RFC 32): 5 characters for every 4 bytes. The last group may be a partial one as
    the `z85` crate (delta-kernel-rs) writes it: one leading `#` per byte missing from a 4-byte word
    (`##093` is the 2 bytes `03 00`). No full group can start with `#` (84 * 85**4 > 2**32), so the
    form is unambiguous."""
    if len(text) % 5:
        raise ValueError(f"Z85 text must have a multiple of 5 characters, got {len(text)}")
    out = bytearray()
    for i in range(0, len(text), 5):
        group = text[i:i + 5]
        missing = len(group) - len(group.lstrip("#"))
        if missing and (i + 5 < len(text) or missing > 3):
            raise ValueError(f"Z85 group {group!r} is out of range (only the last group may be partial, "
                             f"with 1 to 3 leading '#')")
        value = 0
        for c in "0" * missing + group[missing:]:
            try:
                value = value * 85 + _Z85_INDEX[c]
            except KeyError:
                raise ValueError(f"{c!r} is not a Z85 character") from None
        if value >= 1 << (8 * (4 - missing)):
            raise ValueError(f"Z85 group {group!r} is out of range")
        out += value.to_bytes(4, "big")[missing:]
    return bytes(out)


def z85_encode(data: bytes) -> str:
    if len(data) % 4:
        raise ValueError(f"Z85 encodes multiples of 4 bytes, got {len(data)}")
    out = []
    for i in range(0, len(data), 4):
        value = int.from_bytes(data[i:i + 4], "big")
        chunk = []
        for _ in range(5):
            value, digit = divmod(value, 85)
            chunk.append(_Z85[digit])
        out.append("".join(reversed(chunk)))
    return "".join(out)


def unique_id(dv: dict[str, Any]) -> str:
    """The protocol's `uniqueId`: storage type, path or inline data, and `@offset` when there is one."""
    uid = f"{dv['storageType']}{dv['pathOrInlineDv']}"
    return uid if dv.get("offset") is None else f"{uid}@{dv['offset']}"


def file_keys(paths: pa.Array, dvs: pa.Array | pa.ChunkedArray | None) -> pa.Array:
    """Log-replay identity of files: the (decoded) path, joined with the DV's unique id when it has one."""
    if dvs is None:
        return paths
    if isinstance(dvs, pa.ChunkedArray):
        dvs = dvs.combine_chunks() if dvs.num_chunks else pa.array([], dvs.type)
    if dvs.null_count == len(dvs):
        return paths
    offset = pc.struct_field(dvs, "offset")
    offset_text = pc.if_else(pc.is_null(offset), "",
                             pc.binary_join_element_wise("@", pc.cast(offset, pa.string()), ""))
    uid = pc.binary_join_element_wise(pc.struct_field(dvs, "storageType"),
                                      pc.struct_field(dvs, "pathOrInlineDv"), offset_text, "")
    return pc.if_else(pc.is_null(uid), paths, pc.binary_join_element_wise(paths, uid, "\x00"))


def relative_path(dv: dict[str, Any]) -> str | None:
    """For a `u` DV, its file's path relative to the table root (None for other storage types)."""
    if dv["storageType"] != "u":
        return None
    text = dv["pathOrInlineDv"]
    if len(text) < 20:
        raise ValueError(f"a 'u' deletion vector needs at least 20 characters, got {text!r}")
    prefix, encoded = text[:-20], text[-20:]
    name = f"deletion_vector_{uuid.UUID(bytes=z85_decode(encoded))}.bin"
    return f"{prefix}/{name}" if prefix else name


def parse_bitmap(data: bytes, where: str) -> Any:
    """A RoaringBitmapArray's bytes -> pyroaring BitMap64."""
    from pyroaring import BitMap64

    if len(data) < 4 or struct.unpack_from("<i", data)[0] != MAGIC:
        raise CorruptLogError(f"{where}: not a deletion vector (magic number {MAGIC} missing)")
    try:
        return BitMap64.deserialize(data[4:])
    except Exception as exc:
        raise CorruptLogError(f"{where}: the deletion vector's bitmap cannot be read ({exc})") from None


def read_deletion_vector(store: Any, dv: dict[str, Any]) -> Any:
    """The deleted row indexes of one descriptor, as a BitMap64; CorruptLogError when the stored DV is
    damaged (size, checksum, magic number) or does not hold `cardinality` rows."""
    kind = dv["storageType"]
    where = f"{store.table_uri}: deletion vector {kind}:{dv['pathOrInlineDv']}"
    if kind == "i":
        try:
            data = z85_decode(dv["pathOrInlineDv"])
        except ValueError as exc:
            raise CorruptLogError(f"{where}: {exc}") from None
        bitmap = parse_bitmap(data[: dv.get("sizeInBytes") or len(data)], where)
    elif kind in ("u", "p"):
        size, offset = int(dv["sizeInBytes"]), int(dv.get("offset") or 1)
        try:
            path = relative_path(dv) if kind == "u" else dv["pathOrInlineDv"]
            framed = store.read_data_range(path, offset, size + 8)
        except (OSError, ValueError) as exc:
            raise CorruptLogError(f"{where}: its file cannot be read ({exc})") from None
        if len(framed) < size + 8:
            raise CorruptLogError(f"{where}: the file ends before the deletion vector does")
        stored_size, = struct.unpack_from(">i", framed, 0)
        data = framed[4:4 + size]
        checksum, = struct.unpack_from(">I", framed, 4 + size)
        if stored_size != size:
            raise CorruptLogError(f"{where}: the file says {stored_size} bytes, the log {size}")
        if zlib.crc32(data) != checksum:
            raise CorruptLogError(f"{where}: checksum mismatch; the deletion vector is damaged")
        bitmap = parse_bitmap(data, where)
    else:
        raise CorruptLogError(f"{where}: unknown storage type {kind!r} (allowed: u, p, i)")
    if dv.get("cardinality") is not None and len(bitmap) != int(dv["cardinality"]):
        raise CorruptLogError(f"{where}: holds {len(bitmap)} rows, the log says {dv['cardinality']}")
    return bitmap


def deleted_rows(store: Any, dv: dict[str, Any] | None) -> np.ndarray:
    """Sorted row indexes a DV deletes (empty for no DV)."""
    if not dv:
        return np.empty(0, np.int64)
    return np.asarray(read_deletion_vector(store, dv).to_array(), dtype=np.int64)


def keep_mask(num_rows: int, deleted: np.ndarray) -> pa.Array:
    """A boolean filter keeping the rows a DV does not delete."""
    keep = np.ones(num_rows, dtype=bool)
    keep[deleted[deleted < num_rows]] = False
    return pa.array(keep)


ENABLE_KEY = DELETION_VECTORS_KEY


def is_enabled(configuration: dict[str, str] | None) -> bool:
    """Whether DML on the table marks rows deleted instead of rewriting files."""
    return flag(configuration, ENABLE_KEY)


def serialize_bitmap(bitmap: Any) -> bytes:
    """A BitMap64 as Delta's RoaringBitmapArray: the magic number, then the portable 64-bit format."""
    bitmap.run_optimize()
    return struct.pack("<i", MAGIC) + bitmap.serialize()


def inline_descriptor(bitmap: Any) -> dict[str, Any]:
    """An inline (`i`) descriptor holding `bitmap`: Z85 of its bytes, zero-padded to whole 4-byte words."""
    data = serialize_bitmap(bitmap)
    padded = data + b"\x00" * (-len(data) % 4)
    return {"storageType": "i", "pathOrInlineDv": z85_encode(padded), "offset": None,
            "sizeInBytes": len(data), "cardinality": len(bitmap)}


def dv_file_path(dv: dict[str, Any] | None) -> str | None:
    """The table-relative path of the file a DV lives in (None: inline, absolute or no DV)."""
    return relative_path(dv) if dv and dv.get("storageType") == "u" else None


def write_deletion_vectors(store: Any, bitmaps: list[Any]) -> tuple[str, list[dict[str, Any]]]:
    """Write the bitmaps into one new DV file; (its relative path, one `u` descriptor per bitmap)."""
    file_id = uuid.uuid4()
    relative = f"deletion_vector_{file_id}.bin"
    encoded_id = z85_encode(file_id.bytes)
    body = bytearray(b"\x01")  # format version
    descriptors = []
    for bitmap in bitmaps:
        data = serialize_bitmap(bitmap)
        descriptors.append({"storageType": "u", "pathOrInlineDv": encoded_id, "offset": len(body),
                            "sizeInBytes": len(data), "cardinality": len(bitmap)})
        body += struct.pack(">i", len(data)) + data + struct.pack(">I", zlib.crc32(data))
    handle = store.open_data_file(relative)
    try:
        handle.write(bytes(body))
    finally:
        store.close_data_file(handle, relative)
    return relative, descriptors


class MarkedRows:
    """The actions that mark rows of some files deleted: for each file a `remove` of it as it was (with
    its old DV) and an `add` of the same path with the union DV, or only the `remove` when no row is
    left. `dv_file` is the new DV file (to delete should the commit fail)."""

    def __init__(self) -> None:
        self.removes: list[Any] = []
        self.adds: list[Any] = []
        self.dv_file: str | None = None
        self.rows = 0            # rows newly marked deleted
        self.files_emptied = 0   # files whose every row is now deleted


def mark_rows(store: Any, marked: list[tuple[Any, Any]], timestamp: int) -> MarkedRows:
    """`marked`: (AddFile, row indexes to delete) pairs. Rows already deleted count once."""
    from pyroaring import BitMap64

    from .paths import absolute_file_path

    out = MarkedRows()
    pending: list[tuple[Any, Any, dict[str, Any]]] = []
    for add, rows in marked:
        old = read_deletion_vector(store, add.deletion_vector) if add.deletion_vector else BitMap64()
        new = old | BitMap64(np.asarray(rows, dtype=np.uint64))
        if len(new) == len(old):
            continue
        stats = json.loads(add.stats) if add.stats else {}
        if stats.get("numRecords") is None:  # the protocol requires it beside a DV: read the footer
            from .storage.files import parquet_metadata
            stats["numRecords"] = parquet_metadata(absolute_file_path(store.table_uri, add.path),
                                                   store.options).num_rows
        out.rows += len(new) - len(old)
        out.removes.append(add.remove(deletion_timestamp=timestamp))
        if len(new) >= int(stats["numRecords"]):
            out.files_emptied += 1
            continue
        stats["tightBounds"] = False  # bounds may now be those of deleted rows: still valid as wide bounds
        pending.append((add, new, stats))
    if pending:
        out.dv_file, descriptors = write_deletion_vectors(store, [bitmap for _, bitmap, _ in pending])
        for (add, _, stats), dv in zip(pending, descriptors):
            out.adds.append(dataclasses.replace(
                add, stats=json.dumps(stats, separators=(",", ":")), deletion_vector=dv, data_change=True))
    return out
