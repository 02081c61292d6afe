"""SQL about the warehouse's schemas and relations that Spark's session catalog cannot answer.

Relations are session temporary views named `schema.name` (warehouse.py), and temporary views cannot
live in a database, so Spark alone answers `show tables in shop` with SCHEMA_NOT_FOUND and refuses
time travel on a view. The SQL gateway (sql_gateway.py) hands SHOW and DESCRIBE statements here, as
its tokens:

- SHOW SCHEMAS | DATABASES [LIKE p], SHOW TABLES | VIEWS {IN | FROM} schema [[LIKE] p] and
  SHOW TABLE EXTENDED {IN | FROM} schema LIKE p are answered from the warehouse folder (and, with a
  metastore, the Delta tables others registered there under the schema), with the columns Spark gives them (what dbt-spark and spark-utils parse);
- DESCRIBE [TABLE] EXTENDED | FORMATTED schema.name, with the detailed information Spark gives.

Time travel on a table (`VERSION AS OF n`, `TIMESTAMP AS OF 'ts'`) is a temporary view of that
snapshot (`as_of_view`); the change feed, one of its changes (`changes_view`).
"""

from __future__ import annotations

import re
from typing import Any, List, Optional

from dbt_common.exceptions import DbtRuntimeError

from dbt.adapters.deltalog.warehouse import Warehouse

_STRING_TYPES = ("STRING", "RAW_STRING", "NATIONAL_STRING")


def like_pattern(pattern: str) -> "re.Pattern[str]":
    """Spark's SHOW ... LIKE pattern: `*` any characters, `|` alternatives, case-insensitive."""
    parts = [".*".join(re.escape(p) for p in alt.strip().split("*")) for alt in pattern.split("|")]
    return re.compile("|".join(f"(?:{p})" for p in parts), re.IGNORECASE)


# --- SHOW statements ------------------------------------------------------------------------------

def show_statement(spark, warehouse: Warehouse, tokens: List[Any]):
    """The DataFrame answering a SHOW statement about warehouse schemas, or None for any other SQL
    (which Spark then runs itself). `tokens`: the statement as the SQL gateway read it."""
    words = [t.word for t in tokens]
    if len(words) < 2 or words[0] != "SHOW":
        return None
    if words[1] in ("SCHEMAS", "DATABASES", "NAMESPACES"):
        pattern = _like_at(tokens, 2)
        if pattern is False:
            return None
        names = [s for s in warehouse.list_schemas() if pattern is None or like_pattern(pattern).fullmatch(s)]
        return spark.createDataFrame([(s,) for s in names], "namespace string")
    extended = words[1:3] == ["TABLE", "EXTENDED"]
    if not extended and words[1] not in ("TABLES", "VIEWS"):
        return None
    at = 3 if extended else 2
    if at + 1 >= len(tokens) or words[at] not in ("IN", "FROM"):
        return None  # no schema named: Spark's current database, not the warehouse's
    schema, after = _identifier(tokens[at + 1]), at + 2
    catalogs = [name for name in warehouse.catalogs if name]
    if schema in catalogs and after + 1 < len(tokens) and tokens[after].kind == "DOT":
        warehouse, schema, after = warehouse.of(schema), _identifier(tokens[after + 1]), after + 2
    elif schema and schema.count(".") == 1 and schema.split(".")[0] in catalogs:  # `catalog.schema`
        catalog, schema = schema.split(".")
        warehouse = warehouse.of(catalog)
    pattern = _like_at(tokens, after)
    if pattern is False or schema is None:
        return None
    if not warehouse.schema_exists(schema):
        raise DbtRuntimeError(
            f"[SCHEMA_NOT_FOUND] The schema `{schema}` is not in the warehouse {warehouse.root}; its schemas "
            f"are: {', '.join(warehouse.list_schemas()) or 'none yet'}.")
    match = like_pattern(pattern).fullmatch if pattern is not None else (lambda _: True)
    entries = warehouse.list_relations(schema)
    if words[1] != "VIEWS":
        entries += _registered_by_others(warehouse, schema, {e.name for e in entries})
    entries = [e for e in entries if match(e.name)]
    if words[1] == "VIEWS":
        rows = [(schema, e.name, False) for e in entries if e.kind == "view"]
        return spark.createDataFrame(rows, "namespace string, viewName string, isTemporary boolean")
    if not extended:
        rows = [(schema, e.name, False) for e in entries]
        return spark.createDataFrame(rows, "namespace string, tableName string, isTemporary boolean")
    rows = [(schema, e.name, False, _information(spark, warehouse, e)) for e in entries]
    return spark.createDataFrame(rows, "namespace string, tableName string, isTemporary boolean, information string")


def _registered_by_others(warehouse: Warehouse, schema: str, listed: set) -> list:
    """With a metastore for this catalog (profile `catalog`), the Delta tables others registered under
    the schema, as `list_relations` lists them."""
    from dbt.adapters.deltalog.runtime.session import RUNTIME

    metastore = RUNTIME.metastores.get(warehouse.name)
    if metastore is None:
        return []
    from dbt.adapters.deltalog.warehouse import registered_by_others

    return registered_by_others(metastore, warehouse, schema, listed)


def _identifier(token: Any) -> Optional[str]:
    if token.kind in ("IDENTIFIER", "VAR") or token.text.isidentifier():
        return token.text
    return None


