"""Delta deletion vectors as Iceberg v3 deletion vectors (IcebergCompatV3).

An Iceberg v3 deletion vector is a `deletion-vector-v1` blob in a Puffin file: its length (4 bytes,
big-endian), Delta's magic number and the 64-bit Roaring bitmap in the portable format, then the CRC-32
of those (4 bytes, big-endian) -- byte for byte how a Delta DV file frames each of its DVs. Its manifest
entry names the data file it deletes from (`referenced_data_file`) and the blob's place in the Puffin
file (`content_offset`, `content_size_in_bytes`).

The blobs are copied (a few bytes per data file) into one Puffin file per converted Delta version under
`metadata/`, rather than pointed at inside Delta's own DV files: Spark's Iceberg reader would read them
there (it reads only the blob's bytes), but pyiceberg reads a delete file as a whole Puffin file, with its
magic bytes and footer, which a Delta DV file does not have. The data files are shared, as always."""

from __future__ import annotations

import json
import struct
import uuid
import zlib
from typing import Any

from deltalog.lazy_imports import load

load("pyiceberg")  # whole, before any import from it (lazy_imports.py says why)
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat  # noqa: E402

from ..deletion_vectors import read_deletion_vector, serialize_bitmap  # noqa: E402

BLOB_TYPE = "deletion-vector-v1"
ROW_POSITION_FIELD_ID = 2147483645  # Iceberg's reserved `_pos` column, which a DV blob names
PUFFIN_MAGIC = b"PFA1"
PUFFIN_SUFFIX = ".puffin"


def framed_blob(bitmap: Any) -> bytes:
    data = serialize_bitmap(bitmap)
    return struct.pack(">i", len(data)) + data + struct.pack(">I", zlib.crc32(data))


def write_puffin(store: Any, io: Any, folder: str, dvs: list[tuple[DataFile, dict[str, Any]]]) -> list[DataFile]:
    """One Puffin file in `folder` holding the DVs of `dvs` ((the data file, Delta's DV descriptor) pairs);
    one Iceberg delete file per DV, in its data file's partition."""
    body = bytearray(PUFFIN_MAGIC)
    blobs, placed = [], []
    for data_file, descriptor in dvs:
        bitmap = read_deletion_vector(store, descriptor)  # checks size, checksum and cardinality on the way
        blob = framed_blob(bitmap)
        blobs.append({"type": BLOB_TYPE, "fields": [ROW_POSITION_FIELD_ID], "snapshot-id": -1,
                      "sequence-number": -1, "offset": len(body), "length": len(blob),
                      "properties": {"referenced-data-file": data_file.file_path,
                                     "cardinality": str(len(bitmap))}})
        placed.append((data_file, len(body), len(blob), len(bitmap)))
        body += blob
    footer = json.dumps({"blobs": blobs, "properties": {"created-by": "dbt-deltalog"}}).encode()
    body += PUFFIN_MAGIC + footer + struct.pack("<i", len(footer)) + bytes(4) + PUFFIN_MAGIC
    location = f"{folder}/dv-{uuid.uuid4()}{PUFFIN_SUFFIX}"
    with io.new_output(location).create(overwrite=False) as out:
        out.write(bytes(body))
    out_files = []
    for data_file, offset, length, cardinality in placed:
        delete = DataFile.from_args(
            _table_format_version=3, content=DataFileContent.POSITION_DELETES, file_path=location,
            file_format=FileFormat.PUFFIN, partition=data_file.partition, record_count=cardinality,
            file_size_in_bytes=len(body), referenced_data_file=data_file.file_path, content_offset=offset,
            content_size_in_bytes=length)
        delete.spec_id = data_file.spec_id
        out_files.append(delete)
    return out_files
