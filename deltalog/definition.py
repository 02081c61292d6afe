"""What a writer declares about a table besides its rows: properties, description, column comments,
NOT NULL columns and CHECK constraints. Applied to the metadata of the commit that writes the rows
(version 0 included), or on its own to an existing table (`deltalog.spark.operations.alter_table`).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Mapping

from .actions import Metadata
from .constraints import check_constraints, not_null_columns
from .errors import InvalidTableError
from .schema import schema_string

COMMENT_KEY = "comment"  # a column's description, in its field metadata (Spark and delta-rs read it)


@dataclass(frozen=True)
class TableDefinition:
    properties: Mapping[str, str] = field(default_factory=dict)
    # Property prefixes this definition owns: a property under one of them that `properties` lacks is
    # removed (a CHECK constraint dropped from the model is dropped from the table).
    owned_prefixes: tuple[str, ...] = ()
    description: str | None = None      # None: leave the table's description as it is
    column_comments: Mapping[str, str] = field(default_factory=dict)  # '' removes; unknown columns are skipped
    not_null: tuple[str, ...] = ()      # columns that must be NOT NULL (others are left as they are)
    clustering: tuple[str, ...] | None = None  # liquid clustering columns (() = none); None: leave as is

    def apply_clustering(self, txn) -> bool:
        """Set the clustering columns in the transaction (after its metadata); whether that changed."""
        if self.clustering is None:
            return False
        from .clustering import set_clustering

        return set_clustering(txn, self.clustering)

    def apply(self, metadata: Metadata, table: str) -> Metadata:
        """The metadata with this definition applied (the same object when nothing changes)."""
        conf = {k: v for k, v in metadata.configuration.items()
                if not any(k.startswith(p) for p in self.owned_prefixes)}
        conf.update({str(k): str(v) for k, v in self.properties.items()})
        schema = metadata.schema_json
        fields = {f["name"].lower(): f for f in schema.get("fields", [])}
        missing = [n for n in self.not_null if n.lower() not in fields]
        if missing:
            raise InvalidTableError(
                f"{table}: NOT NULL is declared for column(s) {missing} that the table does not have; its "
                f"columns: {[f['name'] for f in schema.get('fields', [])]}.")
        for name, comment in self.column_comments.items():
            f = fields.get(name.lower())
            if f is None:
                continue  # documented but not (or no longer) a column: nothing to comment
            meta = dict(f.get("metadata") or {})
            if comment:
                meta[COMMENT_KEY] = comment
            else:
                meta.pop(COMMENT_KEY, None)
            f["metadata"] = meta
        for name in self.not_null:
            fields[name.lower()]["nullable"] = False
        new_schema = schema_string(schema)
        description = metadata.description if self.description is None else (self.description or None)
        if (conf == metadata.configuration and new_schema == schema_string(metadata.schema_json)
                and description == metadata.description):
            return metadata
        return replace(metadata, configuration=conf, schema_string=new_schema, description=description)


def added_checks(before: Metadata | None, after: Metadata) -> list[str]:
    """What rows already in the table must satisfy for `after` to hold, as readable names: CHECK
    constraints new or changed, and columns that became NOT NULL (empty for a new table)."""
    if before is None:
        return []
    old = {c.name: c.expression for c in check_constraints(before.configuration)}
    new = [c for c in check_constraints(after.configuration) if old.get(c.name) != c.expression]
    was_not_null = set(not_null_columns(before.schema_json))
    return [c.name for c in new] + [f"NOT NULL {n}" for n in not_null_columns(after.schema_json)
                                    if n not in was_not_null]


def describe_change(before: Metadata, after: Metadata) -> str:
    """The operation name Delta gives such a metadata change, for the commit's history."""
    if check_constraints(before.configuration) != check_constraints(after.configuration):
        return "ADD CONSTRAINT" if len(check_constraints(after.configuration)) >= len(
            check_constraints(before.configuration)) else "DROP CONSTRAINT"
    if before.schema_string != after.schema_string:
        return "CHANGE COLUMN"
    return "SET TBLPROPERTIES"


def changed_properties(before: Metadata, after: Metadata) -> str:
    changed = {k: v for k, v in after.configuration.items() if before.configuration.get(k) != v}
    return json.dumps(changed, separators=(",", ":"))

