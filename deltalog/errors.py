"""Errors raised by the engine, named as Delta Lake names them.

Every message says which table (or file) is concerned, what was wrong, and what the caller can do.
"""


def one_line(exc: BaseException, limit: int = 600) -> str:
    """An exception's text on one line, without the multi-line debug dump object-store clients append."""
    return " ".join(str(exc).split()).split(" Debug source:", 1)[0][:limit]


class DeltaError(Exception):
    """Base of every error the engine raises."""


class NotATableError(DeltaError):
    """The path holds no `_delta_log` with any commit."""


class CorruptLogError(DeltaError):
    """A log file cannot be parsed, or the log is inconsistent (gap in versions, missing metadata)."""


class UnsupportedFeatureError(DeltaError):
    """The table needs a reader or writer feature this engine does not implement."""


class InvalidTableError(DeltaError):
    """A write or config that the table cannot accept (schema mismatch, bad property value...)."""


class SchemaMismatchError(InvalidTableError):
    """Data written does not match the table schema."""


class UnsafePathError(DeltaError):
    """A path that would reach outside a table or warehouse (a symlink, an absolute or `../` path)."""


class DataFileNotFoundError(DeltaError, FileNotFoundError):
    """A data file the snapshot names is gone (VACUUM removed it, or something outside the log did)."""


class VersionNotFoundError(DeltaError):
    """Time travel to a version or timestamp the log does not hold."""


class ChecksumMismatchError(CorruptLogError):
    """A `.crc` version checksum disagrees with the replayed state."""


class IncompleteWriteError(DeltaError):
    """The data files found after a write hold fewer (or more) rows than Spark wrote; nothing is committed."""


class CommitsRefusedError(DeltaError):
    """This process stopped committing (`refuse_commits`): nothing was committed."""


class CommitFailedError(DeltaError):
    """A commit could not land after the allowed number of attempts."""


class CommitOutcomeUnknownError(CommitFailedError):
    """The store did not answer whether a commit landed, and reading the version back did not tell."""


class ConcurrentModificationError(DeltaError):
    """Base of the conflicts a losing transaction raises. Nothing was committed by the loser."""

    def __init__(self, message: str, *, winning_version: int | None = None,
                 winning_operation: str | None = None, winner_changed_data: bool = True,
                 row_level: bool = False):
        super().__init__(message)
        self.winning_version = winning_version
        self.winning_operation = winning_operation
        # False when the winner only rearranged rows (OPTIMIZE: every file action dataChange=false)
        self.winner_changed_data = winner_changed_data
        # the table marks rows in deletion vectors at WriteSerializable (row-level concurrency)
        self.row_level = row_level


class ProtocolChangedException(ConcurrentModificationError):
    pass


class MetadataChangedException(ConcurrentModificationError):
    pass


class ConcurrentAppendException(ConcurrentModificationError):
    pass


class ConcurrentDeleteReadException(ConcurrentModificationError):
    pass


class ConcurrentDeleteDeleteException(ConcurrentModificationError):
    pass


class ConcurrentTransactionException(ConcurrentModificationError):
    pass
