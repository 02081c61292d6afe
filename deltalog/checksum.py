"""Version checksums (`NNN.crc`): a summary of the table state written after a commit landed, and
checked against the replayed state when a snapshot loads. Optional: a missing `.crc` is fine."""
from __future__ import annotations

import json
import typing
from typing import TYPE_CHECKING, Any

from . import log_json
from .errors import ChecksumMismatchError
from .storage.log_store import LogStore

if TYPE_CHECKING:
    from .actions import DomainMetadata, Metadata, Protocol


class TableState(typing.Protocol):
    """What a checksum summarises: a `Snapshot`, named by what is read of it because a snapshot verifies
    its checksum as it loads (snapshot.py imports this module, so this one cannot import it)."""
    version: int
    metadata: Metadata
    protocol: Protocol
    app_transactions: dict[str, int]
    app_transaction_updated: dict[str, int | None]
    domain_metadata: dict[str, DomainMetadata]

    @property
    def num_files(self) -> int: ...

    @property
    def size_bytes(self) -> int: ...


def checksum_name(version: int) -> str:
    return "%020d.crc" % version


def checksum_content(snapshot: TableState, txn_id: str | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {
        "tableSizeBytes": snapshot.size_bytes,
        "numFiles": snapshot.num_files,
        "numMetadata": 1,
        "numProtocol": 1,
        "metadata": snapshot.metadata.to_dict(),
        "protocol": snapshot.protocol.to_dict(),
        "setTransactions": [
            {"appId": k, "version": v, "lastUpdated": snapshot.app_transaction_updated.get(k)}
            for k, v in snapshot.app_transactions.items()],
        "domainMetadata": [d.to_dict() for d in snapshot.domain_metadata.values()],
    }
    for t in out["setTransactions"]:
        if t["lastUpdated"] is None:
            del t["lastUpdated"]
    if txn_id is not None:
        out["txnId"] = txn_id
    return out


def write_checksum(store: LogStore, snapshot: TableState, txn_id: str | None = None) -> bool:
    """Write `<version>.crc` for the snapshot; False (and nothing written) when it already exists."""
    data = json.dumps(checksum_content(snapshot, txn_id), separators=(",", ":")).encode()
    try:
        store.write_if_absent(checksum_name(snapshot.version), data)
    except FileExistsError:
        return False
    return True


def verify_checksum(store: LogStore, snapshot: TableState) -> bool:
    """Check `<version>.crc`, when present, against the snapshot. False when there is none; raises
    ChecksumMismatchError naming the file when it disagrees. An unreadable crc is ignored (it is only
    a hint, written after the commit)."""
    name = checksum_name(snapshot.version)
    try:
        crc = log_json.loads(store.read(name))
    except FileNotFoundError:
        return False
    except (ValueError, UnicodeDecodeError):
        return False
    if not isinstance(crc, dict):  # valid JSON, but not a checksum: as unreadable
        return False
    source = f"{store.table_uri}/_delta_log/{name}"
    problems = []
    if "numFiles" in crc and crc["numFiles"] != snapshot.num_files:
        problems.append(f"numFiles is {crc['numFiles']} but the log replays to {snapshot.num_files} files")
    if "tableSizeBytes" in crc and crc["tableSizeBytes"] != snapshot.size_bytes:
        problems.append(f"tableSizeBytes is {crc['tableSizeBytes']} but the live files total "
                        f"{snapshot.size_bytes} bytes")
    if problems:
        raise ChecksumMismatchError(
            f"{source} disagrees with the table state at version {snapshot.version}: "
            f"{'; '.join(problems)}. The log or the checksum is corrupt; if the commits are intact, "
            f"delete the .crc file.")
    return True
