"""A model's Delta configs, validated before anything is written: table properties (tblproperties,
isolation_level, checkpoint_interval), zorder_by, liquid clustering, persist_docs and the contract's
constraints (as the table definition its commits carry), location_root; configs that cannot apply to
a Delta table here fail the model with a message naming the config and what to use instead."""
from __future__ import annotations

import re
from typing import Any, Dict, List, Optional

from dbt_common.exceptions import CompilationError

from deltalog.constraints import CONSTRAINT_PREFIX, property_name
from deltalog.sql_text import quote_identifier

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


COLUMN_MAPPING_MODES = ("none", "name", "id")
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
    "delta.columnMapping.mode": (lambda v: v.lower() in COLUMN_MAPPING_MODES, "none, name or id"),
    "delta.enableChangeDataFeed": (lambda v: v.lower() in _BOOL, "true or false"),
    "delta.enableInCommitTimestamps": (lambda v: v.lower() in _BOOL, "true or false"),
    "delta.enableDeletionVectors": (lambda v: v.lower() in _BOOL, "true or false"),
    "delta.enableIcebergCompatV2": (lambda v: v.lower() in _BOOL, "true or false"),
    "delta.enableIcebergCompatV3": (lambda v: v.lower() in _BOOL, "true or false"),
    "delta.universalFormat.enabledFormats": (lambda v: v.strip().lower() in ("iceberg", ""), "iceberg, or empty"),
    "delta.enableRowTracking": (lambda v: v.lower() in _BOOL, "true or false"),
    "delta.enableTypeWidening": (lambda v: v.lower() in _BOOL, "true or false"),
    "delta.checkpointPolicy": (lambda v: v.lower() in ("classic", "v2"), "classic or v2"),
    "delta.autoOptimize.autoCompact": (lambda v: v.lower() in ("true", "false", "auto"), "true, auto or false"),
}
# Properties that switch on features this engine cannot write (the transaction refuses them too).
UNSUPPORTED_PROPERTIES = ("delta.enableIcebergCompatV1",)
TABLE_FORMATS = ("iceberg", "delta")
ICEBERG_COMPAT_V2 = "delta.enableIcebergCompatV2"
ICEBERG_COMPAT_V3 = "delta.enableIcebergCompatV3"
UNIVERSAL_FORMATS = "delta.universalFormat.enabledFormats"
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


# Model configs that switch a table property on or off: config -> (property, what it does).
_SWITCHES = {
    "change_data_feed": ("delta.enableChangeDataFeed", "updates, deletes and merges also record the rows they change"),
    "deletion_vectors": ("delta.enableDeletionVectors", "deletes, merges and delete+insert mark changed rows "
                                                        "instead of rewriting their files"),
    "row_tracking": ("delta.enableRowTracking", "every row gets a row ID and a row commit version in the log"),
    "auto_compact": ("delta.autoOptimize.autoCompact", "after each write, partitions it left with many small "
                                                      "files are compacted in a dataChange=false commit"),
}


def truthy(value: Any) -> bool:
    """A config's boolean, however YAML or Jinja spelled it."""
    if isinstance(value, str):
        return value.strip().lower() in ("true", "1", "yes", "on")
    return bool(value)


_truthy = truthy


def config_value(obj: Any, key: str, default: Any = None) -> Any:
    """`key` of a model, a config or a batch, whether dbt hands it over as a dict or an object."""
    if obj is None:
        return default
    if isinstance(obj, dict):
        return obj.get(key, default)
    return getattr(obj, key, default)


def as_list(value: Any) -> List[str]:
    """A config that takes one name or a list of them, as a list (blank names left out)."""
    if value is None:
        return []
    if isinstance(value, str):
        value = [value]
    return [v for v in value if not (isinstance(v, str) and not v.strip())]


