"""Adapter methods for table maintenance and the Delta model configs (zorder_by, isolation_level,
checkpoint_interval, tblproperties): OPTIMIZE, VACUUM, history, RESTORE, time travel.

`DeltalogAdapter` mixes this class in; its methods are `@available` to Jinja. The macros in
`macros/maintenance.sql` call them: `validate_delta_config` before a model writes anything,
`apply_delta_config` after its data commit and post-hooks. Each method is one engine call.
"""
from __future__ import annotations

import json
from typing import Any, Dict, List, Optional

from dbt.adapters.base.meta import available
from dbt_common.exceptions import CompilationError, DbtRuntimeError

from dbt.adapters.deltalog.model_config import DeltaConfig, _int_arg, _truthy

# appId of the `txn` a model's table records for each upstream it reads with changes_since_last_run
CHANGES_APP_PREFIX = "dbt-deltalog changes of "

class MaintenanceMixin:
    """Delta configs and maintenance for `DeltalogAdapter` (which provides `spark`, `table`, `table_uri`,
    `warehouse_of`)."""

    # ---- model configs ---------------------------------------------------------------------

    @available
    def deltalog_validate_config(self, relation: Any, config: Any, model_name: Optional[str] = None,
                                 sql: Optional[str] = None) -> str:
        """Raise a CompilationError naming the model, the config, the bad value and what is allowed.
        `sql` (the model's query) lets zorder columns be checked before anything runs."""
        cfg = DeltaConfig(model_name or str(relation), relation, config)
        if cfg.zorder_by or cfg.clustering:
            existing = None
            try:
                if self.warehouse_of(relation).is_table(relation.schema, relation.identifier):
                    existing = self.table(relation).snapshot().schema_json
            except Exception:
                existing = None
            spark_schema = None
            if sql:
                try:
                    spark_schema = self._dataframe(sql).schema  # analysis only: nothing runs
                except Exception:
                    spark_schema = None
            cfg.check_columns(spark_schema, self.table_uri(relation), existing)
        return ""

    @available
    def deltalog_apply_config(self, relation: Any, config: Any, model_name: Optional[str] = None,
                              skip_optimize_var: Any = None) -> str:
        """After the data commit: table properties in one commit when any changes, then OPTIMIZE
        ZORDER BY when configured (unless skipped). Returns what it did, for the log."""
        cfg = DeltaConfig(model_name or str(relation), relation, config)
        done = []
        version = self.deltalog_set_properties(relation, cfg.properties)
        if version is not None:
            done.append(f"SET TBLPROPERTIES version {version}")
        skipped = cfg.skip_optimize or _truthy(skip_optimize_var or False)
        if cfg.zorder_by and not skipped:
            version = self.deltalog_optimize(relation, cfg.zorder_by, None, cfg.curve)
            done.append(f"OPTIMIZE ZORDER BY ({', '.join(cfg.zorder_by)}) "
                        + (f"version {version}" if version is not None else "nothing to do"))
        elif cfg.clustering and not skipped:
            version = self.deltalog_optimize(relation, None, None, None)  # clusters on the table's columns
            done.append(f"OPTIMIZE (liquid clustering by {', '.join(cfg.clustering)}) "
                        + (f"version {version}" if version is not None else "nothing to do"))
        return "; ".join(done)

    @available
    def deltalog_set_properties(self, relation: Any, properties: Dict[str, Any]) -> Optional[int]:
        """Set table properties in one metadata commit, only when a value changes."""
        relation = self._relation(relation)
        if not properties:
            return None
        from dataclasses import replace

        table = self.table(relation)
        if not table.exists():
            raise DbtRuntimeError(f"{relation}: no Delta table at {table.uri} to set properties on.")
        txn = table.transaction()
        md = txn.snapshot.metadata
        wanted = {str(k): str(v) for k, v in properties.items()}
        if all(md.configuration.get(k) == v for k, v in wanted.items()):
            return None
        txn.update_metadata(replace(md, configuration={**md.configuration, **wanted}))
        version = txn.commit(operation="SET TBLPROPERTIES",
                             parameters={"properties": json.dumps(wanted, separators=(",", ":"))})
        self._refresh_view(relation)
        return version

    def _relation(self, relation: Any) -> Any:
        """A relation from a Relation or from 'schema.table' or 'catalog.schema.table' (what `dbt
        run-operation --args` passes)."""
        if not isinstance(relation, str):
            return relation
        parts = [p.strip().strip("`") for p in relation.strip().strip("`").split(".")]
        if len(parts) not in (2, 3) or not all(parts):
            raise CompilationError(f"{relation!r} is not a relation: pass ref('model'), 'schema.table' or "
                                   f"'catalog.schema.table'.")
        database = parts[0] if len(parts) == 3 else None
        return self.Relation.create(database=database, schema=parts[-2], identifier=parts[-1], type="table")

    def _refresh_view(self, relation: Any) -> None:
        from dbt.adapters.deltalog.runtime.session import RUNTIME
        try:
            RUNTIME.views(self.spark).ensure(self.warehouse_of(relation), relation.schema, relation.identifier)
        except Exception:
            pass

    # ---- maintenance -----------------------------------------------------------------------

    def _engine_call(self, relation: Any, what: str, fn, *args, **kwargs):
        from dbt.adapters.deltalog.connections import _short_error
        try:
            return fn(*args, **kwargs)
        except DbtRuntimeError:
            raise
        except Exception as e:
            raise DbtRuntimeError(f"{what} on {relation} failed: {_short_error(e)}") from e

    @available
    def deltalog_optimize(self, relation: Any, zorder_by: Any = None, where: Optional[str] = None,
                          curve: Optional[str] = None) -> Optional[int]:
        """OPTIMIZE (compaction, or clustering with zorder_by); the new version or None."""
        relation = self._relation(relation)
        from deltalog.spark.optimize import optimize
        version = self._engine_call(relation, "OPTIMIZE", optimize, self.spark, self.table(relation),
                                    zorder_by=zorder_by or None, where=where or None, curve=curve or "zorder")
        if version is not None:
            self._refresh_view(relation)
        return version

    @available
    def deltalog_purge_deletion_vectors(self, relation: Any) -> Optional[int]:
        """REORG TABLE ... APPLY (PURGE): rewrite every file with rows deleted by a deletion vector;
        the new version or None when no file has any."""
        relation = self._relation(relation)
        from deltalog.spark.optimize import optimize
        version = self._engine_call(relation, "REORG APPLY (PURGE)", optimize, self.spark,
                                    self.table(relation), purge=True)
        if version is not None:
            self._refresh_view(relation)
        return version

    @available
    def deltalog_convert_to_iceberg(self, relation: Any) -> str:
        """Iceberg metadata for the versions of a `table_format: iceberg` table that have none yet (a
        conversion that failed after its commit): what was done, in words."""
        relation = self._relation(relation)
        from deltalog.iceberg import catch_up
        written, version = self._engine_call(relation, "Iceberg conversion", catch_up, self.table(relation))
        if written is None:
            return f"Iceberg metadata already at Delta version {version}"
        return f"wrote Iceberg metadata v{written}.metadata.json (Delta version {version})"

    @available
    def deltalog_vacuum(self, relation: Any, retain_hours: Any = None, dry_run: bool = False,
                        force: bool = False) -> List[str]:
        relation = self._relation(relation)
        from deltalog.operations.vacuum import vacuum
        return self._engine_call(relation, "VACUUM", vacuum, self.table(relation),
                                 retain_hours=retain_hours, dry_run=_truthy(dry_run), force=_truthy(force))

    @available
    def deltalog_history(self, relation: Any, limit: Optional[int] = None) -> List[Dict[str, Any]]:
        relation = self._relation(relation)
        from deltalog.history import history
        return self._engine_call(relation, "history", history, self.table(relation).store,
                                 limit=_int_arg(relation, "history", "limit", limit, 1))

    @available
    def deltalog_restore(self, relation: Any, version: Any = None, timestamp: Any = None) -> Optional[int]:
        relation = self._relation(relation)
        from deltalog.operations.restore import restore
        result = self._engine_call(relation, "RESTORE", restore, self.table(relation),
                                   version=_int_arg(relation, "restore", "version", version, 0),
                                   timestamp=timestamp)
        self._refresh_view(relation)
        return result

    @available
    def deltalog_as_of(self, relation: Any, version: Any = None, timestamp: Any = None) -> str:
        """A temporary view of the table as of a version or timestamp; returns its name for SQL."""
        relation = self._relation(relation)
        from dbt.adapters.deltalog.catalog_sql import as_of_view
        if (version is None) == (timestamp is None):
            raise CompilationError(f"as_of({relation}): give exactly one of version or timestamp.")
        return self._engine_call(relation, "time travel", as_of_view, self.spark, self.table(relation),
                                 relation.view_name,
                                 version=_int_arg(relation, "as_of", "version", version, 0), timestamp=timestamp)

    @available
    def deltalog_table_changes(self, relation: Any, start_version: Any, end_version: Any = None) -> str:
        """A temporary view of the rows each commit from `start_version` to `end_version` (default the
        latest; both included) changed, with `_change_type`, `_commit_version` and `_commit_timestamp`
        (the change data feed); returns its name for SQL."""
        relation = self._relation(relation)
        from dbt.adapters.deltalog.catalog_sql import changes_view
        if start_version is None:
            raise CompilationError(f"table_changes({relation}): start_version is required.")
        start = _int_arg(relation, "table_changes", "start_version", start_version, 0)
        end = _int_arg(relation, "table_changes", "end_version", end_version, 0)
        return self._engine_call(relation, "table_changes", changes_view, self.spark, self.table(relation),
                                 relation.view_name, start, end)

    @available
    def deltalog_changes_since_last_run(self, relation: Any, this: Any, incremental: Any) -> str:
        """A temporary view of the changes to `relation` (an upstream Delta table) that the model
        building `this` has not consumed yet: every version after the one its table records for this
        upstream (a `txn` action) up to the upstream's version now. The model's commit records that
        version in the same commit as its output, so a run that fails or is killed before committing is
        simply read again by the next one. A first build (not `incremental`) reads every row as an
        insert. Returns the view's name for SQL."""
        from deltalog.spark.change_data import changes_dataframe, no_changes, snapshot_as_inserts

        upstream, target = self._relation(relation), self._relation(this)
        upstream_snap = self.table(upstream).snapshot()
        app_id = CHANGES_APP_PREFIX + upstream_snap.metadata.id
        last = None
        if _truthy(incremental):
            last = self.table(target).snapshot().app_transactions.get(app_id)
            if last is None or last < 0:  # -1: the table was rebuilt without reading the changes
                raise CompilationError(
                    f"{target} reads changes_since_last_run({upstream}), but its table records no version of "
                    f"{upstream} read before (a table built before the model used it, or an upstream table that "
                    f"was replaced). Run the model once with --full-refresh: it then reads every row of "
                    f"{upstream} and records the version. Nothing was written.")
        if last is None:
            df = snapshot_as_inserts(self.spark, upstream_snap)
        elif last >= upstream_snap.version:
            df = no_changes(self.spark, upstream_snap)
        else:
            df = self._engine_call(upstream, "changes_since_last_run", changes_dataframe, self.spark,
                                   self.table(upstream).store, last + 1, upstream_snap.version)
        self.pending_app_transactions(target)[app_id] = upstream_snap.version
        from dbt.adapters.deltalog.catalog_sql import snapshot_view_name
        view = snapshot_view_name(upstream.view_name,
                                  f"for_{target.view_name.replace('.', '_')}_{upstream_snap.version}")
        df.createOrReplaceTempView(f"`{view}`")
        return f"`{view}`"

    def pending_app_transactions(self, relation: Any) -> Dict[str, int]:
        """{appId: version} the next commit to `relation`'s table records (`txn`): what the model
        building it read through changes_since_last_run."""
        if not hasattr(self, "_pending_app_transactions"):
            self._pending_app_transactions: Dict[tuple, Dict[str, int]] = {}
        return self._pending_app_transactions.setdefault((relation.schema, relation.identifier), {})

    def take_app_transactions(self, relation: Any, replaced: Any = None) -> Dict[str, int]:
        """The pending {appId: version} of `relation`, taken. When the commit replaces the table
        (`replaced`: its snapshot before), the upstreams it no longer reads the changes of are marked
        -1 (a txn cannot be removed): its next incremental run must not resume from them."""
        txns = dict(self.pending_app_transactions(relation))
        self._pending_app_transactions.pop((relation.schema, relation.identifier), None)
        if replaced is not None:
            for app, version in replaced.app_transactions.items():
                if app.startswith(CHANGES_APP_PREFIX) and app not in txns and version >= 0:
                    txns[app] = -1
        return txns

    @available
    def deltalog_table_version(self, relation: Any) -> Optional[int]:
        """The latest version of the relation's table (None when it is not a Delta table)."""
        relation = self._relation(relation)
        t = self.table(relation)
        return t.version() if t.exists() else None


def expose_mixin_methods(cls) -> None:
    """AdapterMeta collects @available methods only from classes it builds; the maintenance mixin is
    a plain class, so its methods are added to what Jinja may call on `cls`."""
    names = set(cls._available_)
    replacements = dict(cls._parse_replacements_)
    for base in cls.__mro__:
        for name, value in vars(base).items():
            if getattr(value, "_is_available_", False):
                names.add(name)
            replacement = getattr(value, "_parse_replacement_", None)
            if replacement is not None and name not in replacements:
                replacements[name] = replacement
    cls._available_ = frozenset(names)
    cls._parse_replacements_ = replacements
