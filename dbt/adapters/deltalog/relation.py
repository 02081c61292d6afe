"""A relation renders as ONE backquoted name, `schema.table` (`catalog.schema.table` when its dbt
`database` names a catalog the profile attaches): the session temporary view that serves the table's
latest snapshot (temporary views accept only one-part names)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Optional

from dbt.adapters.base.relation import Policy
from dbt.adapters.spark.relation import SparkRelation

from dbt.adapters.deltalog.warehouse import UnknownCatalogError, external_key
from dbt.adapters.deltalog.model_config import _get
from dbt.adapters.deltalog.runtime.session import RUNTIME

# Where a source may name the location of its Delta table (dbt-duckdb and dbt-external-tables spellings).
_LOCATION_KEYS = (("meta", "location"), ("meta", "external_location"), ("config", "external_location"),
                  ("config", "meta", "location"), ("external", "location"))


def source_location(source: Any) -> Optional[str]:
    """The location a source declares for its Delta table, or None (a table of the warehouse)."""
    for path in _LOCATION_KEYS:
        value = source
        for key in path:
            value = _get(value, key)
        if isinstance(value, str) and value.strip():
            return value.strip()
    return None


@dataclass
class DeltalogIncludePolicy(Policy):
    database: bool = True  # an attached catalog's name; None for the profile's own warehouse
    schema: bool = True
    identifier: bool = True


@dataclass(frozen=True, eq=False, repr=False)
class DeltalogRelation(SparkRelation):
    include_policy: Policy = field(default_factory=lambda: DeltalogIncludePolicy())

    def __post_init__(self) -> None:
        # dbt-spark refuses any database; ours names an attached catalog (or, as dbt-spark allows, the
        # schema itself: `create` turns that into none)
        if self.database and self.database not in RUNTIME.catalog_names:
            raise UnknownCatalogError(self.database, RUNTIME.catalog_names, f"{self.schema}.{self.identifier}: ")

    @classmethod
    def create(cls, database: Optional[str] = None, schema: Optional[str] = None, identifier: Optional[str] = None,
               type: Any = None, **kwargs: Any):
        if database and database == schema and database not in RUNTIME.catalog_names:
            database = None  # dbt-spark's way to say "no catalog"
        return super().create(database=database, schema=schema, identifier=identifier, type=type, **kwargs)

    @classmethod
    def create_from(cls, quoting: Any, relation_config: Any, **kwargs: Any):
        """As dbt builds it; a source with a location becomes a known external Delta table."""
        relation = super().create_from(quoting, relation_config, **kwargs)
        kind = getattr(relation_config, "resource_type", None)
        if str(getattr(kind, "value", kind)) == "source":
            location = source_location(relation_config)
            metastore = RUNTIME.metastores.get(relation.database or None)
            if location is None and metastore is not None and relation.schema and relation.identifier:
                # registered by someone else: the metastore knows where (None for a view or no entry)
                location = metastore.location(relation.schema, relation.identifier)
            if location is not None:
                if "://" not in location and not location.startswith("/"):
                    location = os.path.abspath(os.path.join(RUNTIME.project_root or ".", os.path.expanduser(location)))
                key = external_key(relation.database or None, relation.schema, relation.identifier)
                RUNTIME.external_tables[key] = location
        return relation

    def render(self) -> str:
        schema = self.schema if self.include_policy.schema else None
        identifier = self.identifier if self.include_policy.identifier else None
        parts = [p for p in (schema, identifier) if p]
        if not parts:
            return ""
        database = self.database if self.include_policy.database else None
        return "`" + ".".join([database] + parts if database else parts) + "`"

    @property
    def view_name(self) -> str:
        """The temporary view's name, unquoted."""
        return ".".join(p for p in (self.database, self.schema, self.identifier) if p)
