"""What every incremental strategy is given."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List


@dataclass(frozen=True)
class IncrementalWrite:
    spark: Any
    table: Any  # the table's handle (deltalog.DeltaTable)
    name: str  # the model's unique_id, for errors
    model: Any
    config: Any
    df: Any  # the new rows, aligned with the table (on_schema_change applied)
    unique_key: List[str]
    predicates: List[str]  # incremental_predicates
    evolve: bool = False  # merge_with_schema_evolution: the merge grows the table itself
    # what the commit carries besides the data (extra_commit_info, table_schema, app_transactions,
    # read_version), as deltalog.spark.operations takes them
    commit: Dict[str, Any] = field(default_factory=dict)

    @property
    def uri(self) -> str:
        return self.table.uri
