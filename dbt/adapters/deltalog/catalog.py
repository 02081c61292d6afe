"""The catalog is the warehouse folder: `<warehouse>/<schema>/<table>/_delta_log` is a table,
`<warehouse>/<schema>/<view>.view.sql` a dbt view, and `<warehouse>/<schema>/<table>.location` a table
that lives elsewhere (`location_root`, `dbt clone` targets): the file holds its location. Sources
declared with a location (`EXTERNAL_TABLES`) are tables too, but no file of the warehouse names them.
Spark only ever sees session temporary views named `schema.name` (one backquoted part); this module
keeps them in step with the folder."""

from __future__ import annotations

import os
import re
import shutil
import threading
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

from dbt_common.exceptions import DbtRuntimeError

VIEW_SUFFIX = ".view.sql"
VIEW_DOCS_SUFFIX = ".view.docs.json"  # persist_docs of a view: {"description": ..., "columns": {name: comment}}
LOCATION_SUFFIX = ".location"
LOG_DIR = "_delta_log"

# (schema, name) -> location of Delta tables declared as dbt sources with a location; filled as
# dbt resolves source() (DeltalogRelation.create_from), read wherever a relation is located.
EXTERNAL_TABLES: Dict[Tuple[str, str], str] = {}
# The dbt project's folder: relative source locations and location_root are resolved against it.
PROJECT_ROOT: Optional[str] = None

# `schema.name` as a relation renders it: one backquoted part holding one dot
_RELATION_REF = re.compile(r"`([^`.\s]+)\.([^`\s]+)`")
_LOG_FILE = re.compile(r"^(\d{20})\.(json|checkpoint.*\.parquet)$")


def view_name(schema: str, name: str) -> str:
    return f"{schema}.{name}"


@dataclass(frozen=True)
class Entry:
    kind: str  # "table" | "view"
    schema: str
    name: str
    path: str  # table folder or view SQL file


class UnsafeNameError(DbtRuntimeError):
    """A schema or relation name that would reach outside the warehouse (or into a hidden folder)."""


_FORBIDDEN_CHARACTERS = ("/", "\\", "`", "\0")


def check_name(value: object, what: str, root: str) -> str:
    """`value` as one folder or file name inside the warehouse, or UnsafeNameError naming it. A name
    is a single path component: never empty, '.', '..', hidden, or holding a separator."""
    problem = None
    if not isinstance(value, str) or not value.strip():
        problem = "is empty"
    elif any(c in value for c in _FORBIDDEN_CHARACTERS) or any(ord(c) < 32 for c in value):
        problem = "holds a path separator, a backquote or a control character"
    elif value in (".", ".."):
        problem = "is a relative folder reference"
    elif value.startswith("."):
        problem = "starts with '.' (hidden folders are not relations)"
    if problem:
        raise UnsafeNameError(
            f"{what} {value!r} cannot name a table or view of the warehouse {root}: it {problem}. Schema, "
            f"alias and identifier must each be one plain name (no '/', '\\', '`', not '.' or '..', not "
            f"starting with '.'). Nothing was read, written or deleted.")
    return value