quote_name = quote_identifier  # (the name the adapter's macros and modules know it by)


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
        self.location_root: Optional[str] = None
        self.clustering: List[str] = []  # liquid_clustered_by / cluster_by
        self.persist_relation_docs = False
        self.persist_column_docs = False
        self._parse(config or {})
        self._refuse_inapplicable(config or {})

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
                if key in UNSUPPORTED_PROPERTIES and text.lower() != "false":
                    self.fail(f"tblproperties.{key}", value,
                              "false only: this engine does not write the table feature it switches on")
                if key.startswith(CONSTRAINT_PREFIX):
                    try:
                        property_name(key[len(CONSTRAINT_PREFIX):])
                    except Exception as e:
                        self.fail(f"tblproperties.{key}", value, str(e))
                    key = key.lower()
                elif key.startswith("delta."):
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

        mapping = _get(config, "column_mapping")
        if mapping is not None:
            if str(mapping).strip().lower() not in COLUMN_MAPPING_MODES:
                self.fail("column_mapping", mapping, "name, id or none (delta.columnMapping.mode: with name or "
                                                     "id, dropping and renaming columns change only metadata)")
            self._set("column_mapping", "delta.columnMapping.mode", str(mapping).strip().lower())

        for name, (key, meaning) in _SWITCHES.items():
            value = _get(config, name)
            if value is not None:
                if not isinstance(value, bool) and str(value).strip().lower() not in ("true", "false"):
                    self.fail(name, value, f"true or false ({key}: {meaning})")
                self._set(name, key, "true" if _truthy(value) else "false")

        self._table_format(_get(config, "table_format"))

        self.zorder_by = self._column_list(config, "zorder_by", "zorder")[0]

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

        self.clustering, name = self._column_list(config, "liquid_clustered_by", "cluster_by")
        if self.clustering:
            chosen = self.clustering
            if self.partition_by:
                self.fail(name, chosen, f"nothing together with partition_by {self.partition_by}: a Delta table is "
                                        f"either partitioned or liquid clustered")
            if self.zorder_by:
                self.fail(name, chosen, f"nothing together with zorder_by {self.zorder_by}: a liquid clustered "
                                        f"table is clustered on its clustering columns")

        location_root = _get(config, "location_root")
        if location_root is not None:
            if not isinstance(location_root, str) or not location_root.strip():
                self.fail("location_root", location_root, "a folder path (absolute, or relative to the project)")
            self.location_root = location_root.strip()

        persist_docs = _get(config, "persist_docs")
        if persist_docs is not None:
            if not isinstance(persist_docs, dict) or set(persist_docs) - {"relation", "columns"}:
                self.fail("persist_docs", persist_docs, "a mapping with relation: true|false and columns: true|false")
            self.persist_relation_docs = _truthy(persist_docs.get("relation", False))
            self.persist_column_docs = _truthy(persist_docs.get("columns", False))

    def _table_format(self, value: Any) -> None:
        """`table_format: iceberg` (dbt-databricks' name): the Delta table is readable as Iceberg too, from the
        same files (IcebergCompat and Iceberg metadata after every commit); `delta` turns that off. With
        deletion vectors (or delta.enableIcebergCompatV3) it is IcebergCompatV3, read as Iceberg v3 with
        row tracking on; otherwise IcebergCompatV2, read as Iceberg v2."""
        if value is None:
            return
        chosen = str(value).strip().lower()
        if chosen not in TABLE_FORMATS:
            self.fail("table_format", value, "iceberg (a Delta table Iceberg readers read too) or delta")
        if chosen == "delta":
            self._set("table_format", UNIVERSAL_FORMATS, "")
            self._set("table_format", ICEBERG_COMPAT_V2, "false")
            self._set("table_format", ICEBERG_COMPAT_V3, "false")
            return
        if self.properties.get("delta.columnMapping.mode") not in (None, "name", "id"):
            self.fail("table_format", value, "delta while column_mapping is none: Iceberg needs column mapping")
        self.properties.setdefault("delta.columnMapping.mode", "name")
        v3 = "true" in (self.properties.get("delta.enableDeletionVectors"), self.properties.get(ICEBERG_COMPAT_V3))
        if v3 and self.properties.get("delta.enableRowTracking") == "false":
            self.fail("table_format", value, "delta while row_tracking is false and deletion vectors are on: "
                                             "Iceberg v3 (which reads deletion vectors) needs row tracking")
        if v3 and self.properties.get(ICEBERG_COMPAT_V2) == "true":
            self.fail("table_format", value, "delta while tblproperties delta.enableIcebergCompatV2 is true and "
                                             "deletion vectors are on: Iceberg v2 readers do not read deletion "
                                             "vectors (without the property the table is IcebergCompatV3, read "
                                             "as Iceberg v3)")
        if v3:
            self.properties.setdefault("delta.enableRowTracking", "true")
        self._set("table_format", ICEBERG_COMPAT_V3 if v3 else ICEBERG_COMPAT_V2, "true")
        self._set("table_format", ICEBERG_COMPAT_V2 if v3 else ICEBERG_COMPAT_V3, "false")
        self._set("table_format", UNIVERSAL_FORMATS, "iceberg")

    def _refuse_inapplicable(self, config: Any) -> None:
        """Configs of dbt-spark / dbt-databricks that have no meaning for a Delta table written here:
        failing is better than silently doing nothing."""
        file_format = _get(config, "file_format")
        if file_format is not None and str(file_format).strip().lower() != "delta":
            self.fail("file_format", file_format,
                      "delta (every table this adapter writes is a Delta table; remove file_format)")
        for name in ("clustered_by", "buckets"):
            value = _get(config, name)
            if value not in (None, [], ""):
                self.fail(name, value, "nothing: Hive bucketing is not part of Delta tables. To co-locate rows "
                                       "by columns use zorder_by, or liquid_clustered_by")
        grants = _get(config, "grants")
        if grants:
            self.fail("grants", grants,
                      "no grants: a warehouse folder on open-source Spark has no access control to grant to. "
                      "Control access through the storage (file permissions, bucket policies)")

    def _set(self, config_name: str, key: str, value: str) -> None:
        given = self.properties.get(key)
        if given is not None and given != value:
            self.fail(config_name, value, f"the same value as tblproperties {key}={given!r}, or only one of the two")
        self.properties[key] = value

    def _column_list(self, config: Any, name: str, synonym: str) -> tuple:
        """(columns, the config name used) of a column-list config that has a synonym (zorder_by / zorder,
        liquid_clustered_by / cluster_by); both given must agree."""
        value, other = _get(config, name), _get(config, synonym)
        if value is not None and other is not None and self._columns(synonym, other) != self._columns(name, value):
            self.fail(synonym, other, f"the same columns as {name} ({value!r}), or only one of the two")
        if value is not None:
            return self._columns(name, value), name
        return (self._columns(synonym, other), synonym) if other is not None else ([], name)

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
        """zorder / clustering columns against the model's output columns (a Spark StructType) and the table."""
        if not self.zorder_by and not self.clustering:
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
        name, columns = ("zorder_by", self.zorder_by) if self.zorder_by else ("liquid_clustered_by", self.clustering)
        for c in columns:
            if c.lower() in partitions:
                self.fail(name, columns,
                          f"non-partition columns ('{c}' is in partition_by {self.partition_by}): "
                          + ", ".join(data_columns))
            found = fields.get(c.lower())
            if found is None:
                self.fail(name, columns,
                          f"columns of the model ('{c}' is not one): " + ", ".join(data_columns))
            base = re.split(r"[(<]", found[1])[0]
            if base not in _STATS_TYPES:
                self.fail(name, columns,
                          f"columns with min/max statistics (numbers, strings, dates, timestamps); "
                          f"'{found[0]}' is {found[1]}")


