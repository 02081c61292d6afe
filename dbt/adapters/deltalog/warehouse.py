"""The catalog is the warehouse folder: `<warehouse>/<schema>/<table>/_delta_log` is a table,
`<warehouse>/<schema>/<view>.view.sql` a dbt view, and `<warehouse>/<schema>/<table>.location` a table
that lives elsewhere (`location_root`, `dbt clone` targets): the file holds its location. Sources
declared with a location (`external`, kept by the runtime) are tables too, but no file of the warehouse
names them.
A profile may attach more warehouses as named catalogs (`catalogs:`): a relation whose dbt `database`
is such a name lives in that warehouse. Spark only ever sees session temporary views, named
`schema.name`, or `catalog.schema.name` for an attached catalog (one backquoted part: temporary views
take one-part names); `session_views.py` keeps them in step with the folders."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

import pyarrow.fs as pafs
from dbt_common.exceptions import DbtRuntimeError

from deltalog.storage import files as fs

VIEW_SUFFIX = ".view.sql"
VIEW_DOCS_SUFFIX = ".view.docs.json"  # persist_docs of a view: {"description": ..., "columns": {name: comment}}
VIEW_CHECK_SUFFIX = ".view.check.json"  # what Spark's check of a view's SQL found (view_check.py)
LOCATION_SUFFIX = ".location"
SCHEMA_MARKER = ".deltalog-schema"  # an empty object: a schema exists on an object store without tables
LOG_DIR = "_delta_log"

# `schema.name` as a relation renders it: one backquoted part holding one dot
_RELATION_REF = re.compile(r"`([^`.\s]+)\.([^`\s]+)`")


def external_key(catalog: Optional[str], schema: str, name: str) -> tuple:
    """A table's key among those that live outside their warehouse's folder (`Warehouse.external`)."""
    return (schema, name) if catalog is None else (catalog, schema, name)


def view_name(schema: str, name: str, catalog: Optional[str] = None) -> str:
    return f"{catalog}.{schema}.{name}" if catalog else f"{schema}.{name}"


@dataclass(frozen=True)
class Entry:
    kind: str  # "table" | "view"
    schema: str
    name: str
    path: str  # table folder or view SQL file


class UnknownCatalogError(DbtRuntimeError):
    """A dbt `database` that names no catalog the profile attaches."""

    def __init__(self, database: str, attached, where: str = ""):
        names = ", ".join(sorted(attached)) or "none"
        super().__init__(
            f"{where}database {database!r} is not a catalog of this profile (attached: {names}). Leave "
            f"`database` unset for the profile's own warehouse, or attach a warehouse under that name in the "
            f"profile's `catalogs`. Nothing was read or written.")


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
    """Layout of one warehouse, a local folder or an object-store prefix (`s3://bucket/wh`, ...). Pure
    storage, through `deltalog.storage.files`: no Spark here. Every path is built from names checked by
    `check_name`, so nothing outside the warehouse is ever read, written or deleted. On an object store
    a schema is the prefix of a marker object (folders do not exist there), and table renames are
    refused: they would copy every object, not move a folder atomically."""

    def __init__(self, root: str, external: Optional[Dict[Tuple[str, str], str]] = None,
                 name: Optional[str] = None, catalogs: Optional[Dict[Optional[str], "Warehouse"]] = None,
                 storage_options: Optional[Dict[str, str]] = None):
        self.on_object_store = fs.is_object_store_uri(root)
        self.storage_options = dict(storage_options or {})
        self._tables: Dict[str, Any] = {}  # location -> DeltaTable, one handle per table
        self.root = str(root).rstrip("/") if self.on_object_store else os.path.abspath(root)
        # (schema, name) -> location of tables that dbt sources declare outside the warehouse; an
        # attached catalog's keys are (catalog, schema, name)
        self.external = external if external is not None else {}
        self.name = name  # the catalog's name (None: the profile's own warehouse)
        # every catalog of the profile by name, None for the profile's own: shared by all of them
        self.catalogs: Dict[Optional[str], Warehouse] = catalogs if catalogs is not None else {None: self}
        self.catalogs.setdefault(name, self)

    def attach(self, name: str, root: str, storage_options: Optional[Dict[str, str]] = None) -> "Warehouse":
        """Another warehouse as the catalog `name` of this profile."""
        return Warehouse(root, self.external, name, self.catalogs, storage_options)

    def of(self, catalog: Optional[str]) -> "Warehouse":
        """The warehouse of a dbt `database`: None is the profile's own; an unknown name is refused."""
        if not catalog:
            return self.catalogs[None]
        found = self.catalogs.get(catalog)
        if found is None:
            raise UnknownCatalogError(catalog, [n for n in self.catalogs if n])
        return found

    def resolve(self, schema: str, name: str) -> Tuple["Warehouse", str, str]:
        """A relation's name as a view or SQL gives it (`schema.name`, or `catalog.schema.name` read as
        schema=catalog, name=`schema.name`) as (its warehouse, schema, name)."""
        if schema in self.catalogs and schema is not None and "." in name:
            inner_schema, inner_name = name.split(".", 1)
            return self.catalogs[schema], inner_schema, inner_name
        return self.catalogs[None], schema, name

    def view_name(self, schema: str, name: str) -> str:
        return view_name(schema, name, self.name)

    def add_external(self, schema: str, name: str, location: str) -> None:
        """The Delta table `schema.name` of this catalog lives at `location` (a source's, or one that
        someone else registered in the catalog's metastore)."""
        self.external[external_key(self.name, schema, name)] = location

    def external_tables(self) -> List[Tuple[str, str, str]]:
        """(schema, name, location) of the sources of this catalog that live outside its folder."""
        width = 2 if self.name is None else 3
        return sorted((key[-2], key[-1], path) for key, path in self.external.items()
                      if len(key) == width and (width == 2 or key[0] == self.name))

    def schema_path(self, schema: str) -> str:
        return self._inside(fs.join(self.root, check_name(schema, "schema", self.root)))

    def folder_path(self, schema: str, name: str) -> str:
        """Where the relation's files are in the warehouse (a table folder; `+ suffix` for the others)."""
        return self._inside(fs.join(self.schema_path(schema), check_name(name, "relation name", self.root)))

    def table_path(self, schema: str, name: str) -> str:
        """The table's location: an external source's, the one a `.location` file names, or the folder."""
        external = self.external.get(external_key(self.name, schema, name))
        if external is not None:
            return external
        return self.location_of(schema, name) or self.folder_path(schema, name)

    def table(self, schema: str, name: str) -> Any:
        """The table's handle (`deltalog.DeltaTable`), made once per location: under this warehouse its
        store uses the warehouse's storage options; an external location, those configured for it."""
        from deltalog.table import DeltaTable

        path = self.table_path(schema, name)
        found = self._tables.get(path)
        if found is None:
            inside = self.on_object_store and (path == self.root or path.startswith(self.root + "/"))
            found = self._tables.setdefault(path, DeltaTable(path, self.storage_options if inside else None))
        return found

    def view_path(self, schema: str, name: str) -> str:
        return self.folder_path(schema, name) + VIEW_SUFFIX

    def location_file(self, schema: str, name: str) -> str:
        return self.folder_path(schema, name) + LOCATION_SUFFIX

    def _read_text(self, path: str) -> Optional[str]:
        try:
            return fs.read_bytes(path).decode("utf-8")
        except FileNotFoundError:
            return None

    def _write_text(self, path: str, text: str) -> None:
        fs.write_bytes(path, text.encode("utf-8"))  # whole: a reader sees the old or the new text

    def location_of(self, schema: str, name: str) -> Optional[str]:
        """The location a `.location` file gives the table, or None when it lives in its folder."""
        text = self._read_text(self.location_file(schema, name))
        return (text or "").strip() or None

    def set_location(self, schema: str, name: str, location: Optional[str]) -> None:
        """Record (None: forget) that the table lives at `location`, outside the warehouse folder."""
        path = self.location_file(schema, name)
        if location is None:
            fs.delete_file(path)
            return
        self.create_schema(schema)
        self._write_text(path, location + "\n")

    def _inside(self, path: str) -> str:
        # Belt and braces: whatever the name checks allow must still be a path under the root.
        inside = (path.startswith(self.root + "/") if self.on_object_store
                  else os.path.commonpath([self.root, os.path.normpath(path)]) == self.root)
        if not inside:
            raise UnsafeNameError(f"{path!r} is outside the warehouse {self.root}; nothing was done.")
        return path

    def is_table(self, schema: str, name: str) -> bool:
        return _has_log(self.table_path(schema, name))

    def is_view(self, schema: str, name: str) -> bool:
        return fs.file_info(self.view_path(schema, name)).type == pafs.FileType.File

    def list_schemas(self) -> List[str]:
        return sorted(e.path for e in fs.list_files(self.root, recursive=False)
                      if e.type == pafs.FileType.Directory and not e.path.startswith("."))

    def schema_exists(self, schema: str) -> bool:
        return fs.file_info(self.schema_path(schema)).type == pafs.FileType.Directory

    def create_schema(self, schema: str) -> None:
        path = self.schema_path(schema)
        if not self.on_object_store:
            os.makedirs(path, exist_ok=True)
        elif not self.schema_exists(schema):
            fs.write_bytes(fs.join(path, SCHEMA_MARKER), b"")

    def drop_schema(self, schema: str) -> None:
        fs.delete_tree(self.schema_path(schema))

    def list_relations(self, schema: str) -> List[Entry]:
        folder = self.schema_path(schema)
        found = []
        for e in fs.list_files(folder, recursive=False):
            path = fs.join(folder, e.path)
            if e.path.startswith("."):
                continue
            if e.type == pafs.FileType.Directory and _has_log(path):
                found.append(Entry("table", schema, e.path, path))
            elif e.type == pafs.FileType.File and e.path.endswith(VIEW_SUFFIX):
                found.append(Entry("view", schema, e.path[: -len(VIEW_SUFFIX)], path))
            elif e.type == pafs.FileType.File and e.path.endswith(LOCATION_SUFFIX):
                name = e.path[: -len(LOCATION_SUFFIX)]
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
        return self._read_text(self.view_path(schema, name))

    def write_view_sql(self, schema: str, name: str, sql: str) -> None:
        self.create_schema(schema)
        self._write_text(self.view_path(schema, name), sql)

    def drop_view(self, schema: str, name: str) -> None:
        for path in (self.view_path(schema, name), self.view_docs_path(schema, name),
                     self.view_check_path(schema, name)):
            fs.delete_file(path)

    def view_docs_path(self, schema: str, name: str) -> str:
        return self.folder_path(schema, name) + VIEW_DOCS_SUFFIX

    def write_view_docs(self, schema: str, name: str, docs: Optional[dict]) -> None:
        """A view's persisted docs (None: none), next to its SQL."""
        import json

        path = self.view_docs_path(schema, name)
        if not docs:
            fs.delete_file(path)
            return
        self._write_text(path, json.dumps(docs))

    def view_check_path(self, schema: str, name: str) -> str:
        return self.folder_path(schema, name) + VIEW_CHECK_SUFFIX

    def write_view_check(self, schema: str, name: str, check: Optional[dict]) -> None:
        """What Spark's check of the view's SQL found (None: no check kept), next to its SQL."""
        import json

        path = self.view_check_path(schema, name)
        if check is None:
            fs.delete_file(path)
        else:
            self._write_text(path, json.dumps(check))

    def read_view_check(self, schema: str, name: str) -> dict:
        import json

        try:
            found = json.loads(self._read_text(self.view_check_path(schema, name)) or "{}")
        except ValueError:
            return {}
        return found if isinstance(found, dict) else {}

    def read_view_docs(self, schema: str, name: str) -> dict:
        import json

        try:
            return json.loads(self._read_text(self.view_docs_path(schema, name)) or "{}")
        except ValueError:
            return {}

    def drop_table(self, schema: str, name: str) -> None:
        """A table in the warehouse folder is deleted; one that lives elsewhere is only forgotten
        (its data is never deleted from outside the warehouse)."""
        if self.location_of(schema, name) is not None:
            self.set_location(schema, name, None)
            return
        fs.delete_tree(self.folder_path(schema, name))

    def rename(self, schema: str, name: str, new_schema: str, new_name: str) -> None:
        entry = self.lookup(schema, name)
        if entry is None:
            return
        self.create_schema(new_schema)
        if entry.kind == "table" and self.location_of(schema, name) is not None:
            self._move_small(self.location_file(schema, name), self.location_file(new_schema, new_name))
            return
        if entry.kind == "table":
            if self.on_object_store:
                raise DbtRuntimeError(
                    f"cannot rename table {schema}.{name} to {new_schema}.{new_name} in the warehouse "
                    f"{self.root}: an object store has no atomic rename of a table's folder (it would copy "
                    f"every object, and a reader could see half of it). Nothing was changed. Build the "
                    f"table under its new name instead.")
            os.replace(entry.path, self.folder_path(new_schema, new_name))
            return
        self._move_small(entry.path, self.view_path(new_schema, new_name))
        if fs.exists(self.view_docs_path(schema, name)):
            self._move_small(self.view_docs_path(schema, name), self.view_docs_path(new_schema, new_name))

    def _move_small(self, source: str, target: str) -> None:
        """A view's SQL, docs or a location file: renamed locally, written anew then deleted on a store."""
        if not self.on_object_store:
            os.replace(source, target)
            return
        fs.write_bytes(target, fs.read_bytes(source))
        fs.delete_file(source)


