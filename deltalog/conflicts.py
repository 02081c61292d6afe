"""The conflict rules: whether a commit that lost the race for a version may still land after a winner.

A transaction that lost a version checks every commit that landed since it read the table, in
delta-spark's order (PROTOCOL-NOTES.md): protocol, metadata, domain metadata, application transactions,
files added to what it read, files removed that it read, files removed by both. A conflict raises the
exception Delta names, saying what clashed and what to do. Otherwise the commit goes on at the next free
version, maybe after moving its deletion-vector marks onto the winner's files (`row_level_concurrency`):
the rules here say when, `row_level_concurrency` does it.

`ReadSet` is what a transaction read; `Attempt` what it is committing, as the rules see it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from . import deletion_vectors, identity, row_tracking
from .actions import Action, AddFile, DomainMetadata, Metadata, RemoveFile
from .committer import WinningCommit, path_key
from .errors import (
    ConcurrentAppendException, ConcurrentDeleteDeleteException, ConcurrentDeleteReadException,
    ConcurrentModificationError, ConcurrentTransactionException, MetadataChangedException,
    ProtocolChangedException,
)
from .table_configuration import ISOLATION_LEVEL_KEY, SERIALIZABLE, WRITE_SERIALIZABLE

SEPARATE = ("Partition the table and give each writer explicit predicates on the partition columns so they "
            "touch disjoint files, or retry the operation.")


@dataclass
class ReadSet:
    """What a transaction's result depends on: the whole table, files (by log path key), partition or
    data predicates (objects with `matches_partition`, maybe `matches_file`, or callables taking the
    partition values), and application transaction ids."""

    whole_table: bool = False
    paths: set[str] = field(default_factory=set)
    predicates: list[Any] = field(default_factory=list)
    app_ids: set[str] = field(default_factory=set)

    @property
    def anything(self) -> bool:
        return self.whole_table or bool(self.paths) or bool(self.predicates)

    def first_add_read(self, adds: list[AddFile], level: str, partitioned: bool) -> AddFile | None:
        """The first of `adds` that this transaction should have seen, by what it read."""
        # Having read the whole table or files without saying which rows (no predicate), any new row may
        # have changed what this transaction read. At WriteSerializable, predicates over data columns
        # are judged by the added file's min/max statistics too (a file without them may match
        # anything), so writers of disjoint windows of an unpartitioned table both land; Serializable
        # keeps Delta's partition-level rule.
        by_stats = level == WRITE_SERIALIZABLE and all(hasattr(p, "matches_file") for p in self.predicates)
        if self.whole_table or not self.predicates or (not partitioned and not by_stats):
            return adds[0]
        for add in adds:
            if any(p.matches_file(add.partition_values, add.stats) if by_stats
                   else _matches_partition(p, add.partition_values) for p in self.predicates):
                return add
        return None


@dataclass(frozen=True)
class Attempt:
    """A commit being tried, as the conflict rules see it."""

    table_uri: str
    read_version: int
    store: Any
    snapshot: Any                 # the snapshot it read (None when it creates the table)
    metadata: Metadata | None     # the metadata it commits under
    changes_metadata: bool
    actions: list[Action]         # its file, transaction and domain actions
    is_blind_append: bool
    row_level: bool               # the table marks rows in DVs at WriteSerializable
    rows_keep_ids: bool           # a rewrite that wrote its rows' IDs into the new files (OPTIMIZE)
    may_carry_marks: bool         # a rewrite that may take a winner's marks into its new files

    @property
    def removes(self) -> dict[str, RemoveFile]:
        return {path_key(a.path): a for a in self.actions if isinstance(a, RemoveFile)}

    @property
    def rearranges_rows(self) -> bool:
        """Whether it only moves rows to new files, each keeping its row ID (OPTIMIZE with row tracking)."""
        files = [a for a in self.actions if isinstance(a, (AddFile, RemoveFile))]
        return self.rows_keep_ids and bool(files) and not any(a.data_change for a in files)

    def marked_files(self) -> dict[str, tuple[RemoveFile, AddFile]]:
        """The files it marks rows of: their remove (old DV) and add (new DV), by key."""
        removes = self.removes
        return {path_key(a.path): (removes[path_key(a.path)], a) for a in self.actions
                if isinstance(a, AddFile) and a.deletion_vector and path_key(a.path) in removes}


@dataclass
class Resolution:
    """How a commit that the rules let through goes on after a winner. `rebase`: for files both marked
    rows of (different rows), the winner's add and the union of both writers' deleted rows.
    `carried`: keys of files whose marks move by row ID to the files that now hold the rows (maybe
    none), or None when no carrying applies. `identity_marks_moved`: the winner's only metadata change was
    identity high-water marks (the attempt's generated values move past them)."""

    rebase: dict[str, tuple[AddFile, Any]] = field(default_factory=dict)
    carried: list[str] | None = None
    identity_marks_moved: bool = False


def conflict(cls: type[ConcurrentModificationError], attempt: Attempt, winner: WinningCommit, what: str,
             advice: str) -> ConcurrentModificationError:
    """The exception for a conflict: which winner, what clashed, that nothing was committed, what to do."""
    return cls(
        f"{cls.__name__}: {attempt.table_uri}: {what} by a concurrent {winner.operation} committed as "
        f"version {winner.version} (this transaction read version {attempt.read_version}). Nothing was "
        f"committed. {advice}",
        winning_version=winner.version, winning_operation=winner.operation,
        winner_changed_data=winner.changes_data, row_level=attempt.row_level)


def check(attempt: Attempt, read: ReadSet, winner: WinningCommit, level: str) -> Resolution:
    """Raises the conflict `winner` makes for `attempt` at isolation `level`, if any; else says how the
    attempt goes on."""
    # 1. protocol: also two writers creating version 0.
    if winner.protocol is not None or (attempt.read_version < 0 and winner.metadata is not None):
        if attempt.read_version < 0:
            raise conflict(ProtocolChangedException, attempt, winner, "the table was created concurrently",
                           "Retry: the operation will then write to the existing table.")
        raise conflict(ProtocolChangedException, attempt, winner, "the table protocol was changed",
                       "Retry against the new protocol.")
    # 2. metadata: conservative, any winning metaData conflicts, but one that only moved identity
    # high-water marks, against an attempt that changes no other metadata: its generated values move.
    marks_moved = winner.metadata is not None and _only_identity_marks(attempt, winner)
    if winner.metadata is not None and not marks_moved:
        raise conflict(MetadataChangedException, attempt, winner,
                       "the table metadata (schema, partitioning or properties) was changed",
                       "Retry so that the operation sees the new metadata.")
    # 3. domain metadata written by both.
    ours = {a.domain for a in attempt.actions if isinstance(a, DomainMetadata)}
    clash = sorted(ours & {d.domain for d in winner.domains})
    if clash:
        raise conflict(ConcurrentTransactionException, attempt, winner, f"domain metadata {clash} was also written",
                       "Retry the operation.")
    # 4. application transactions this transaction depends on.
    clash = sorted(read.app_ids & {t.app_id for t in winner.txns})
    if clash:
        raise conflict(ConcurrentTransactionException, attempt, winner,
                       f"application transaction {clash} was committed",
                       "The same job (app id) ran twice at once; run it once, then retry.")
    partitioned = bool(attempt.metadata and attempt.metadata.partition_columns)
    # 5. files added that this transaction should have read.
    if level == SERIALIZABLE:
        candidates = winner.adds
    elif level == WRITE_SERIALIZABLE:
        candidates = [] if (winner.is_blind_append and not attempt.changes_metadata) else winner.adds
    else:
        candidates = []
    # A dataChange=false add only rewrites rows of files it removes, and a file added back with a DV
    # holds no new row: rule 6 covers those.
    candidates = [a for a in candidates if a.data_change and path_key(a.path) not in winner.marked]
    if candidates and not attempt.is_blind_append:
        hit = read.first_add_read(candidates, level, partitioned)
        if hit is not None:
            advice = SEPARATE
            if level == SERIALIZABLE and winner.is_blind_append:
                advice += (f" At {WRITE_SERIALIZABLE} ({ISOLATION_LEVEL_KEY}) a concurrent blind append does "
                           f"not conflict.")
            raise conflict(ConcurrentAppendException, attempt, winner,
                           f"files were added to data this transaction read (e.g. {hit.path!r}, partition "
                           f"{hit.partition_values})", advice)
    # Row-level concurrency (WriteSerializable, deletion vectors): rows the winner marked deleted in a
    # file are not rows this transaction read unless it changed that file too; then rule 7 compares the
    # rows both marked.
    by_row = level == WRITE_SERIALIZABLE and not read.whole_table
    # OPTIMIZE against DML on a table whose rows keep their IDs: rules 6 and 7 are met by carrying.
    carried = _carried_files(attempt, read, winner)
    if carried is not None:
        return Resolution(carried=carried, identity_marks_moved=marks_moved)
    # 6. files removed that this transaction read.
    if winner.removes:
        if read.whole_table:
            hit_path = winner.removes[0].path
        else:
            hit_path = next((r.path for r in winner.removes if path_key(r.path) in read.paths
                             and not (by_row and path_key(r.path) in winner.marked)), None)
        if hit_path is not None:
            # delta-spark checks added files first and counts a rewrite's (dataChange=false) adds among
            # them: where those fall in what this transaction read by predicate, it names the conflict
            # ConcurrentAppendException, and so do we (the outcome is a conflict either way).
            rewritten = [a for a in winner.adds if not a.data_change]
            if (rewritten and level in (SERIALIZABLE, WRITE_SERIALIZABLE) and not attempt.is_blind_append
                    and (read.whole_table or read.predicates)):
                hit = read.first_add_read(rewritten, level, partitioned)
                if hit is not None:
                    raise conflict(ConcurrentAppendException, attempt, winner,
                                   f"files read by this transaction were rewritten into data it read (e.g. "
                                   f"{hit.path!r}, partition {hit.partition_values})", SEPARATE)
            raise conflict(ConcurrentDeleteReadException, attempt, winner,
                           f"a file this transaction read was removed ({hit_path!r})", SEPARATE)
    # 7. files removed by both: a conflict, unless both only marked rows of it, and different rows.
    our_removes = attempt.removes
    ours_marked = attempt.marked_files()
    rebase: dict[str, tuple[AddFile, Any]] = {}
    for r in winner.removes:
        k = path_key(r.path)
        if k not in our_removes:
            continue
        if by_row and k in winner.marked and k in ours_marked:
            ours = _rows_newly_marked(attempt.store, *ours_marked[k])
            theirs = deletion_vectors.read_deletion_vector(attempt.store, winner.marked[k].deletion_vector)
            same = list((ours & theirs).to_array())
            if not same:
                rebase[k] = (winner.marked[k], theirs | ours)
                continue
            raise conflict(ConcurrentDeleteDeleteException, attempt, winner,
                           f"rows this transaction also deletes or updates were deleted or updated (file "
                           f"{r.path!r}, {len(same)} row(s), e.g. row {same[0]})",
                           "Retry the operation: it will then see the rows as they are now.")
        raise conflict(ConcurrentDeleteDeleteException, attempt, winner,
                       f"a file this transaction also removes was removed ({r.path!r})",
                       SEPARATE + (f" At {WRITE_SERIALIZABLE}, writers that mark different rows of a file in "
                                   f"deletion vectors ({deletion_vectors.ENABLE_KEY}) both land."
                                   if level == WRITE_SERIALIZABLE else ""))
    return Resolution(rebase=rebase, identity_marks_moved=marks_moved)


def _only_identity_marks(attempt: Attempt, winner: WinningCommit) -> bool:
    """The winner's metadata differs from what the attempt read only in identity high-water marks, and
    the attempt's own metadata (if it writes one) too."""
    read = attempt.snapshot.metadata if attempt.snapshot is not None else None
    if read is None or not identity.only_marks_differ(read, winner.metadata):
        return False
    return not attempt.changes_metadata or identity.only_marks_differ(read, attempt.metadata)


def _carried_files(attempt: Attempt, read: ReadSet, winner: WinningCommit) -> list[str] | None:
    """Row-level concurrency across a rewrite. When one side only moved rows to new files keeping their
    row IDs (OPTIMIZE) and the other marked or removed rows of files the first rewrote, the later one
    need not run again: the rows are found in the new files by row ID, and the marks carried there
    (`row_level_concurrency.carry_marks`). That is a serial order of the two, as the rewrite changes no
    row a reader sees. Returns the keys of the files both removed (maybe none) where this applies, else
    None: the usual rules decide."""
    md = attempt.metadata
    protocol = attempt.snapshot.protocol if attempt.snapshot is not None else None
    if (md is None or not attempt.row_level or not row_tracking.is_active(protocol, md.configuration)
            or row_tracking.materialized_fields(md.configuration) is None):
        return None
    we_rearrange = attempt.rearranges_rows
    they_rearrange = not winner.changes_data and winner.kept_row_ids
    if we_rearrange == they_rearrange:  # two rewrites of the same rows, or DML against DML
        return None
    if we_rearrange and not attempt.may_carry_marks:
        return None
    ours = attempt.removes
    theirs = {path_key(r.path): r for r in winner.removes}
    shared = [k for k in theirs if k in ours]
    # both must have seen the same rows of each file (a third commit between would differ)
    if any(_dv_id(ours[k]) != _dv_id(theirs[k]) for k in shared):
        return None
    if we_rearrange and (read.whole_table or any(k in read.paths and k not in ours for k in theirs)):
        return None
    return shared


def _rows_newly_marked(store: Any, remove: RemoveFile, add: AddFile) -> Any:
    """The rows a transaction newly marks deleted in one file (its new DV less its old one)."""
    from pyroaring import BitMap64

    old = deletion_vectors.read_deletion_vector(store, remove.deletion_vector) if remove.deletion_vector \
        else BitMap64()
    return deletion_vectors.read_deletion_vector(store, add.deletion_vector) - old


def _dv_id(a: AddFile | RemoveFile) -> str | None:
    return deletion_vectors.unique_id(a.deletion_vector) if a.deletion_vector else None


def _matches_partition(predicate: Any, partition_values: dict[str, str | None]) -> bool:
    if hasattr(predicate, "matches_partition"):
        return bool(predicate.matches_partition(partition_values))
    return bool(predicate(partition_values))
