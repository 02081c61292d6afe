"""Optimistic transactions: record what was read, commit with put-if-absent, check conflicts, retry.

A transaction starts at a snapshot (or at none, to create version 0). It records what it read —
the whole table, specific files, partition predicates, application transaction ids — and the actions
it will write. `commit()` creates `%020d.json` at read_version + 1 with put-if-absent. When another
writer won that version, each winning commit is checked against what this transaction read and
wrote, in delta-spark's order (PROTOCOL-NOTES.md), at the isolation level the table asks for; a
conflict raises the exception Delta names, otherwise the same actions are retried at the next free
version. Putting the bytes into the log is the committer's (`committer.py`); after the commit landed,
`post_commit.py` writes the version checksum and (every `delta.checkpointInterval` commits) a
checkpoint, logging failures, never raising them: the commit is durable.
"""
from __future__ import annotations

import contextlib
import functools
import json
import logging
import uuid
from dataclasses import replace
from typing import Any, Callable, Iterable, Iterator

from .actions import (
    SUPPORTED_WRITER_FEATURES, Action, AddCDCFile, AddFile, CommitInfo, DomainMetadata, Metadata, Protocol,
    RemoveFile, SetTransaction, commit_to_bytes, now_ms,
)
from . import column_mapping
from .constraints import table_constraints
from .generated_columns import generated_columns
from .errors import (
    CommitFailedError, CommitsRefusedError, ConcurrentAppendException, ConcurrentModificationError, DeltaError,
    InvalidTableError, MetadataChangedException, UnsafePathError, UnsupportedFeatureError, one_line,
)
from .committer import Committer, Outcome, WinningCommit, path_key
from .post_commit import after_commit
from .storage.log_store import LogStore
from .storage import log_store_for
from .schema import schema_string
from .table_configuration import (APPEND_ONLY_KEY, DEFAULT_ISOLATION_LEVEL, FEATURE_PREFIX, ICT_ENABLEMENT_TIMESTAMP_KEY,
                                  ICT_ENABLEMENT_VERSION_KEY, ISOLATION_LEVEL_KEY, ISOLATION_LEVELS,
                                  SNAPSHOT_ISOLATION, WRITE_SERIALIZABLE, TableConfiguration)
from . import conflicts, deletion_vectors, identity, row_level_concurrency, row_tracking
from .conflicts import ReadSet

log = logging.getLogger(__name__)

# Set by refuse_commits: why no commit of this process may land any more.
_refused_because: str | None = None


def refuse_commits(reason: str) -> None:
    """From now on no commit of this process lands: a transaction about to put its commit raises
    CommitsRefusedError (and commit_or_discard removes its files). For a cancelled run: work that was
    already under way must not land after the user stopped it. A commit already put stays."""
    global _refused_because
    _refused_because = reason


def accept_commits() -> None:
    """Undo refuse_commits (a process that goes on with new work)."""
    global _refused_because
    _refused_because = None


MAX_COMMIT_ATTEMPTS = 50


# How many times an operation runs again after losing to a commit that only rearranged rows.
RERUNS = 3


def reruns_after_conflict(rerun_if: Callable[[ConcurrentModificationError], bool]) -> Callable:
    """Decorates an operation that plans, writes and commits one transaction: when its commit loses to
    a concurrent one and `rerun_if(conflict)` holds, the operation runs again from the start on the
    table as it now is (the files it wrote for the lost commit are discarded already), up to RERUNS
    times; then the last conflict is raised.

    Row-level concurrency (DVs at WriteSerializable) lets OPTIMIZE and DML on the same files both land
    this way where the loser cannot carry its work over to the winner's files by row ID (no row
    tracking, or the DV purge; see `Transaction._carried_files`); it redoes it, which is sound because
    OPTIMIZE changes no row a reader sees, so running the DML after it (or OPTIMIZE after the DML) is a
    serial order of the two."""

    def decorate(operation: Callable) -> Callable:
        @functools.wraps(operation)
        def run(*args: Any, **kwargs: Any) -> Any:
            reruns = 0
            while True:
                try:
                    return operation(*args, **kwargs)
                except ConcurrentModificationError as conflict:
                    if not rerun_if(conflict):
                        raise
                    if reruns == RERUNS:
                        raise type(conflict)(
                            f"{conflict} It ran {RERUNS + 1} times, and each time a concurrent commit landed "
                            f"first; run it again when fewer writers are at work on the table.",
                            winning_version=conflict.winning_version,
                            winning_operation=conflict.winning_operation,
                            winner_changed_data=conflict.winner_changed_data, row_level=conflict.row_level,
                        ) from conflict
                    reruns += 1
                    log.info("%s lost to a concurrent %s (version %s); running it again on the table as "
                             "it now is (rerun %d of %d)", operation.__name__, conflict.winning_operation,
                             conflict.winning_version, reruns, RERUNS)
        return run
    return decorate