class Warehouse:
    """Folder layout of one warehouse. Pure file system: no Spark here. Every path is built from
    names checked by `check_name`, so nothing outside the warehouse is ever read, written or deleted."""

    def __init__(self, root: str):
        self.root = os.path.abspath(root)

    def schema_path(self, schema: str) -> str:
        return self._inside(os.path.join(self.root, check_name(schema, "schema", self.root)))

    def folder_path(self, schema: str, name: str) -> str:
        """Where the relation's files are in the warehouse (a table folder; `+ suffix` for the others)."""
        return self._inside(os.path.join(self.schema_path(schema), check_name(name, "relation name", self.root)))

    def table_path(self, schema: str, name: str) -> str:
        """The table's location: an external source's, the one a `.location` file names, or the folder."""
        external = EXTERNAL_TABLES.get((schema, name))
        if external is not None:
            return external
        return self.location_of(schema, name) or self.folder_path(schema, name)

    def view_path(self, schema: str, name: str) -> str:
        return self.folder_path(schema, name) + VIEW_SUFFIX

    def location_file(self, schema: str, name: str) -> str:
        return self.folder_path(schema, name) + LOCATION_SUFFIX

    def location_of(self, schema: str, name: str) -> Optional[str]:
        """The location a `.location` file gives the table, or None when it lives in its folder."""
        try:
            with open(self.location_file(schema, name), encoding="utf-8") as f:
                return f.read().strip() or None
        except FileNotFoundError:
            return None

    def set_location(self, schema: str, name: str, location: Optional[str]) -> None:
        """Record (None: forget) that the table lives at `location`, outside the warehouse folder."""
        path = self.location_file(schema, name)
        if location is None:
            try:
                os.remove(path)
            except FileNotFoundError:
                pass
            return
        self.create_schema(schema)
        tmp = path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(location + "\n")
        os.replace(tmp, path)

    def _inside(self, path: str) -> str:
        # Belt and braces: whatever the name checks allow must still be a path under the root.
        if os.path.commonpath([self.root, os.path.normpath(path)]) != self.root:
            raise UnsafeNameError(f"{path!r} is outside the warehouse {self.root}; nothing was done.")
        return path

    def is_table(self, schema: str, name: str) -> bool:
        return _has_log(self.table_path(schema, name))

    def is_view(self, schema: str, name: str) -> bool:
        return os.path.isfile(self.view_path(schema, name))

    def list_schemas(self) -> List[str]:
        if not os.path.isdir(self.root):
            return []
        return sorted(e.name for e in os.scandir(self.root) if e.is_dir() and not e.name.startswith("."))

    def schema_exists(self, schema: str) -> bool:
        return os.path.isdir(self.schema_path(schema))

    def create_schema(self, schema: str) -> None:
        os.makedirs(self.schema_path(schema), exist_ok=True)

    def drop_schema(self, schema: str) -> None:
        shutil.rmtree(self.schema_path(schema), ignore_errors=True)

    def list_relations(self, schema: str) -> List[Entry]:
        folder = self.schema_path(schema)
        if not os.path.isdir(folder):
            return []
        found = []
        for e in os.scandir(folder):
            if e.is_dir() and os.path.isdir(os.path.join(e.path, LOG_DIR)):
                found.append(Entry("table", schema, e.name, e.path))
            elif e.is_file() and e.name.endswith(VIEW_SUFFIX):
                found.append(Entry("view", schema, e.name[: -len(VIEW_SUFFIX)], e.path))
            elif e.is_file() and e.name.endswith(LOCATION_SUFFIX):
                name = e.name[: -len(LOCATION_SUFFIX)]
                location = self.location_of(schema, name)
                if location and _has_log(location):
                    found.append(Entry("table", schema, name, location))
        return sorted(found, key=lambda x: x.name)

    def lookup(self, schema: str, name: str) -> Optional[Entry]:
        if self.is_table(schema, name):
            return Entry("table", schema, name, self.table_path(schema, name))
        if self.is_view(schema, name):
            return Entry("view", schema, name, self.view_path(schema, name))
        return None

    def read_view_sql(self, schema: str, name: str) -> Optional[str]:
        try:
            with open(self.view_path(schema, name), encoding="utf-8") as f:
                return f.read()
        except FileNotFoundError:
            return None

    def write_view_sql(self, schema: str, name: str, sql: str) -> None:
        self.create_schema(schema)
        path = self.view_path(schema, name)
        tmp = path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(sql)
        os.replace(tmp, path)  # atomic: a reader sees the old or the new SQL

    def drop_view(self, schema: str, name: str) -> None:
        for path in (self.view_path(schema, name), self.view_docs_path(schema, name)):
            try:
                os.remove(path)
            except FileNotFoundError:
                pass

    def view_docs_path(self, schema: str, name: str) -> str:
        return self.folder_path(schema, name) + VIEW_DOCS_SUFFIX

    def write_view_docs(self, schema: str, name: str, docs: Optional[dict]) -> None:
        """A view's persisted docs (None: none), next to its SQL."""
        import json

        path = self.view_docs_path(schema, name)
        if not docs:
            try:
                os.remove(path)
            except FileNotFoundError:
                pass
            return
        tmp = path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(docs, f)
        os.replace(tmp, path)

    def read_view_docs(self, schema: str, name: str) -> dict:
        import json

        try:
            with open(self.view_docs_path(schema, name), encoding="utf-8") as f:
                return json.load(f)
        except (FileNotFoundError, ValueError):
            return {}

    def drop_table(self, schema: str, name: str) -> None:
        """A table in the warehouse folder is deleted; one that lives elsewhere is only forgotten
        (its data is never deleted from outside the warehouse)."""
        if self.location_of(schema, name) is not None:
            self.set_location(schema, name, None)
            return
        shutil.rmtree(self.folder_path(schema, name), ignore_errors=True)

    def rename(self, schema: str, name: str, new_schema: str, new_name: str) -> None:
        entry = self.lookup(schema, name)
        if entry is None:
            return
        self.create_schema(new_schema)
        if entry.kind == "table" and self.location_of(schema, name) is not None:
            os.replace(self.location_file(schema, name), self.location_file(new_schema, new_name))
            return
        target = (
            self.folder_path(new_schema, new_name)
            if entry.kind == "table"
            else self.view_path(new_schema, new_name)
        )
        os.replace(entry.path, target)
        if entry.kind == "view" and os.path.exists(self.view_docs_path(schema, name)):
            os.replace(self.view_docs_path(schema, name), self.view_docs_path(new_schema, new_name))


