"""`WritePlan`: a write request (mode, partitioning, what it replaces, schema mode, idempotency), checked
once and shared by both writers (the Arrow writer, `write.py`, and the Spark writer,
`spark/dml/write.py`), with the one rule set for what the table looks like after the write: its
schema (`schema_evolution`), partition columns and properties. The same table accepts or refuses the
same write whichever writer makes it."""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Sequence

from .column_mapping import MODE as MAPPING_MODE, is_mapped
from .errors import InvalidTableError, SchemaMismatchError
from .schema import find_field, partition_column_types
from .identity import declares_identity
from .schema_evolution import SCHEMA_MODES, WRITE_MODES, check_append_schema, checked_table_schema, evolved_schema

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class WritePlan:
    """A write's request, checked, and what it does to the table: which of its rows it replaces and
    how schema and partitioning follow. The writers read every branch here."""

    mode: str                                 # append | overwrite | error | errorifexists | ignore
    partition_by: tuple[str, ...] | None
    replace_where: Any                        # overwrite the rows matching this predicate (None: no)
    overwrite_partitions: bool                # overwrite the partitions the data lands in
    schema_mode: str | None                   # None | merge | overwrite
    app_transaction: tuple[str, int] | None   # an idempotent write: (app id, version)

    @classmethod
    def of(cls, table: str, mode: str | None, partition_by: Sequence[str] | str | None = None,
           replace_where: Any = None, overwrite_partitions: bool = False, schema_mode: str | None = None,
           txn_app_id: str | None = None, txn_version: int | None = None, default_mode: str = "append") -> "WritePlan":
        mode = (mode or default_mode).lower()
        if mode not in WRITE_MODES:
            raise ValueError(f"{table}: write mode {mode!r} is not one of {', '.join(WRITE_MODES)}.")
        if schema_mode not in SCHEMA_MODES:
            raise ValueError(f"{table}: schema_mode {schema_mode!r} is not one of None, 'merge', 'overwrite'.")
        if (txn_app_id is None) != (txn_version is None):
            raise ValueError(f"{table}: an idempotent write needs both txn_app_id and txn_version (got "
                             f"txn_app_id={txn_app_id!r}, txn_version={txn_version!r}).")
        if txn_version is not None and (isinstance(txn_version, bool) or not isinstance(txn_version, int)
                                        or txn_version < 0):
            raise ValueError(f"{table}: txn_version must be a whole number >= 0, got {txn_version!r}.")
        if (replace_where is not None or overwrite_partitions) and mode != "overwrite":
            raise ValueError(f"{table}: replace_where (a predicate) and overwrite_partitions need "
                             f"mode='overwrite' (got {mode!r}).")
        if replace_where is not None and overwrite_partitions:
            raise ValueError(f"{table}: use either replace_where or overwrite_partitions, not both.")
        if schema_mode == "overwrite" and mode != "overwrite":
            raise ValueError(f"{table}: schema_mode='overwrite' needs mode='overwrite'.")
        if isinstance(partition_by, str):
            partition_by = [partition_by]
        return cls(mode=mode, partition_by=None if partition_by is None else tuple(partition_by),
                   replace_where=replace_where, overwrite_partitions=bool(overwrite_partitions),
                   schema_mode=schema_mode,
                   app_transaction=None if txn_app_id is None else (txn_app_id, txn_version))

    @property
    def replaces_all(self) -> bool:
        """Every row of the table goes (a plain overwrite)."""
        return self.mode == "overwrite" and self.replace_where is None and not self.overwrite_partitions

    @property
    def replaces_schema(self) -> bool:
        return self.schema_mode == "overwrite" and self.replaces_all

    def layout(self, name: str, snapshot: Any, data_schema: dict[str, Any], configuration: dict[str, str] | None,
               table_schema: dict[str, Any] | None = None) -> tuple[dict[str, Any], list[str], dict[str, str]]:
        """(schema, partition columns, properties) of the existing table after this write. `table_schema`:
        the schema the caller decided (dbt's on_schema_change), checked here against the table and data."""
        parts = list(snapshot.partition_columns)
        current = snapshot.schema_json
        conf = {**snapshot.configuration, **{str(k): str(v) for k, v in (configuration or {}).items()}}
        if self.replaces_schema:
            if table_schema is not None and declares_identity(table_schema):
                data_schema = table_schema  # the replaced table declares columns the data leaves out
            if self.partition_by is not None:
                parts = partition_names(data_schema, self.partition_by, name)
            else:  # the table's partitioning, when the new data still has its columns
                parts = partition_names(data_schema, parts, name) if all(
                    find_field(data_schema, p) for p in parts) else []
            return data_schema, parts, conf
        if self.partition_by and [c.lower() for c in self.partition_by] != [c.lower() for c in parts]:
            raise InvalidTableError(
                f"{name}: the table is partitioned by {parts}, not {list(self.partition_by)}. Write with the "
                f"table's partitioning, or overwrite it with schema_mode='overwrite' to change it.")
        if table_schema is not None:
            schema_json = checked_table_schema(name, current, table_schema, parts)
            check_append_schema(name, schema_json, data_schema)
            return schema_json, parts, mapped_if_dropping(name, conf, current, schema_json)
        if self.schema_mode == "merge":
            return evolved_schema(name, current, data_schema), parts, conf
        check_append_schema(name, current, data_schema)
        return current, parts, conf


def partition_names(schema_json: dict[str, Any], partition_by: Sequence[str], table: str) -> list[str]:
    """Partition column names spelled as in the schema; each must exist and be primitive."""
    out = []
    for c in partition_by:
        f = find_field(schema_json, c)
        if f is None:
            raise SchemaMismatchError(
                f"{table}: partition column '{c}' is not a column of the data; columns are "
                f"{', '.join(x['name'] for x in schema_json['fields'])}.")
        out.append(f["name"])
    partition_column_types(schema_json, out, table)
    if len(set(c.lower() for c in out)) != len(out):
        raise InvalidTableError(f"{table}: partition columns {out} repeat a column.")
    if out and len(out) == len(schema_json["fields"]):
        raise InvalidTableError(
            f"{table}: every column is a partition column ({out}); Delta needs at least one data column.")
    return out


def mapped_if_dropping(table: str, conf: dict[str, str], current: dict[str, Any],
                       new: dict[str, Any]) -> dict[str, str]:
    """The table's properties for a commit that drops columns while old files keep them. Without column
    mapping, a column of the same name added later would read the old values back from those files; so
    the drop turns column mapping on (`name` mode, in the same commit, no file rewritten: the columns
    keep their names as physical names, and a column added later gets a new one)."""
    dropped = {f["name"].lower() for f in current["fields"]} - {f["name"].lower() for f in new["fields"]}
    if not dropped or is_mapped(conf):
        return conf
    log.warning("%s: dropping column(s) %s turns on column mapping (delta.columnMapping.mode=name) so that "
                "their old values can never come back; readers need column mapping support (delta-rs, "
                "Spark with Delta 1.2+, DuckDB and polars have it).", table, sorted(dropped))
    return {**conf, MAPPING_MODE: "name"}
