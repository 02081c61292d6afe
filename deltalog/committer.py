"""The committer: one commit's bytes put into the log as version N with put-if-absent, and what it
found there when the store said no. It knows nothing of what the commit holds or of conflicts: the
transaction (`transaction.py`) prepares the bytes, asks the committer to land them, and on a lost race
checks the winning commits (`conflicts` in the transaction) before it tries the next version.

A store may answer a create it carried out with "already exists" (a retried request) or not at all (a
timeout); the version read back says whose commit it holds, by the commitInfo's `txnId`.
"""
from __future__ import annotations

import enum
import logging
from urllib.parse import unquote

from .actions import (
    Action, AddCDCFile, AddFile, CommitInfo, DomainMetadata, Metadata, Protocol, RemoveFile, SetTransaction,
    commit_objects, now_ms, parse_commit,
)
from .errors import CommitOutcomeUnknownError, NotATableError, one_line
from .storage.log_store import LOG_DIR, LogStore, WriteOutcomeUnknown
from . import row_tracking

log = logging.getLogger(__name__)

# how often an unanswered create of one version is sent again before the outcome is reported unknown
UNANSWERED_RETRIES = 3


def commit_file_name(version: int) -> str:
    return "%020d.json" % version


def path_key(path: str) -> str:
    """Paths are compared URI-decoded, as the protocol reconciles them."""
    return unquote(path)


class Outcome(enum.Enum):
    LANDED = "landed"  # the version holds this commit
    TAKEN = "taken"    # another writer's commit holds the version: check it, then try the next one
    ABSENT = "absent"  # the create was not answered and the version is still free: send it again


class WinningCommit:
    """What the conflict checker needs from one commit that landed before ours."""

    def __init__(self, version: int, actions: list[Action]):
        self.version = version
        self.actions = actions
        self.commit_info = next((a for a in actions if isinstance(a, CommitInfo)), None)
        self.operation = (self.commit_info.operation if self.commit_info else None) or "UNKNOWN"
        self.protocol = next((a for a in actions if isinstance(a, Protocol)), None)
        self.metadata = next((a for a in actions if isinstance(a, Metadata)), None)
        self.adds = [a for a in actions if isinstance(a, AddFile)]
        self.change_files = [a for a in actions if isinstance(a, AddCDCFile)]
        self.removes = [a for a in actions if isinstance(a, RemoveFile)]
        # Files whose rows it marked deleted: removed and added back under the same path with a new DV.
        removed = {path_key(r.path) for r in self.removes}
        self.marked = {path_key(a.path): a for a in self.adds if a.deletion_vector and path_key(a.path) in removed}
        self.txns = [a for a in actions if isinstance(a, SetTransaction)]
        self.domains = [a for a in actions if isinstance(a, DomainMetadata)]
        # An absent flag means "not blind", as delta-spark reads it.
        self.is_blind_append = bool(self.commit_info and self.commit_info.is_blind_append)
        # OPTIMIZE and the like: the same rows in other files, no change to what a reader sees
        files = [*self.adds, *self.removes]
        self.changes_data = bool(self.protocol or self.metadata or self.change_files
                                 or any(a.data_change for a in files))
        self.timestamp = (self.commit_info.timestamp if self.commit_info else None) or now_ms()
        # the time readers give this version: its in-commit timestamp when it has one
        ict = self.commit_info.extra.get("inCommitTimestamp") if self.commit_info else None
        self.read_timestamp = ict if isinstance(ict, int) else self.timestamp
        tags = (self.commit_info.extra.get("tags") if self.commit_info else None) or {}
        self.kept_row_ids = isinstance(tags, dict) and tags.get(row_tracking.PRESERVED_TAG) == "true"


class Committer:
    """Puts commits into one table's log."""

    def __init__(self, store: LogStore, table_uri: str, read_version: int):
        self.store = store
        self.table_uri = table_uri
        self.read_version = read_version  # the version the transaction read (-1: it creates the table)
        self.unanswered = 0  # creates the store left unanswered with the version still free

    def put(self, version: int, data: bytes, txn_id: str) -> Outcome:
        """Create `version` holding `data` (whose commitInfo carries `txn_id`) if absent. ABSENT: the
        store did not answer and the version is still free; send this commit again at the same version
        (whichever create lands, it is this one). CommitOutcomeUnknownError when that keeps happening."""
        try:
            self.store.write_if_absent(commit_file_name(version), data)
            return Outcome.LANDED
        except (FileExistsError, WriteOutcomeUnknown) as exc:
            holder = self._holder_of(version, txn_id, exc)
            if holder is Outcome.LANDED:
                log.info("%s: version %d holds this commit (txnId %s) although the store answered %s; it "
                         "landed", self.table_uri, version, txn_id, type(exc).__name__)
                return holder
            if holder is Outcome.ABSENT:
                self.unanswered += 1
                if self.unanswered > UNANSWERED_RETRIES:
                    raise CommitOutcomeUnknownError(
                        f"{self.table_uri}: the store did not answer {self.unanswered} conditional creates "
                        f"of version {version} ({exc}); the version does not exist now, but a request "
                        f"still in flight could create it. Inspect {LOG_DIR}/{commit_file_name(version)}: "
                        f"if it holds txnId {txn_id}, this commit landed; otherwise nothing was "
                        f"committed.") from exc
            return holder

    def winning_commits_from(self, version: int) -> list[WinningCommit]:
        """The commits that landed from `version` on, in order."""
        found: list[WinningCommit] = []
        v = version
        while True:
            name = commit_file_name(v)
            try:
                data = self.store.read(name)
            except FileNotFoundError:
                break
            found.append(WinningCommit(v, parse_commit(data, f"{self.table_uri}/{LOG_DIR}/{name}")))
            v += 1
        return found

    def check_table_still_there(self) -> None:
        """The table must still hold the version the transaction read: a commit into a table deleted
        (or emptied) meanwhile would land as the only file of a log no reader can load."""
        read_version = self.read_version
        if read_version < 0:
            return
        try:
            names = {f.version for f in self.store.list_from(read_version) if f.version is not None}
        except NotATableError:
            names = set()
        if read_version not in names:
            raise NotATableError(
                f"{self.table_uri}: the table was deleted or replaced while this transaction ran (version "
                f"{read_version}, which it read, is no longer in the log). Nothing was committed; re-run "
                f"the operation.")

    def _holder_of(self, version: int, txn_id: str, cause: BaseException) -> Outcome:
        """Whose commit `version` holds (LANDED: ours, TAKEN: another's, ABSENT: none).
        CommitOutcomeUnknownError when it cannot be read."""
        name = commit_file_name(version)
        try:
            data = self.store.read(name)
        except FileNotFoundError:
            if isinstance(cause, FileExistsError):  # created, then gone: the table was deleted
                self.check_table_still_there()
            return Outcome.ABSENT
        except Exception as exc:
            raise CommitOutcomeUnknownError(
                f"{self.table_uri}: the store answered the commit of version {version} with "
                f"{type(cause).__name__} ({one_line(cause)}), and reading the version back failed ({one_line(exc)}). "
                f"Whether this commit landed is unknown: inspect {LOG_DIR}/{name}; if it holds txnId {txn_id}, "
                f"it landed, otherwise nothing was committed.") from exc
        for _, obj in commit_objects(data, f"{self.table_uri}/{LOG_DIR}/{name}"):
            info = obj.get("commitInfo") if isinstance(obj, dict) else None
            if info is not None:
                return Outcome.LANDED if info.get("txnId") == txn_id else Outcome.TAKEN
        return Outcome.TAKEN
