"""deltalog: the Delta Lake transaction log, written and read in Python (no dbt, no Spark here)."""
from .errors import (
    ChecksumMismatchError, CommitFailedError, ConcurrentAppendException, ConcurrentDeleteDeleteException,
    ConcurrentDeleteReadException, ConcurrentModificationError, ConcurrentTransactionException,
    CorruptLogError, DeltaError, InvalidTableError, MetadataChangedException, NotATableError,
    ProtocolChangedException, SchemaMismatchError, UnsupportedFeatureError, VersionNotFoundError,
)
from .snapshot import Snapshot
from .table import DeltaTable
from .transaction import Transaction
from .write import write_deltalake

__all__ = [
    "DeltaTable", "Snapshot", "Transaction", "write_deltalake",
    "DeltaError", "NotATableError", "CorruptLogError", "UnsupportedFeatureError", "InvalidTableError",
    "SchemaMismatchError", "VersionNotFoundError", "ChecksumMismatchError", "CommitFailedError",
    "ConcurrentModificationError", "ProtocolChangedException", "MetadataChangedException",
    "ConcurrentAppendException", "ConcurrentDeleteReadException", "ConcurrentDeleteDeleteException",
    "ConcurrentTransactionException",
]
