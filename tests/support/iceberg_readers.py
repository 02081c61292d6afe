"""Reading a table of ours as Iceberg, for the tests: pyiceberg on the newest metadata file, on each
snapshot (the Delta version it names), and through a SQLite catalog after `register_table`; every
comparison is against delta-rs on the same Delta version, row for row."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import deltalake
import pyarrow as pa


def _normal(value):
    if isinstance(value, dict):
        return tuple(sorted((k, _normal(v)) for k, v in value.items()))
    if isinstance(value, list):
        # a map arrives from delta-rs and pyiceberg as a list of (key, value) pairs
        return tuple(_normal(v) for v in value)
    if isinstance(value, tuple):
        return tuple(_normal(v) for v in value)
    if isinstance(value, dt.datetime) and value.tzinfo is not None:
        return value.astimezone(dt.timezone.utc)
    if isinstance(value, float) and value != value:
        return "NaN"
    return value


def rows(table: pa.Table) -> list:
    """The rows, columns in name order, as sorted comparable tuples."""
    names = sorted(table.column_names)
    return sorted((tuple(_normal(r[n]) for n in names) for r in table.to_pylist()), key=repr)


def delta_rows(path: str | Path, version: int | None = None) -> list:
    table = deltalake.DeltaTable(str(path), version=version)
    return rows(pa.table(deltalake.QueryBuilder().register("t", table).execute("select * from t").read_all()))


def iceberg_table(path: str | Path, number: int | None = None):
    from pyiceberg.table import StaticTable

    location = str(path) if number is None else f"{path}/metadata/v{number}.metadata.json"
    return StaticTable.from_metadata(location)


def iceberg_rows(table, snapshot_id: int | None = None, row_filter=None) -> list:
    scan = table.scan(snapshot_id=snapshot_id, **({"row_filter": row_filter} if row_filter is not None else {}))
    return rows(scan.to_arrow())


def assert_every_snapshot_matches_delta(path: str | Path) -> int:
    """The newest metadata names the table's latest Delta version, and every Iceberg snapshot reads as the
    Delta version it names. Returns the number of snapshots compared."""
    table = iceberg_table(path)
    latest = deltalake.DeltaTable(str(path)).version()
    assert int(table.metadata.properties["delta-version"]) == latest, (path, table.metadata.properties)
    assert iceberg_rows(table) == delta_rows(path), f"{path}: latest Iceberg snapshot differs from Delta"
    for snapshot in table.metadata.snapshots:
        version = int(snapshot.summary["delta-version"])
        assert iceberg_rows(table, snapshot.snapshot_id) == delta_rows(path, version), \
            f"{path}: Iceberg snapshot of Delta version {version} differs"
    return len(table.metadata.snapshots)


def registered_rows(path: str | Path, name: str, tmp_dir: Path) -> list:
    """The table registered by name in a SQLite-backed pyiceberg catalog, then read through it."""
    from pyiceberg.catalog.sql import SqlCatalog

    table = iceberg_table(path)
    catalog = SqlCatalog("tests", uri=f"sqlite:///{tmp_dir / 'catalog.db'}", warehouse=str(tmp_dir))
    catalog.create_namespace_if_not_exists("analytics")
    registered = catalog.register_table(("analytics", name), table.metadata_location)
    return iceberg_rows(registered)


def _scheme_strict_file_io():
    from pyiceberg.io.pyarrow import PyArrowFileIO

    class SchemeStrictFileIO(PyArrowFileIO):
        """pyiceberg's file IO refusing a location without a file system scheme (`file:///...`,
        `s3://...`), as Trino's native file systems do ("No factory for location")."""

        @staticmethod
        def _check(location: str) -> str:
            assert "://" in location, f"{location}: no file system scheme"
            return location

        def new_input(self, location: str):
            return super().new_input(self._check(location))

        def new_output(self, location: str):
            return super().new_output(self._check(location))

        def delete(self, location) -> None:
            super().delete(self._check(location if isinstance(location, str) else location.location))

    return SchemeStrictFileIO


def strict_iceberg_table(metadata_location: str):
    """The table of a metadata file, read through a file IO that refuses any location without a scheme."""
    from pyiceberg.table import StaticTable

    return StaticTable.from_metadata(metadata_location,
                                     properties={"py-io-impl": f"{__name__}.SchemeStrictFileIO"})


def __getattr__(name: str):
    if name == "SchemeStrictFileIO":  # made on first use: pyiceberg is imported by the tests that use it
        return _scheme_strict_file_io()
    raise AttributeError(name)
