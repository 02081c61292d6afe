"""Change capture into a table, as AutoCDC defines it: a stream of a source's changes (inserts,
updates, deletes, truncates) applied in sequence order, one micro-batch at a time, exactly once.

    query = (changes_df.writeStream
             .foreachBatch(change_applier("/lake/customers", ApplyChanges.of({...}, "customers"),
                                          app_id="customers-cdc", source_columns=changes_df.columns))
             .option("checkpointLocation", ...).start())

Per key the change with the highest `sequence_by` wins, across and within micro-batches. SCD type 1
(scd1.py) keeps one row per key; SCD type 2 (scd2.py) one row per version, `__START_AT` / `__END_AT`
holding the sequence values that opened and closed it.

What a batch needs to remember beyond the table's rows lives in a state table beside it, `_apply_changes/`
under the table's folder (a Delta table; Delta readers and VACUUM leave `_` folders alone): for SCD 1,
each key's last applied sequence and whether it was a delete (a tombstone, so that a late, older change
of a deleted key is ignored); for SCD 2, deletes that closed no version yet. Tombstones older than
`tombstone_retention` are purged before the first batch of each run and every `PURGE_EVERY` batches after.

Each batch commits the state first and then the table, each recording `txn(app id, batch id)`: a batch
replayed after a crash skips what landed, and the table's rows are computed so that applying a batch over
its own state gives the same rows (an upsert wins a tie of sequences, a delete wins a tie with its own
tombstone). The table's commit is one MERGE against the version it read; with deletion vectors on (the
default for such tables) it marks the changed rows and writes only their new versions.
"""
from __future__ import annotations

from .applier import Applier, change_applier, check_source, state_table
from .spec import ApplyChanges, ApplyChangesError

__all__ = ["Applier", "ApplyChanges", "ApplyChangesError", "change_applier", "check_source", "state_table"]