def _has_log(table_path: str) -> bool:
    return fs.file_info(fs.join(table_path, LOG_DIR)).type == pafs.FileType.Directory


def latest_log_version(table: Any) -> Optional[int]:
    """The newest version named in the `_delta_log` of a table (a `DeltaTable` or a location; a cheap
    listing, not a snapshot load): whether a session view is stale."""
    from deltalog.log_segment import latest_version
    from deltalog.table import as_table

    return latest_version(as_table(table).store)


def registered_by_others(metastore: Any, warehouse: "Warehouse", schema: str, listed: Any) -> List["Entry"]:
    """The Delta tables that others registered in the metastore under `schema` (not in the warehouse
    folder, so not in `listed`): known to `warehouse` from then on as tables that live elsewhere. Their
    views are not: their SQL is another engine's."""
    found = []
    for name in metastore.tables(schema):
        if name in listed:
            continue
        location = metastore.location(schema, name)
        if location and latest_log_version(location) is not None:
            warehouse.add_external(schema, name, location)
            found.append(Entry("table", schema, name, location))
    return found


def referenced_relations(sql: str) -> List[Tuple[str, str]]:
    seen = []
    for m in _RELATION_REF.finditer(sql):
        pair = (m.group(1), m.group(2))
        if pair not in seen:
            seen.append(pair)
    return seen