def _has_log(table_path: str) -> bool:
    return os.path.isdir(os.path.join(table_path, LOG_DIR))


def latest_log_version(table_path: str) -> Optional[int]:
    """The newest version named in `_delta_log` (a cheap listing, not a snapshot load);
    used only to decide whether a session view is stale."""
    try:
        names = os.listdir(os.path.join(table_path, LOG_DIR))
    except FileNotFoundError:
        return None
    best = None
    for n in names:
        m = _LOG_FILE.match(n)
        if m:
            v = int(m.group(1))
            if best is None or v > best:
                best = v
    return best


def referenced_relations(sql: str) -> List[Tuple[str, str]]:
    seen = []
    for m in _RELATION_REF.finditer(sql):
        pair = (m.group(1), m.group(2))
        if pair not in seen:
            seen.append(pair)
    return seen


# schema.name with either part plain or backquoted (`schema`.name, `schema`.`name`)
_PART = r"(?:`[^`.]+`|[A-Za-z_]\w*)"
_UNQUOTED_REF = re.compile(rf"(?<![\w.`])({_PART})\.({_PART})(?![\w`])")
_QUOTED_OR_COMMENT = re.compile(r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"|--[^\n]*|/\*.*?\*/", re.DOTALL)


def quote_warehouse_refs(sql: str, warehouse: Warehouse) -> str:
    """Write `schema.table` for an unquoted schema.table that names a warehouse relation, so SQL
    written by hand (hooks, analyses, `dbt show --inline`) finds the session view. Text inside
    quotes and comments is left alone, and so is anything that is not in the warehouse."""
    if "." not in sql:
        return sql
    schemas = set(warehouse.list_schemas())
    if not schemas:
        return sql

    def fix(segment: str) -> str:
        def repl(m):
            schema, name = m.group(1).strip("`"), m.group(2).strip("`")
            if schema in schemas and warehouse.lookup(schema, name) is not None:
                return f"`{schema}.{name}`"
            return m.group(0)

        return _UNQUOTED_REF.sub(repl, segment)

    out, pos = [], 0
    for m in _QUOTED_OR_COMMENT.finditer(sql):
        out.append(fix(sql[pos : m.start()]))
        out.append(m.group(0))
        pos = m.end()
    out.append(fix(sql[pos:]))
    return "".join(out)


class SessionViews:
    """Temporary views of one SparkSession, kept in step with one or more warehouses.

    A table's view is re-registered only when its log has a newer version than the one the view
    was built on, so each statement reads the latest committed snapshot of what it names."""

    def __init__(self):
        self._lock = threading.RLock()
        # view name -> (kind, warehouse root, version or SQL text)
        self._registered: Dict[str, Tuple[str, str, object]] = {}

    def forget(self, spark, name: str) -> None:
        with self._lock:
            self._registered.pop(name, None)
            spark.catalog.dropTempView(name)

    def refresh_for_sql(self, spark, warehouse: Warehouse, sql: str) -> None:
        for schema, name in referenced_relations(sql):
            self.ensure(spark, warehouse, schema, name)

    def ensure(self, spark, warehouse: Warehouse, schema: str, name: str, _depth: int = 0) -> bool:
        """Make `schema.name` current; returns whether the warehouse holds such a relation."""
        vname = view_name(schema, name)
        with self._lock:
            known = self._registered.get(vname)
            if warehouse.is_table(schema, name):
                version = latest_log_version(warehouse.table_path(schema, name))
                if known != ("table", warehouse.root, version):
                    from deltalog.spark import reader

                    reader.register_view(spark, vname, warehouse.table_path(schema, name), version=version)
                    self._registered[vname] = ("table", warehouse.root, version)
                return True
            sql = warehouse.read_view_sql(schema, name)
            if sql is not None:
                if _depth < 50:
                    # a dbt view is SQL over other relations: make those current first
                    for ref_schema, ref_name in referenced_relations(sql):
                        if (ref_schema, ref_name) != (schema, name):
                            self.ensure(spark, warehouse, ref_schema, ref_name, _depth + 1)
                if known != ("view", warehouse.root, sql):
                    spark.sql(f"create or replace temporary view `{vname}` as\n{sql}")
                    self._registered[vname] = ("view", warehouse.root, sql)
                return True
            if known is not None and known[1] == warehouse.root:
                # gone from the folder (dropped elsewhere): do not serve stale data
                self._registered.pop(vname, None)
                spark.catalog.dropTempView(vname)
            return False

    def register_all(self, spark, warehouse: Warehouse) -> None:
        """Recreate every view of the warehouse (a session opening)."""
        for schema in warehouse.list_schemas():
            for entry in warehouse.list_relations(schema):
                try:
                    self.ensure(spark, warehouse, entry.schema, entry.name)
                except Exception:  # a broken view must not stop the session from opening
                    pass


SESSION_VIEWS = SessionViews()
