from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Optional

from dbt.adapters.spark.column import SparkColumn


@dataclass
class DeltalogColumn(SparkColumn):
    """Spark SQL types (`bigint`, `decimal(10,2)`, `array<string>`) as Delta's schema declares them."""

    def __repr__(self) -> str:
        return "<DeltalogColumn {} ({})>".format(self.name, self.data_type)


def column_of(relation: Any, index: int, name: str, dtype: str, stats: Optional[Dict[str, Any]] = None) -> DeltalogColumn:
    """A column of `relation` as dbt lists it (the docs catalog adds the table's `stats`)."""
    return DeltalogColumn(
        table_database=relation.database or None,
        table_schema=relation.schema,
        table_name=relation.identifier,
        table_type=relation.type,
        column_index=index,
        column=name,
        dtype=dtype,
        table_stats=stats,
    )
