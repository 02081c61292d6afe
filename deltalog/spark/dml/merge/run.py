"""What a MERGE's phases hand each other: the request and the table (set once), then what each phase
finds. Each phase module says which fields it reads and which it sets."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from .plan import MergePlan, Phases


@dataclass
class MergeRun:
    # -- the request and the table
    spark: Any
    txn: Any
    plan: MergePlan
    name: str                                 # the table, as errors name it
    source_alias: str
    target_alias: str
    schema_json: dict[str, Any]               # the table's schema after this merge
    target_schema: Any                        # the same, as a Spark StructType
    stored: dict[str, Any]                    # lower-case column -> type its files hold (new columns: absent)
    source: Any                               # the source with SOURCE_ID, cached
    phases: Phases
    started: float
    method: str = "native"
    unique_keys: dict[str, str] | None = None
    unique_keys_where: str | None = None

    # -- candidates.py: the source's key bounds and the files they may match
    keys: list[tuple[str, str]] = field(default_factory=list)  # (source column, target column) equi-keys
    num_source: int = 0
    small_source: bool = False                # the source fits a broadcast
    candidates: pa.Table | None = None        # rows of snapshot.files the merge reads

    # -- match.py: the matched rows and the files they are in
    src: Any = None                           # the source, aliased
    file_keys: Any = None
    touched: pa.Table | None = None           # rows of snapshot.files the merge changes
    n_updated: int = 0
    n_deleted: int = 0
    n_by_source_updated: int = 0
    n_by_source_deleted: int = 0
    late_update: set = field(default_factory=set)  # updated columns set from the source after the match
    update: dict | None = None                # the update's assignments as the new rows take them (the plan's;
                                              # matched on the driver, with the key columns it leaves out)
    on_driver: Any = None                     # the driver's match, when it applied
    driver_marks: list = field(default_factory=list)
    each_source_row_once: bool = False        # an upsert whose every row updates one target row
    keep_ids: bool = False                    # row tracking: rewritten rows keep their row IDs
    hidden: list[str] = field(default_factory=list)  # the materialized row-ID and commit-version columns
    matched_rows: Any = None                  # cached: matched pairs (file, row, action, new values, SOURCE_ID)
    acting: Any = None                        # the matched and by-source rows a clause acts on
    hit_rows: pa.Table | None = None          # merge-on-read: acting's positions, on the driver

    # -- rewrite.py: the new content
    parts: list = field(default_factory=list)  # DataFrames whose union is written
    updated: Any = None                       # the updated rows (for the change feed)
    deleted: Any = None                       # the deleted rows (for the change feed)
    old_cols: list = field(default_factory=list)  # a changed row's columns before
    out_cols: list = field(default_factory=list)  # and after
    inserts: Any = None                       # the inserted rows
    identity: Any = None                      # their identity values (writer.IdentityNumbering), if numbered

    @property
    def snapshot(self) -> Any:
        return self.txn.snapshot

    @property
    def writes_feed_files(self) -> bool:
        """The commit writes change data files: the feed is on and rows of the table's files changed (an
        insert-only commit's feed is its added files)."""
        return bool(self.plan.feed and self.touched.num_rows)

    @property
    def target_columns(self) -> list[str]:
        return [f.name for f in self.target_schema.fields]