def rearranged_only(conflict: ConcurrentModificationError) -> bool:
    """A DML's rerun rule: the winner only rearranged rows (OPTIMIZE), on a table with row-level concurrency."""
    return conflict.row_level and not conflict.winner_changed_data


def renumbered(conflict: ConcurrentModificationError) -> bool:
    """A MERGE's rerun rule, besides `rearranged_only`: a concurrent writer moved an identity mark past the
    values its inserts took, which it cannot move in place (its files also hold kept rows); run again, it
    numbers them past the new mark."""
    return rearranged_only(conflict) or getattr(conflict, "identity_marks_moved", False)


def row_level(conflict: ConcurrentModificationError) -> bool:
    """OPTIMIZE's rerun rule: any winner, on a table with row-level concurrency."""
    return conflict.row_level


def _engine_version() -> str:
    try:
        from importlib.metadata import version
        return version("dbt-deltalog")
    except Exception:  # running from a source tree that is not installed
        return "0.1.0"


ENGINE_INFO = f"dbt-deltalog/{_engine_version()}"



def validate_isolation_level(level: str, table: str) -> str:
    if level not in ISOLATION_LEVELS:
        raise InvalidTableError(
            f"{table}: isolation level {level!r} ({ISOLATION_LEVEL_KEY}) is not known. Allowed values: "
            f"{', '.join(ISOLATION_LEVELS)} (default {DEFAULT_ISOLATION_LEVEL}).")
    return level


def validate_metadata(metadata: Metadata, table: str) -> None:
    """Refuse metadata this engine cannot write correctly, naming what is wrong and what is allowed."""
    try:
        schema = metadata.schema_json
    except ValueError as e:
        raise InvalidTableError(f"{table}: schemaString is not valid JSON ({e}).") from None
    fields = schema.get("fields") if isinstance(schema, dict) else None
    if not isinstance(fields, list):
        raise InvalidTableError(f"{table}: schemaString must be a Spark StructType JSON with 'fields'.")
    names = [f.get("name") for f in fields]
    seen: dict[str, str] = {}
    for name in names:
        if name.lower() in seen:
            raise InvalidTableError(
                f"{table}: columns {seen[name.lower()]!r} and {name!r} differ only in case; Delta column "
                f"names must be unique ignoring case. Rename one of them.")
        seen[name.lower()] = name
    for col in metadata.partition_columns:
        if col not in names:
            raise InvalidTableError(
                f"{table}: partition column {col!r} is not a column of the schema. Allowed: {names}.")
    if len(set(metadata.partition_columns)) != len(metadata.partition_columns):
        raise InvalidTableError(f"{table}: partition columns {metadata.partition_columns} repeat a column.")
    TableConfiguration(metadata).validate_properties(table)
    identity.identity_columns(schema, table)  # refuses a malformed identity declaration, by column


def required_protocol(metadata: Metadata, current: Protocol | None, features: Iterable[str] = ()) -> Protocol:
    """The least protocol at or above `current` that the metadata needs (TableConfiguration.required_protocol)."""
    return TableConfiguration(metadata, current).required_protocol(features)


def _json_param(value: Any) -> str:
    """operationParameters values as delta-spark writes them: strings as they are, others as JSON."""
    return value if isinstance(value, str) else json.dumps(value, separators=(",", ":"), default=str)


