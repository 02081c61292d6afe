"""Liquid clustering (writer feature `clustering`, on top of `domainMetadata`): the table's
clustering columns live in the `delta.clustering` domain metadata as
`{"clusteringColumns": [["col"], ["nested", "field"]]}`; OPTIMIZE clusters on them (Hilbert curve,
incrementally) and marks the files it writes `clusteringProvider: "liquid"`. Changing the columns is a
commit of new domain metadata; files already written keep their layout until OPTIMIZE rewrites them.
"""
from __future__ import annotations

import json
from typing import Any, Sequence

from .actions import DomainMetadata
from .errors import InvalidTableError
from .expressions import resolve_column

CLUSTERING_DOMAIN = "delta.clustering"
CLUSTERING_FEATURES = ("domainMetadata", "clustering")
CLUSTERING_PROVIDER = "liquid"
CLUSTERING_CURVE = "hilbert"
_STATS_TYPES = ("byte", "short", "integer", "long", "float", "double", "decimal", "string", "date",
                "timestamp", "timestamp_ntz")


def clustering_columns(snapshot: Any) -> list[str]:
    """The table's clustering columns (dotted paths), empty when it is not liquid clustered."""
    if snapshot is None:
        return []
    d = snapshot.domain_metadata.get(CLUSTERING_DOMAIN)
    if d is None or d.removed:
        return []
    try:
        paths = json.loads(d.configuration or "{}").get("clusteringColumns") or []
    except ValueError:
        raise InvalidTableError(f"{snapshot.table_uri}: the {CLUSTERING_DOMAIN} domain metadata is not JSON: "
                                f"{d.configuration!r}.") from None
    return [".".join(p) if isinstance(p, list) else str(p) for p in paths]


def set_clustering(txn: Any, columns: Sequence[str]) -> bool:
    """Make `columns` the table's clustering columns in this transaction (a no-op when they already
    are; empty = not clustered). Returns whether it changed anything."""
    table = txn.table_uri
    md = txn.metadata
    schema = md.schema_json
    wanted: list[list[str]] = []
    for c in columns:
        found = resolve_column(schema, c)
        if found is None:
            raise InvalidTableError(f"{table}: clustering column {c!r} is not a column of the table; columns: "
                                    f"{[f['name'] for f in schema['fields']]}.")
        path, delta_type = found
        base = delta_type.split("(")[0] if isinstance(delta_type, str) else "nested"
        if base not in _STATS_TYPES:
            raise InvalidTableError(f"{table}: clustering column {c!r} is {base}; clustering needs columns with "
                                    f"min/max statistics (numbers, strings, dates, timestamps).")
        if path[0].lower() in {p.lower() for p in md.partition_columns}:
            raise InvalidTableError(f"{table}: {c!r} is a partition column; a table is either partitioned or "
                                    f"liquid clustered, not both.")
        wanted.append(list(path))
    if md.partition_columns and wanted:
        raise InvalidTableError(f"{table}: the table is partitioned by {md.partition_columns}; a table is either "
                                f"partitioned or liquid clustered, not both.")
    if len({".".join(p).lower() for p in wanted}) != len(wanted):
        raise InvalidTableError(f"{table}: clustering columns {list(columns)} repeat a column.")
    current = clustering_columns(txn.snapshot)
    if [c.lower() for c in current] == [".".join(p).lower() for p in wanted]:
        return False
    txn.add_actions([DomainMetadata(CLUSTERING_DOMAIN, json.dumps({"clusteringColumns": wanted},
                                                                  separators=(",", ":")))])
    txn.require_features(*CLUSTERING_FEATURES)
    return True
