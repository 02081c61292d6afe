from __future__ import annotations

from dataclasses import dataclass

from dbt.adapters.spark.column import SparkColumn


@dataclass
class DeltalogColumn(SparkColumn):
    """Spark SQL types (`bigint`, `decimal(10,2)`, `array<string>`) as Delta's schema declares them."""

    def __repr__(self) -> str:
        return "<DeltalogColumn {} ({})>".format(self.name, self.data_type)
