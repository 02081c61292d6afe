"""A relation renders as ONE backquoted name, `schema.table`: the session temporary view that
serves the table's latest snapshot (temporary views accept only one-part names)."""

from __future__ import annotations

from dataclasses import dataclass

from dbt.adapters.spark.relation import SparkRelation


@dataclass(frozen=True, eq=False, repr=False)
class DeltalogRelation(SparkRelation):
    def render(self) -> str:
        schema = self.schema if self.include_policy.schema else None
        identifier = self.identifier if self.include_policy.identifier else None
        parts = [p for p in (schema, identifier) if p]
        if not parts:
            return ""
        return "`" + ".".join(parts) + "`"

    @property
    def view_name(self) -> str:
        """The temporary view's name, unquoted."""
        return ".".join(p for p in (self.schema, self.identifier) if p)