def _like_at(tokens: List[Any], i: int):
    """The LIKE pattern from token i on: a string, None when the statement ends there, False when
    something else follows (not a form answered here)."""
    if i < len(tokens) and tokens[i].word == "LIKE":
        i += 1
    if i == len(tokens):
        return None
    if i == len(tokens) - 1 and tokens[i].kind in _STRING_TYPES:
        return tokens[i].text
    return False


def describe_statement(spark, warehouse: Warehouse, tokens: List[Any]):
    """DESCRIBE [TABLE] EXTENDED | FORMATTED schema.name on a warehouse relation: Spark's column rows
    for its session view, then the `# Detailed Table Information` Spark gives a catalog relation
    (Type, Provider, Location, Comment: the persisted description of a table or a view, View Text).
    None for other SQL, which Spark runs itself. `tokens`: the statement as the SQL gateway read it."""
    words = [t.word for t in tokens]
    if len(words) < 3 or words[0] not in ("DESCRIBE", "DESC"):
        return None
    at = 2 if words[1] == "TABLE" else 1
    if at >= len(words) or words[at] not in ("EXTENDED", "FORMATTED"):
        return None
    names = [t.text for t in tokens[at + 1:] if t.kind != "DOT"]
    if len(names) == 1 and "." in names[0]:  # `schema.name` in one pair of backquotes
        names = names[0].split(".", 1)
    if len(names) == 3:  # catalog.schema.name
        names = [names[0], f"{names[1]}.{names[2]}"]
    if len(names) != 2:
        return None
    warehouse, schema, name = warehouse.resolve(names[0], names[1])
    entry = warehouse.lookup(schema, name)
    if entry is None:
        return None
    from dbt.adapters.deltalog.runtime.session import RUNTIME

    RUNTIME.views(spark).ensure(warehouse, entry.schema, entry.name)
    rows = [tuple(r) for r in spark.sql(f"describe table `{warehouse.view_name(entry.schema, entry.name)}`").collect()]
    rows += [("", "", ""), ("# Detailed Table Information", "", ""), ("Catalog", warehouse.name or "spark_catalog", ""),
             ("Database", entry.schema, ""), ("Table", entry.name, "")]
    if entry.kind == "table":
        snap = warehouse.table(entry.schema, entry.name).snapshot()
        if snap.metadata.description:
            rows.append(("Comment", snap.metadata.description, ""))
        rows += [("Type", "MANAGED", ""), ("Provider", "delta", ""), ("Location", entry.path, ""),
                 ("Table Properties", "[" + ", ".join(f"{k}={v}" for k, v in sorted(snap.configuration.items())) + "]", "")]
    else:
        docs = warehouse.read_view_docs(entry.schema, entry.name)
        if docs.get("description"):
            rows.append(("Comment", docs["description"], ""))
        rows += [("Type", "VIEW", ""), ("View Text", warehouse.read_view_sql(entry.schema, entry.name) or "", "")]
    return spark.createDataFrame(rows, "col_name string, data_type string, comment string")


def _information(spark, warehouse: Warehouse, entry) -> str:
    """What Spark's SHOW TABLE EXTENDED prints per relation (dbt-spark reads Type and Provider)."""
    lines = ["Catalog: spark_catalog", f"Database: {entry.schema}", f"Table: {entry.name}"]
    try:
        from dbt.adapters.deltalog.runtime.session import RUNTIME

        RUNTIME.views(spark).ensure(warehouse, entry.schema, entry.name)
        schema = spark.table(f"`{warehouse.view_name(entry.schema, entry.name)}`").schema
    except Exception:  # a broken view still gets listed
        schema = None
    if entry.kind == "table":
        lines += ["Type: MANAGED", "Provider: delta", f"Location: file:{entry.path}"]
    else:
        lines += ["Type: VIEW", f"View Text: {warehouse.read_view_sql(entry.schema, entry.name) or ''}"]
    if schema is not None:
        lines.append("Schema: root")
        lines += [f" |-- {f.name}: {f.dataType.simpleString()} (nullable = {str(f.nullable).lower()})"
                  for f in schema.fields]
    return "\n".join(lines) + "\n"


# --- time travel ----------------------------------------------------------------------------------

def as_of_view(spark, table: Any, relation_name: str, version: Optional[int] = None,
               timestamp: Any = None) -> str:
    """A temporary view of the table (a `DeltaTable`) at `version` or at the last commit at or before
    `timestamp`; returns its quoted name for SQL."""
    from deltalog.spark.reader import snapshot_dataframe

    snap = table.snapshot(version=version, timestamp=timestamp)
    view = snapshot_view_name(relation_name, f"v{snap.version}")
    snapshot_dataframe(spark, snap).createOrReplaceTempView(f"`{view}`")
    return f"`{view}`"


def changes_view(spark, table: Any, relation_name: str, start_version: int,
                 end_version: Optional[int] = None) -> str:
    """A temporary view of the change data feed of the table (a `DeltaTable`) from `start_version` to
    `end_version`; returns its quoted name for SQL."""
    from deltalog.spark.change_data import changes_dataframe

    df = changes_dataframe(spark, table.store, start_version, end_version)
    view = snapshot_view_name(relation_name, f"changes_{start_version}_{'latest' if end_version is None else end_version}")
    df.createOrReplaceTempView(f"`{view}`")
    return f"`{view}`"


def snapshot_view_name(relation_name: str, suffix: str) -> str:
    """The temporary view holding one reading of the table `relation_name` (its view's name, dotted) at
    a version or over a range of changes."""
    return "__deltalog_" + re.sub(r"[^A-Za-z0-9_]", "_", f"{relation_name.replace('.', '__')}__{suffix}")
