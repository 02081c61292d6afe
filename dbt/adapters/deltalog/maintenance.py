"""Adapter methods for table maintenance and the Delta model configs (zorder_by, isolation_level,
checkpoint_interval, tblproperties): OPTIMIZE, VACUUM, history, RESTORE, time travel.

`DeltalogAdapter` mixes this class in; its methods are `@available` to Jinja. The macros in
`macros/maintenance.sql` call them: `validate_delta_config` before a model writes anything,
`apply_delta_config` after its data commit and post-hooks. Each method is one engine call.
"""
from __future__ import annotations

import json
import re
from typing import Any, Dict, List, Optional

from dbt.adapters.base.meta import available
from dbt_common.exceptions import CompilationError, DbtRuntimeError

ISOLATION_LEVELS = ("Serializable", "WriteSerializable")
CURVES = ("zorder", "hilbert")
# delta.* properties this engine understands, with a check of their value (None: any string).
_BOOL = ("true", "false")


def _is_interval(v: str) -> bool:
    from deltalog.snapshot import parse_interval_ms
    try:
        parse_interval_ms(v)
        return True
    except ValueError:
        return False


def _is_int(v: Any, minimum: int) -> bool:
    """An int, or a string of ASCII digits (int() also takes '٣' and '1_0'; '²' passes isdigit()), >= minimum."""
    if isinstance(v, bool):
        return False
    if isinstance(v, str):
        if not re.fullmatch(r"\s*-?[0-9]+\s*", v):
            return False
        v = int(v)
    return isinstance(v, int) and v >= minimum


KNOWN_PROPERTIES: Dict[str, Any] = {
    "delta.isolationLevel": (lambda v: v in ISOLATION_LEVELS, "Serializable or WriteSerializable"),
    "delta.checkpointInterval": (lambda v: _is_int(v, 1), "an integer >= 1"),
    "delta.appendOnly": (lambda v: v.lower() in _BOOL, "true or false"),
    "delta.deletedFileRetentionDuration": (_is_interval, "an interval such as 'interval 7 days'"),
    "delta.logRetentionDuration": (_is_interval, "an interval such as 'interval 30 days'"),
    "delta.checkpointRetentionDuration": (_is_interval, "an interval such as 'interval 2 days'"),
    "delta.enableExpiredLogCleanup": (lambda v: v.lower() in _BOOL, "true or false"),
    "delta.dataSkippingNumIndexedCols": (lambda v: _is_int(v, -1), "an integer >= -1 (-1 = all columns)"),
    "delta.dataSkippingStatsColumns": (lambda v: bool(v.strip()), "a comma-separated list of columns"),
    "delta.dataSkippingStringPrefixLength": (lambda v: _is_int(v, 0), "an integer >= 0"),
    "delta.targetFileSize": (lambda v: _is_int(v, 1), "a size in bytes >= 1"),
    "delta.checkpoint.writeStatsAsJson": (lambda v: v.lower() in _BOOL, "true or false"),
    "delta.checkpoint.writeStatsAsStruct": (lambda v: v.lower() in _BOOL, "true or false"),
    "delta.compatibility.symlinkFormatManifest.enabled": (lambda v: v.lower() in _BOOL, "true or false"),
    "delta.setTransactionRetentionDuration": (_is_interval, "an interval such as 'interval 7 days'"),
    "delta.minReaderVersion": (lambda v: _is_int(v, 1), "an integer"),
    "delta.minWriterVersion": (lambda v: _is_int(v, 2), "an integer"),
}
# Properties that switch on features this engine cannot write (the transaction refuses them too).
UNSUPPORTED_PROPERTIES = ("delta.enableChangeDataFeed", "delta.enableDeletionVectors", "delta.enableRowTracking",
                          "delta.enableInCommitTimestamps", "delta.enableTypeWidening",
                          "delta.enableIcebergCompatV1", "delta.enableIcebergCompatV2",
                          "delta.columnMapping.mode")
_STATS_TYPES = ("byte", "short", "int", "integer", "long", "bigint", "smallint", "tinyint", "float", "double",
                "decimal", "string", "date", "timestamp", "timestamp_ntz", "varchar", "char")