class Transaction:
    """One optimistic transaction on one table. Not thread-safe; use one per writer."""

    def __init__(self, table_uri: str, snapshot: Any = None, *, app_id: str | None = None,
                 isolation_level: str | None = None, store: LogStore | None = None,
                 max_attempts: int = MAX_COMMIT_ATTEMPTS):
        self.store = store or log_store_for(table_uri)
        self.table_uri = self.store.table_uri
        self.snapshot = snapshot
        self.read_version: int = snapshot.version if snapshot is not None else -1
        self.app_id = app_id
        self.isolation_level_override = isolation_level
        self.max_attempts = max_attempts
        self.read = ReadSet()
        self._new_metadata: Metadata | None = None
        self._new_protocol: Protocol | None = None
        self._required_features: set[str] = set()
        self._actions: list[Action] = []
        self.committed_version: int | None = None
        self.post_commit_snapshot: Any = None
        self.attempts = 0
        # DV files written while moving marks onto winners' files (row-level concurrency)
        self.rebased_dv_files: list[str] = []
        # Whether a rewrite that loses to DML may carry the DML's marks into its new files
        # (`conflicts._carried_files`): not the DV purge, whose point is to leave no deleted row in any file.
        self.may_carry_marks = True
        # set once marks were carried; then the first attempt's DV files (and files emptied) are unnamed
        self.carried_marks = False
        self._emptied_files: list[str] = []
        # files written for this commit (`stage`), deleted again when it does not land (`staging`)
        self._staged: list[Any] = []
        # Set by a writer that evaluated the table's CHECK constraints and invariants on every row it
        # adds (the Spark writer); without it, adding rows to a table that declares any is refused.
        self.constraints_enforced = False
        # Set by a rewrite that wrote its rows' IDs into the hidden row tracking columns (OPTIMIZE)
        self.rows_keep_ids = False
        # identity values this commit's rows were given (`record_identity`), by column
        self.identity_values: dict[str, identity.GeneratedValues] = {}
        if isolation_level is not None:
            validate_isolation_level(isolation_level, self.table_uri)
        if snapshot is not None:
            self._check_writable(snapshot.protocol, snapshot.metadata)
        if app_id is not None:
            self.read_app_transaction(app_id)

    # ---- what the transaction read ----------------------------------------------------------------

    def read_whole_table(self) -> None:
        """This transaction's result depends on every row of the table."""
        self.read.whole_table = True

    def read_files(self, files: Any) -> None:
        """The files this transaction read: AddFile objects, log paths, or an Arrow table of files
        (a `path` column, like `snapshot.files`)."""
        if hasattr(files, "column") and hasattr(files, "num_rows"):
            paths = files.column("path").to_pylist()
        else:
            paths = [f.path if isinstance(f, (AddFile, RemoveFile)) else str(f) for f in files]
        self.read.paths.update(path_key(p) for p in paths)

    def read_predicate(self, predicate: Any) -> None:
        """A partition predicate this transaction read by: an object with
        `matches_partition(partition_values: dict[str, str | None]) -> bool` (a skipping expression) or
        such a callable. Values are the strings of the log's `partitionValues`."""
        if not (hasattr(predicate, "matches_partition") or callable(predicate)):
            raise TypeError(
                f"{self.table_uri}: read_predicate needs an object with matches_partition(dict) or a "
                f"callable taking the partition values; got {type(predicate).__name__}.")
        self.read.predicates.append(predicate)

    def read_app_transaction(self, app_id: str) -> int | None:
        """The last version committed for `app_id` in this snapshot (None if never); a concurrent commit
        of the same app id then conflicts."""
        self.read.app_ids.add(app_id)
        if self.snapshot is None:
            return None
        return self.snapshot.app_transactions.get(app_id)

    @property
    def app_version(self) -> int | None:
        """Last committed version of this transaction's `app_id` (idempotent writers skip when done)."""
        if self.app_id is None or self.snapshot is None:
            return None
        return self.snapshot.app_transactions.get(self.app_id)

    def set_app_transaction(self, version: int, app_id: str | None = None) -> None:
        app = app_id or self.app_id
        if app is None:
            raise ValueError(f"{self.table_uri}: set_app_transaction needs an app_id")
        self.read.app_ids.add(app)
        self._actions.append(SetTransaction(app, int(version), now_ms()))

    # ---- what it writes ---------------------------------------------------------------------------

    @property
    def metadata(self) -> Metadata | None:
        """The metadata this transaction writes under: its own update, else the snapshot's."""
        if self._new_metadata is not None:
            return self._new_metadata
        return self.snapshot.metadata if self.snapshot is not None else None

    @property
    def protocol(self) -> Protocol | None:
        """The protocol this transaction commits under, including any upgrade its metadata needs
        (writers consult it, e.g. for materializePartitionColumns)."""
        current = self._new_protocol or (self.snapshot.protocol if self.snapshot is not None else None)
        features = set(self._required_features)
        if any(isinstance(a, DomainMetadata) for a in self._actions):
            features.add("domainMetadata")
        if self._new_metadata is not None or (features and self.metadata is not None):
            return required_protocol(self.metadata, current, features)
        return current

    @property
    def metadata_changed(self) -> bool:
        """Whether this transaction writes a new metaData action."""
        return self._new_metadata is not None

    def __repr__(self) -> str:
        return f"Transaction({self.table_uri!r}, read_version={self.read_version})"

    def update_metadata(self, metadata: Metadata, replaces_table: bool = False) -> None:
        """The metadata this commit writes. `replaces_table`: the commit removes every file of the table
        (e.g. an overwrite with a new schema), so column mapping may change mode."""
        validate_metadata(metadata, self.table_uri)
        if self.snapshot is not None and metadata.id != self.snapshot.metadata.id:
            # The table id never changes after creation; a replaced schema keeps it.
            metadata = replace(metadata, id=self.snapshot.metadata.id)
        current = self.snapshot.metadata if self.snapshot is not None else None
        if current is not None and not replaces_table:
            wanted = metadata.schema_json
            kept = identity.kept_marks(wanted, current.schema_json)
            if kept is not wanted:
                metadata = replace(metadata, schema_string=schema_string(kept))
        metadata = self._mapped_for_names(metadata)
        try:
            schema, configuration = column_mapping.mapped_metadata(
                metadata.schema_json, dict(metadata.configuration),
                current.schema_json if current is not None else None,
                dict(current.configuration) if current is not None else None, self.table_uri,
                replacing=replaces_table)
        except column_mapping.ColumnMappingError as e:
            raise InvalidTableError(str(e)) from None
        columns = [f["name"] for f in schema.get("fields", [])] + [
            f.get("metadata", {}).get(column_mapping.PHYSICAL_NAME, "") for f in schema.get("fields", [])]
        configuration = row_tracking.with_column_names(
            configuration, dict(current.configuration) if current is not None else None, columns, self.table_uri)
        if configuration != dict(metadata.configuration) or schema != metadata.schema_json:
            metadata = replace(metadata, schema_string=schema_string(schema), configuration=configuration)
        self._new_metadata = metadata

    def _mapped_for_names(self, metadata: Metadata) -> Metadata:
        """Column names holding characters other engines refuse without column mapping
        (` ,;{}()\\n\\t=`) turn name-mode column mapping on, as Trino's Delta connector does; a table
        that asks for `delta.columnMapping.mode=none` explicitly is refused instead."""
        names = column_mapping.names_needing_mapping(metadata.schema_json)
        if not names or column_mapping.is_mapped(metadata.configuration):
            return metadata
        if column_mapping.MODE in metadata.configuration:
            raise InvalidTableError(
                f"{self.table_uri}: column name(s) {names} hold characters (space , ; {{ }} ( ) = tab newline) "
                f"that Delta readers (delta-spark, delta-kernel-rs) refuse with {column_mapping.MODE}=none. "
                f"Rename the columns, or drop the property to let the table use column mapping (name).")
        log.warning("%s: column name(s) %s hold characters Delta readers refuse without column mapping: "
                    "the table uses column mapping (%s=name); readers need column mapping support "
                    "(delta-spark, delta-rs, DuckDB and polars have it).", self.table_uri, names,
                    column_mapping.MODE)
        return replace(metadata, configuration={**metadata.configuration, column_mapping.MODE: "name"})

    def update_protocol(self, protocol: Protocol) -> None:
        self._check_writable(protocol, self.metadata)
        current = self.snapshot.protocol if self.snapshot is not None else None
        if current is not None and (protocol.min_reader_version < current.min_reader_version
                                    or protocol.min_writer_version < current.min_writer_version):
            raise InvalidTableError(
                f"{self.table_uri}: protocol {protocol.to_dict()} would downgrade the table's "
                f"{current.to_dict()}; a protocol can only be upgraded.")
        self._new_protocol = protocol

    def require_features(self, *features: str) -> None:
        """Table features this commit needs (the protocol is upgraded in the same commit if it lacks them)."""
        self._required_features |= set(features)

    def record_identity(self, generated: Iterable[identity.GeneratedValues]) -> None:
        """Identity values the rows of this commit were given: their new high-water marks go into the
        metadata this commit writes, and a concurrent writer that moved a mark first makes these values
        move past it (`_rebase_identity`) instead of failing the commit."""
        new_marks = {}
        for g in generated:
            if g.column.name in self.identity_values:
                raise ValueError(f"{self.table_uri}: identity column '{g.column.name}' numbered twice in one commit")
            self.identity_values[g.column.name] = g
            if g.last is not None:
                new_marks[g.column.name] = g.column.farther(g.column.high_water_mark, g.last)
        if new_marks and self._new_metadata is not None:  # checked already: only the marks change
            self._new_metadata = identity.metadata_with_marks(self._new_metadata, new_marks)
        elif new_marks:
            self.update_metadata(identity.metadata_with_marks(self.metadata, new_marks))

    def add_actions(self, actions: Iterable[Action]) -> None:
        for a in actions:
            if isinstance(a, Metadata):
                self.update_metadata(a)
            elif isinstance(a, Protocol):
                self.update_protocol(a)
            elif isinstance(a, CommitInfo):
                raise ValueError(f"{self.table_uri}: commitInfo is built by commit(); pass its fields there")
            elif isinstance(a, (AddFile, RemoveFile, AddCDCFile, SetTransaction, DomainMetadata)):
                if isinstance(a, SetTransaction):
                    self.read.app_ids.add(a.app_id)
                self._actions.append(a)
            else:
                raise TypeError(f"{self.table_uri}: cannot commit a {type(a).__name__}")

    @property
    def file_actions(self) -> list[AddFile | RemoveFile]:
        return [a for a in self._actions if isinstance(a, (AddFile, RemoveFile))]

    @property
    def read_anything(self) -> bool:
        return self.read.anything

    @property
    def is_blind_append(self) -> bool:
        """Only adds, and nothing read: such a commit cannot depend on concurrent changes."""
        return not self.read_anything and all(isinstance(a, AddFile) for a in self.file_actions)

    def isolation_level(self) -> str:
        """The level this commit runs at: SnapshotIsolation when it changes no data (only
        dataChange=false file actions), else the caller's or the table's delta.isolationLevel."""
        fa = self.file_actions
        only_rewrites = (fa and not any(a.data_change for a in fa) and self._new_metadata is None
                         and self._new_protocol is None
                         and all(isinstance(a, (AddFile, RemoveFile, SetTransaction)) for a in self._actions))
        if only_rewrites:
            return SNAPSHOT_ISOLATION
        if self.isolation_level_override is not None:
            return self.isolation_level_override
        md = self.metadata
        level = (md.configuration.get(ISOLATION_LEVEL_KEY) if md is not None else None)
        return validate_isolation_level(level, self.table_uri) if level else DEFAULT_ISOLATION_LEVEL

    # ---- commit -----------------------------------------------------------------------------------

    def _check_writable(self, protocol: Protocol, metadata: Metadata | None = None) -> None:
        unsupported = protocol.unsupported_writer_features(metadata)
        if unsupported:
            raise UnsupportedFeatureError(
                f"{self.table_uri}: the table needs writer feature(s) {unsupported} that this engine does "
                f"not implement, so it refuses to write to it (reading may still work). Supported writer "
                f"features: {sorted(SUPPORTED_WRITER_FEATURES)}.")
        if protocol.min_reader_version == 3 or protocol.min_reader_version == 2:
            unreadable = protocol.unsupported_reader_features()
            if unreadable:
                raise UnsupportedFeatureError(
                    f"{self.table_uri}: the table needs reader feature(s) {unreadable} that this engine "
                    f"does not implement.")

    def _prepare(self) -> list[Action]:
        """Protocol, metaData and the other actions, validated; raises before anything is written."""
        table = self.table_uri
        out: list[Action] = []
        current_protocol = self.snapshot.protocol if self.snapshot is not None else None
        if self.snapshot is None and self._new_metadata is None:
            raise InvalidTableError(
                f"{table}: the table does not exist yet, and creating it (version 0) needs its metadata "
                f"(schema, partition columns). Call update_metadata() or create the table first.")
        protocol = self.protocol
        if protocol is not None and protocol != current_protocol:
            self._check_writable(protocol, self.metadata)
            out.append(protocol)
        elif protocol is not None and self._new_metadata is not None:
            self._check_writable(protocol, self._new_metadata)  # e.g. turning on change data feed
        if self._new_metadata is not None:
            md = self._new_metadata
            # delta.feature.* properties are requests for protocol features, not table properties.
            conf = {k: v for k, v in md.configuration.items() if not k.startswith(FEATURE_PREFIX)}
            out.append(replace(md, configuration=conf) if conf != md.configuration else md)

        seen: set[tuple[str, str]] = set()
        for a in self._actions:
            if isinstance(a, (AddFile, RemoveFile)):
                # a logical file is its path and its DV: a file's DV changes as remove(old) + add(new)
                k = (path_key(a.path), deletion_vectors.unique_id(a.deletion_vector) if a.deletion_vector else "")
                if k in seen:
                    raise InvalidTableError(
                        f"{table}: this commit holds two actions for the file {a.path!r}; one commit may "
                        f"add or remove a path only once.")
                seen.add(k)

        md = self.metadata
        if md is not None and not self.constraints_enforced and any(
                isinstance(a, AddFile) and a.data_change for a in self._actions):
            # CHECK constraints and invariants are SQL: only a writer that evaluated them on every new
            # row (the Spark writer says so) may add rows to a table that declares any.
            declared = table_constraints(md.configuration, md.schema_json)
            if declared:
                raise UnsupportedFeatureError(
                    f"{table}: the table declares {', '.join(c.describe() for c in declared)}; this writer "
                    f"cannot evaluate SQL constraints, so it refuses to add rows. Write through the Spark "
                    f"writer (deltalog.spark), which enforces them.")
            computed = [g.describe() for g in generated_columns(md.schema_json)]
            if computed:
                raise UnsupportedFeatureError(
                    f"{table}: the table declares {', '.join(computed)}; this writer cannot evaluate SQL, so "
                    f"it refuses to add rows. Write through the Spark writer (deltalog.spark), which computes "
                    f"and checks them.")
        if self.snapshot is not None and self.snapshot.table_configuration.append_only:
            bad = [a.path for a in self._actions if isinstance(a, RemoveFile) and a.data_change]
            if bad:
                raise InvalidTableError(
                    f"{table}: the table is append-only ({APPEND_ONLY_KEY}=true), so rows cannot be deleted "
                    f"or updated (this commit removes {len(bad)} file(s), e.g. {bad[0]!r}). Only appends "
                    f"and dataChange=false rewrites (OPTIMIZE) are allowed; set {APPEND_ONLY_KEY}=false "
                    f"first if deletes are intended.")
        out.extend(self._actions)
        return out

    def commit(self, operation: str = "WRITE", parameters: dict[str, Any] | None = None,
               metrics: dict[str, Any] | None = None, user_metadata: str | None = None,
               isolation_level: str | None = None,
               extra_commit_info: dict[str, Any] | None = None) -> int:
        """Commit the recorded actions as one new version and return it. Raises a
        ConcurrentModificationError subclass when a concurrent commit conflicts (nothing is committed),
        CommitFailedError after `max_attempts` lost races."""
        if self.committed_version is not None:
            raise DeltaError(f"{self.table_uri}: this transaction already committed version "
                             f"{self.committed_version}; start a new one.")
        if isolation_level is not None:
            self.isolation_level_override = validate_isolation_level(isolation_level, self.table_uri)
        clash = sorted(set(extra_commit_info or {}) & CommitInfo._KNOWN)
        if clash:
            raise ValueError(f"{self.table_uri}: extra_commit_info may not set the commitInfo fields {clash}; "
                             f"pass them as commit() arguments.")
        actions = self._prepare()
        level = self.isolation_level()
        txn_id = str(uuid.uuid4())
        commit_info = CommitInfo(
            timestamp=now_ms(),
            operation=operation,
            operation_parameters={k: None if v is None else _json_param(v) for k, v in (parameters or {}).items()},
            read_version=self.read_version if self.read_version >= 0 else None,
            isolation_level=level,
            is_blind_append=self.is_blind_append,
            operation_metrics={k: str(v) for k, v in (metrics or {}).items()},
            engine_info=ENGINE_INFO,
            txn_id=txn_id,
            user_metadata=user_metadata,
            extra=dict(extra_commit_info or {}),
        )
        winners: list[WinningCommit] = []
        version = self.read_version + 1
        committer = Committer(self.store, self.table_uri, self.read_version)
        committer.check_table_still_there()
        while True:
            if self.attempts >= self.max_attempts:
                raise CommitFailedError(
                    f"{self.table_uri}: the commit lost the race for a new version {self.attempts} times "
                    f"(last tried version {version}); concurrent writers keep winning. Nothing was "
                    f"committed; retry later or reduce the number of concurrent writers.")
            self.attempts += 1
            if _refused_because is not None:
                raise CommitsRefusedError(f"{self.table_uri}: nothing was committed: {_refused_because}")
            commit_info.timestamp = max(now_ms(), commit_info.timestamp or 0)
            actions = self._with_in_commit_timestamp(commit_info, actions, version, winners)
            final = self._with_row_ids(commit_info, actions, version, winners)
            outcome = committer.put(version, commit_to_bytes([commit_info, *final]), txn_id)
            if outcome is Outcome.LANDED:
                break
            if outcome is Outcome.ABSENT:
                continue  # the same commit again at the same version
            # Lost the race: check every commit that landed since, then try after the last one.
            for winner in committer.winning_commits_from(version):
                resolution = conflicts.check(self._attempt(), self.read, winner, level)
                if resolution.rebase:
                    actions = self._rewrite(actions, row_level_concurrency.rebase_marks(self.store, resolution.rebase))
                if resolution.identity_marks_moved:
                    actions = self._rebase_identity(actions, winner)
                if resolution.carried:
                    actions = self._rewrite(actions, row_level_concurrency.carry_marks(
                        self._attempt(), winner, resolution.carried))
                    self.carried_marks = True
                winners.append(winner)
                version = winner.version + 1
        self.committed_version = version
        log.debug("%s: committed version %d (%s) after %d attempt(s)", self.table_uri, version,
                  operation, self.attempts)
        if self.carried_marks:  # the DV files (or a file) written for the first attempt are no longer named
            self.discard_uncommitted([*self._staged, *self.rebased_dv_files, *self._emptied_files])
        self.post_commit_snapshot = after_commit(
            self.table_uri, self.store, self.snapshot, version, [commit_info, *final], winners,
            commit_info.extra.get("inCommitTimestamp", commit_info.timestamp), txn_id)
        return version

    def _with_in_commit_timestamp(self, commit_info: CommitInfo, actions: list[Action], version: int,
                                  winners: list[WinningCommit]) -> list[Action]:
        """With `delta.enableInCommitTimestamps`, the commit's time is written into it (commitInfo, its
        first action): later than the previous version's, whatever the clocks say. A commit that
        switches it on records from which version (and time) the log has them. Redone per attempt, as
        the version may change."""
        md = self.metadata
        if md is None or not TableConfiguration(md).in_commit_timestamps_enabled:
            commit_info.extra.pop("inCommitTimestamp", None)
            return actions
        previous = winners[-1].read_timestamp if winners else (
            self.snapshot.timestamp if self.snapshot is not None else None)
        ict = max(commit_info.timestamp, (previous + 1) if previous is not None else 0)
        commit_info.extra["inCommitTimestamp"] = ict
        was_on = self.snapshot is not None and self.snapshot.table_configuration.in_commit_timestamps_enabled \
            and not any(w.metadata is not None and not TableConfiguration(w.metadata).in_commit_timestamps_enabled
                        for w in winners)
        if was_on or version == 0:
            return actions
        out = []
        for a in actions:
            if isinstance(a, Metadata):
                a = replace(a, configuration={**a.configuration, ICT_ENABLEMENT_VERSION_KEY: str(version),
                                              ICT_ENABLEMENT_TIMESTAMP_KEY: str(ict)})
            out.append(a)
        return out

    def _with_row_ids(self, commit_info: CommitInfo, actions: list[Action], version: int,
                      winners: list[WinningCommit]) -> list[Action]:
        """On a table with row tracking, `actions` with the row IDs of `row_tracking.assign`, from the
        high-water mark of the last winner (or the snapshot), and the commit's tags saying whether
        rewritten rows kept theirs. Redone per attempt: `actions` themselves are left as they are."""
        protocol = next((a for a in actions if isinstance(a, Protocol)), None) or (
            self.snapshot.protocol if self.snapshot is not None else None)
        md = self.metadata
        if md is None or not row_tracking.is_active(protocol, md.configuration):
            return actions
        snap = self.snapshot
        enabling = row_tracking.is_enabled(md.configuration) and not (
            snap is not None and row_tracking.is_enabled(snap.configuration))
        if enabling:
            # files a winner added never got row IDs from a writer that knew of them: back-filling
            # them here would need their stats, so the commit retries instead
            added = next((w for w in winners if any(a.data_change for a in w.adds)), None)
            if added is not None:
                raise conflicts.conflict(ConcurrentAppendException, self._attempt(), added,
                                     "files were added while this commit enables row tracking",
                                     "Retry the operation.")
        domains = [*(snap.domain_metadata.values() if snap is not None else ()), *(d for w in winners
                                                                                  for d in w.domains)]
        mark = row_tracking.high_water_mark(domains)
        paths = {a.path for a in actions if isinstance(a, (AddFile, RemoveFile))}
        live = row_tracking.live_row_ids(snap.files, paths) if snap is not None else {}
        for w in winners:  # a winner may have added a path back with a new DV: it carries the same IDs
            live.update({a.path: (a.base_row_id, a.default_row_commit_version) for a in w.adds if a.path in paths})
        backfill = [a for a in snap.add_files() if a.base_row_id is None and a.path not in paths] \
            if enabling and snap is not None else []
        final, preserved = row_tracking.assign(actions, version, mark, live, enabling=enabling,
                                               backfill=backfill, table=self.table_uri)
        preserved = preserved or self.rows_keep_ids
        commit_info.extra["tags"] = {**(commit_info.extra.get("tags") or {}),
                                     row_tracking.PRESERVED_TAG: "true" if preserved else "false"}
        return final

    def stage(self, files: Iterable[AddFile | AddCDCFile | str]) -> list:
        """Files written for this commit (data and change files, or log-relative paths of DV files):
        inside `staging()` they are deleted again when the commit does not land. Returns them."""
        files = [f for f in files if f]
        self._staged.extend(files)
        return files

    @contextlib.contextmanager
    def staging(self) -> Iterator["Transaction"]:
        """An operation's writing and its commit, as one: any failure or interrupt inside deletes every
        file staged for this transaction that no landed commit names (one call, whatever step failed)."""
        try:
            yield self
        except BaseException:
            self.discard_uncommitted([*self._staged, *self.rebased_dv_files])
            raise

    def commit_or_discard(self, new_files: Iterable[AddFile] = (), **commit_args: Any) -> int:
        """`commit(**commit_args)` with `new_files` staged: when it fails or is interrupted, the files
        staged for it are deleted. Only for files this transaction wrote (never for adds of existing
        files, as RESTORE makes)."""
        self.stage(new_files)
        with self.staging():
            return self.commit(**commit_args)

    def discard_uncommitted(self, files: Iterable[AddFile | str]) -> list[str]:
        """After this transaction failed or was interrupted, delete the data files it wrote — but only
        those that no commit after its read version names. An interrupt (Ctrl-C) can arrive after the
        commit landed and before `commit()` returned; those files then belong to the table. When the log
        cannot be read, nothing is deleted (VACUUM removes true orphans later). Returns what was deleted
        (log-relative paths); absolute paths (files outside the table) are never deleted."""
        from .deletion_vectors import dv_file_path
        from .paths import decode_path, is_absolute_path

        wanted = {path_key(f.path if isinstance(f, (AddFile, RemoveFile, AddCDCFile)) else str(f)) for f in files}
        if not wanted:
            return []
        try:
            landed = Committer(self.store, self.table_uri, self.read_version).winning_commits_from(
                max(self.read_version + 1, 0))
        except Exception as exc:
            log.warning("%s: could not read the log to tell which written files were committed (%s); leaving "
                        "them for VACUUM", self.table_uri, one_line(exc))
            return []
        for commit in landed:
            wanted -= {path_key(a.path) for a in (*commit.adds, *commit.change_files)}
            wanted -= {path_key(dv_file_path(a.deletion_vector) or "") for a in commit.adds}
        deleted = []
        for rel in sorted(wanted):
            if is_absolute_path(rel):
                continue
            try:
                self.store.delete_data_file(decode_path(rel))
                deleted.append(rel)
            except OSError:
                pass
            except UnsafePathError as e:
                log.warning("%s: %s", self.table_uri, e)
        return deleted

    # ---- after losing a race --------------------------------------------------------------------

    def _row_level_concurrency(self) -> bool:
        """Whether the table marks rows in DVs at WriteSerializable (its own level, also for an
        OPTIMIZE, which commits at SnapshotIsolation)."""
        md = self.metadata
        conf = md.configuration if md is not None else {}
        raw = self.isolation_level_override or conf.get(ISOLATION_LEVEL_KEY)
        level = validate_isolation_level(raw, self.table_uri) if raw else DEFAULT_ISOLATION_LEVEL
        return level == WRITE_SERIALIZABLE and deletion_vectors.is_enabled(conf)

    def _attempt(self) -> conflicts.Attempt:
        """This commit as the conflict rules see it, as it stands now."""
        return conflicts.Attempt(
            table_uri=self.table_uri, read_version=self.read_version, store=self.store, snapshot=self.snapshot,
            metadata=self.metadata, changes_metadata=self._new_metadata is not None, actions=list(self._actions),
            is_blind_append=self.is_blind_append, row_level=self._row_level_concurrency(),
            rows_keep_ids=self.rows_keep_ids, may_carry_marks=self.may_carry_marks)

    def _rebase_identity(self, actions: list[Action], winner: WinningCommit) -> list[Action]:
        """A winner moved identity high-water marks (and nothing else of the metadata): this commit's
        generated values move past its marks — its files written again with the values shifted — and its
        metadata becomes the winner's with this commit's marks. Without generated values there is nothing
        to move (the winner's metadata stands)."""
        theirs = identity.marks(winner.metadata.schema_json)
        new_marks: dict[str, int] = {}
        for name, generated in list(self.identity_values.items()):
            shift = generated.shift_past(theirs.get(name))
            if shift and not generated.rebasable:
                error = conflicts.conflict(
                    MetadataChangedException, self._attempt(), winner,
                    f"identity column '{name}' values were generated concurrently (high-water mark now "
                    f"{theirs.get(name)})", "Retry the operation: it will then number its rows past it.")
                error.identity_marks_moved = True  # `renumbered`: the operation may run again as it is
                raise error
            if shift:
                physical = column_mapping.physical_names(self.metadata.schema_json,
                                                         self.metadata.configuration).get(name, name)
                ours = [a for a in actions if isinstance(a, AddFile) and a.path in generated.files]
                pairs = identity.rebase_files(self.store, ours, physical, shift)
                self.stage([new for _, new in pairs])
                self.discard_uncommitted([old for old, _ in pairs])
                moved = {old.path: new for old, new in pairs}
                actions = [moved.get(a.path, a) if isinstance(a, AddFile) else a for a in actions]
                self._actions = [moved.get(a.path, a) if isinstance(a, AddFile) else a for a in self._actions]
                generated = generated.shifted(shift, [new.path for new in moved.values()])
                self.identity_values[name] = generated
                log.info("%s: identity column '%s' moved by %d past version %d's high-water mark %s",
                         self.table_uri, name, shift, winner.version, theirs.get(name))
            if generated.last is not None:
                new_marks[name] = generated.column.farther(theirs.get(name), generated.last)
        if self._new_metadata is None:
            return actions
        metadata = identity.metadata_with_marks(winner.metadata, new_marks)
        self._new_metadata = metadata
        return [metadata if isinstance(a, Metadata) else a for a in actions]

    def _rewrite(self, actions: list[Action], rewrite: row_level_concurrency.Rewrite) -> list[Action]:
        """`actions` (and the recorded ones) as `rewrite` has them; the files it wrote or left unnamed are
        remembered for `commit_or_discard`."""
        self.rebased_dv_files.extend(rewrite.written)
        self._emptied_files.extend(rewrite.unnamed)
        self._actions = rewrite.apply(self._actions)
        return rewrite.apply(actions)