def _kind(constraint: Any) -> str:
    kind = _get(constraint, "type")
    return str(getattr(kind, "value", kind) or "").lower()


def _check_name(constraint: Any, expression: str) -> str:
    """The constraint's name, or one derived from its expression (stable across runs, so an unnamed
    constraint is not dropped and added again each time)."""
    import hashlib

    name = _get(constraint, "name")
    return str(name) if name else "check_" + hashlib.sha1(expression.encode()).hexdigest()[:10]


def contract_constraints(cfg: DeltaConfig, model: Any) -> tuple:
    """({name: SQL} of CHECK constraints, [NOT NULL columns]) of a model whose contract is enforced
    (dbt applies constraints only then); other constraint types are logged as not enforced."""
    from dbt.adapters.events.logging import AdapterLogger

    contract = _get(model, "contract") or _get(_get(model, "config"), "contract") or {}
    if not _truthy(_get(contract, "enforced", False)):
        return {}, []
    checks: Dict[str, str] = {}
    not_null: List[str] = []
    unenforced: List[str] = []

    def add(constraint: Any, column: Optional[str]) -> None:
        kind = _kind(constraint)
        columns = [column] if column else [str(c) for c in (_get(constraint, "columns") or [])]
        if kind == "not_null":
            if not columns:
                cfg.fail("constraints", {"type": "not_null"}, "a not_null constraint on a column, or with columns: [...]")
            not_null.extend(c for c in columns if c.lower() not in {n.lower() for n in not_null})
        elif kind == "check":
            expression = _get(constraint, "expression")
            if not expression or not str(expression).strip():
                cfg.fail("constraints", {"type": "check", "name": _get(constraint, "name")},
                         "a check constraint with an expression, e.g. expression: 'amount >= 0'")
            expression = str(expression).strip()
            name = _check_name(constraint, expression)
            try:
                property_name(name)
            except Exception as e:
                cfg.fail("constraints", {"type": "check", "name": name}, str(e))
            if name.lower() in {n.lower() for n in checks}:
                cfg.fail("constraints", {"type": "check", "name": name}, "each check constraint name once")
            checks[name] = expression
        else:
            unenforced.append(f"{kind} on {', '.join(columns) or 'the model'}")

    for name, column in (_get(model, "columns") or {}).items():
        for constraint in _get(column, "constraints") or []:
            add(constraint, _get(column, "name") or name)
    for constraint in _get(model, "constraints") or []:
        add(constraint, None)
    if unenforced:
        AdapterLogger("Deltalog").warning(
            f"Model '{cfg.model}': constraint(s) {'; '.join(unenforced)} are not enforced by Delta tables (only "
            f"not_null and check are); they are kept in the contract only.")
    return checks, not_null


def table_definition(cfg: DeltaConfig, model: Any):
    """What the model declares about its table beyond the rows, for the commit that writes them:
    properties, persist_docs' description and column comments, the contract's constraints."""
    from deltalog.definition import TableDefinition

    checks, not_null = contract_constraints(cfg, model)
    properties = dict(cfg.properties)
    properties.update({property_name(n): sql for n, sql in checks.items()})
    columns = _get(model, "columns") or {}
    comments = {}
    if cfg.persist_column_docs:
        comments = {(_get(c, "name") or n): (_get(c, "description") or "") for n, c in columns.items()}
    return TableDefinition(
        properties=properties,
        owned_prefixes=(CONSTRAINT_PREFIX,),
        description=(_get(model, "description") or "") if cfg.persist_relation_docs else None,
        column_comments=comments,
        not_null=tuple(not_null),
        clustering=tuple(cfg.clustering),
    )