def _get(obj: Any, key: str, default: Any = None) -> Any:
    if obj is None:
        return default
    if isinstance(obj, dict):
        return obj.get(key, default)
    getter = getattr(obj, "get", None)
    if callable(getter):
        try:
            return getter(key, default)
        except TypeError:
            pass
    return getattr(obj, key, default)


def _int_arg(relation: Any, macro: str, name: str, value: Any, minimum: int) -> Optional[int]:
    """A macro's integer argument (None stays None), or an error naming the macro, argument and value."""
    if value is None:
        return None
    if not _is_int(value, minimum):
        raise CompilationError(f"{macro}({relation}): {name}={value!r} is not valid. Allowed: an integer >= "
                               f"{minimum}. Nothing was done.")
    return int(str(value).strip())


def _truthy(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("true", "1", "yes", "on")
    return bool(value)


class DeltaConfig:
    """The Delta configs of one model, validated: what `apply` will set and cluster."""

    def __init__(self, model_name: str, relation: Any, config: Any):
        self.model = model_name
        self.relation = relation
        self.properties: Dict[str, str] = {}
        self.zorder_by: List[str] = []
        self.curve = "zorder"
        self.skip_optimize = False
        self.partition_by: List[str] = []
        self._parse(config or {})

    def fail(self, name: str, value: Any, allowed: str) -> None:
        raise CompilationError(
            f"Model '{self.model}' ({self.relation}): config {name}={value!r} is not valid. Allowed: {allowed}. "
            f"Nothing was written.")

    def _parse(self, config: Any) -> None:
        props = _get(config, "tblproperties")
        if props is not None:
            if not isinstance(props, dict):
                self.fail("tblproperties", props, "a mapping of table property names to values")
            for key, value in props.items():
                key = str(key)
                if isinstance(value, bool):
                    value = "true" if value else "false"
                text = str(value)
                if key in UNSUPPORTED_PROPERTIES and text.lower() not in ("false", "none", "name"):
                    self.fail(f"tblproperties.{key}", value,
                              "false only: this engine does not write the table feature it switches on")
                if key.startswith("delta."):
                    check = KNOWN_PROPERTIES.get(key)
                    if check is None and key not in UNSUPPORTED_PROPERTIES and not key.startswith("delta.feature."):
                        self.fail(f"tblproperties.{key}", value,
                                  "a known Delta property (" + ", ".join(sorted(KNOWN_PROPERTIES)) +
                                  "); other names must not start with 'delta.'")
                    if check is not None and not check[0](text):
                        self.fail(f"tblproperties.{key}", value, check[1])
                self.properties[key] = text

        level = _get(config, "isolation_level")
        if level is not None:
            canonical = {lv.lower(): lv for lv in ISOLATION_LEVELS}.get(str(level).strip().lower())
            if canonical is None:
                self.fail("isolation_level", level, " or ".join(ISOLATION_LEVELS))
            self._set("isolation_level", "delta.isolationLevel", canonical)

        interval = _get(config, "checkpoint_interval")
        if interval is not None:
            if not _is_int(interval, 1):
                self.fail("checkpoint_interval", interval, "an integer >= 1 (a checkpoint every N commits)")
            self._set("checkpoint_interval", "delta.checkpointInterval", str(int(str(interval).strip())))

        zorder_by = _get(config, "zorder_by")
        synonym = _get(config, "zorder")
        if zorder_by is not None and synonym is not None and self._columns("zorder", synonym) != self._columns(
                "zorder_by", zorder_by):
            self.fail("zorder", synonym, f"the same columns as zorder_by ({zorder_by!r}), or only one of the two")
        chosen, name = (zorder_by, "zorder_by") if zorder_by is not None else (synonym, "zorder")
        if chosen is not None:
            self.zorder_by = self._columns(name, chosen)

        curve = _get(config, "cluster_curve")
        if curve is not None:
            if str(curve).strip().lower() not in CURVES:
                self.fail("cluster_curve", curve, " or ".join(CURVES))
            self.curve = str(curve).strip().lower()

        skip = _get(config, "skip_optimize")
        if skip is not None:
            if not isinstance(skip, bool) and str(skip).strip().lower() not in ("true", "false"):
                self.fail("skip_optimize", skip, "true or false")
            self.skip_optimize = _truthy(skip)

        partition_by = _get(config, "partition_by")
        if isinstance(partition_by, str):
            self.partition_by = [partition_by]
        elif isinstance(partition_by, (list, tuple)):
            self.partition_by = [str(c) for c in partition_by]

    def _set(self, config_name: str, key: str, value: str) -> None:
        given = self.properties.get(key)
        if given is not None and given != value:
            self.fail(config_name, value, f"the same value as tblproperties {key}={given!r}, or only one of the two")
        self.properties[key] = value

    def _columns(self, name: str, value: Any) -> List[str]:
        if isinstance(value, str):
            items = [c.strip() for c in value.split(",")]
        elif isinstance(value, (list, tuple)) and all(isinstance(c, str) for c in value):
            items = [c.strip() for c in value]
        else:
            self.fail(name, value, "a column name, a comma-separated string, or a list of column names")
        items = [c.strip("`") for c in items]
        if not items or any(not c for c in items):
            self.fail(name, value, "one or more non-empty column names")
        if len({c.lower() for c in items}) != len(items):
            self.fail(name, value, "each column once")
        return items

    def check_columns(self, spark_schema: Any, table_uri: str, existing_schema: Optional[dict]) -> None:
        """zorder columns against the model's output columns (a Spark StructType) and the table."""
        if not self.zorder_by:
            return
        fields = {}
        if spark_schema is not None:
            for i, f in enumerate(spark_schema.fields):
                fields[f.name.lower()] = (f.name, f.dataType.simpleString())
        if existing_schema is not None:
            for f in existing_schema.get("fields", []):
                t = f["type"] if isinstance(f["type"], str) else f["type"].get("type", "nested")
                fields.setdefault(f["name"].lower(), (f["name"], t))
        if not fields:
            return
        partitions = {c.lower() for c in self.partition_by}
        data_columns = [n for k, (n, _) in fields.items() if k not in partitions]
        for c in self.zorder_by:
            if c.lower() in partitions:
                self.fail("zorder_by", self.zorder_by,
                          f"non-partition columns ('{c}' is in partition_by {self.partition_by}): "
                          + ", ".join(data_columns))
            found = fields.get(c.lower())
            if found is None:
                self.fail("zorder_by", self.zorder_by,
                          f"columns of the model ('{c}' is not one): " + ", ".join(data_columns))
            base = re.split(r"[(<]", found[1])[0]
            if base not in _STATS_TYPES:
                self.fail("zorder_by", self.zorder_by,
                          f"columns with min/max statistics (numbers, strings, dates, timestamps); "
                          f"'{found[0]}' is {found[1]}")


class MaintenanceMixin:
    """Delta configs and maintenance for `DeltalogAdapter` (which provides `spark`, `table_uri`,
    `warehouse`)."""

    # ---- model configs ---------------------------------------------------------------------

    @available
    def deltalog_validate_config(self, relation: Any, config: Any, model_name: Optional[str] = None,
                                 sql: Optional[str] = None) -> str:
        """Raise a CompilationError naming the model, the config, the bad value and what is allowed.
        `sql` (the model's query) lets zorder columns be checked before anything runs."""
        cfg = DeltaConfig(model_name or str(relation), relation, config)
        if cfg.zorder_by:
            existing = None
            try:
                if self.warehouse.is_table(relation.schema, relation.identifier):
                    from deltalog.snapshot import Snapshot
                    existing = Snapshot.load(self.table_uri(relation)).schema_json
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
        if cfg.zorder_by and not cfg.skip_optimize and not _truthy(skip_optimize_var or False):
            version = self.deltalog_optimize(relation, cfg.zorder_by, None, cfg.curve)
            done.append(f"OPTIMIZE ZORDER BY ({', '.join(cfg.zorder_by)}) "
                        + (f"version {version}" if version is not None else "nothing to do"))
        return "; ".join(done)

    @available
    def deltalog_set_properties(self, relation: Any, properties: Dict[str, Any]) -> Optional[int]:
        """Set table properties in one metadata commit, only when a value changes."""
        relation = self._relation(relation)
        if not properties:
            return None
        from dataclasses import replace

        from deltalog.table import DeltaTable
        table = DeltaTable(self.table_uri(relation))
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
        """A relation from a Relation or from 'schema.table' (what `dbt run-operation --args` passes)."""
        if not isinstance(relation, str):
            return relation
        parts = [p.strip().strip("`") for p in relation.strip().strip("`").split(".")]
        if len(parts) != 2 or not all(parts):
            raise CompilationError(f"{relation!r} is not a relation: pass ref('model') or 'schema.table'.")
        return self.Relation.create(schema=parts[0], identifier=parts[1], type="table")

    def _refresh_view(self, relation: Any) -> None:
        from dbt.adapters.deltalog.catalog import SESSION_VIEWS
        try:
            SESSION_VIEWS.ensure(self.spark, self.warehouse, relation.schema, relation.identifier)
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
        version = self._engine_call(relation, "OPTIMIZE", optimize, self.spark, self.table_uri(relation),
                                    zorder_by=zorder_by or None, where=where or None, curve=curve or "zorder")
        if version is not None:
            self._refresh_view(relation)
        return version

    @available
    def deltalog_vacuum(self, relation: Any, retain_hours: Any = None, dry_run: bool = False,
                        force: bool = False) -> List[str]:
        relation = self._relation(relation)
        from deltalog.operations.vacuum import vacuum
        return self._engine_call(relation, "VACUUM", vacuum, self.table_uri(relation),
                                 retain_hours=retain_hours, dry_run=_truthy(dry_run), force=_truthy(force))

    @available
    def deltalog_history(self, relation: Any, limit: Optional[int] = None) -> List[Dict[str, Any]]:
        relation = self._relation(relation)
        from deltalog.history import history
        return self._engine_call(relation, "history", history, self.table_uri(relation),
                                 limit=_int_arg(relation, "history", "limit", limit, 1))

    @available
    def deltalog_restore(self, relation: Any, version: Any = None, timestamp: Any = None) -> Optional[int]:
        relation = self._relation(relation)
        from deltalog.operations.restore import restore
        result = self._engine_call(relation, "RESTORE", restore, self.table_uri(relation),
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
        return self._engine_call(relation, "time travel", as_of_view, self.spark, self.table_uri(relation),
                                 relation.schema, relation.identifier,
                                 version=_int_arg(relation, "as_of", "version", version, 0), timestamp=timestamp)

    @available
    def deltalog_added_rows(self, relation: Any, start_version: Any, end_version: Any = None) -> str:
        """A temporary view of the rows added after `start_version` (up to `end_version`, default the
        latest); returns its name for SQL."""
        relation = self._relation(relation)
        from deltalog.operations.changes import changes_snapshot
        from deltalog.spark.reader import snapshot_dataframe
        if start_version is None:
            raise CompilationError(f"added_rows({relation}): start_version is required.")
        start = _int_arg(relation, "added_rows", "start_version", start_version, 0)
        snap = self._engine_call(relation, "changes", changes_snapshot, self.table_uri(relation),
                                 start, _int_arg(relation, "added_rows", "end_version", end_version, 0))
        from dbt.adapters.deltalog.catalog_sql import snapshot_view_name
        name = snapshot_view_name(relation.schema, relation.identifier, f"added_{start}_{snap.version}")
        snapshot_dataframe(self.spark, snap).createOrReplaceTempView(f"`{name}`")
        return f"`{name}`"

    @available
    def deltalog_table_version(self, relation: Any) -> Optional[int]:
        """The latest version of the relation's table (None when it is not a Delta table)."""
        relation = self._relation(relation)
        from deltalog.table import DeltaTable
        t = DeltaTable(self.table_uri(relation))
        return t.version() if t.exists() else None
