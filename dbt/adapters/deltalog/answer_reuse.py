"""A data test's answer, reused while nothing it reads has changed.

dbt runs every data test on every build, and most builds leave most tables as they were. A query
answered in this process (driver_queries.py) holds only constructs that mean the same in Spark and DuckDB,
none of them reading the clock or chance: its answer is a function of its SQL and of what it reads. So the
answer is kept under a key made of the SQL, each table it reaches (its location and its latest version
as the log names it: deltalog.snapshot_reuse), each dbt view's SQL on the way, and what computed it (this
code, DuckDB's and sqlglot's versions, the time zone). A later command whose key is the same takes the
answer without reading a row; one commit to any table it reads, or a changed view or test, is a new key.

Kept as one small JSON file per answer in the user's cache folder (`$XDG_CACHE_HOME/deltalog/answers`,
`~/.cache/...` without it: deltalog/user_cache.py); files unused for 14 days are removed.
`spark.deltalog.answerReuse: false` in the profile's `spark_conf` switches it off."""
from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, List, Optional

from deltalog import user_cache

from dbt.adapters.deltalog.driver_queries import _VIEW_DEPTH, Answer, ReadSql, Relations

_MAX_ROWS = 1000
_UNUSED_DAYS = 14
_KINDS = (int, bool, str, type(None))  # values kept exactly by JSON (a float or a decimal is not kept)


@dataclass
class Kept:
    """What a query is known by: `key` (None: it cannot be known, so nothing is reused or kept) and the
    versions it names (`schema.table@vN`, as driver_queries labels what it read)."""
    key: Optional[str]
    labels: List[str]

    def answer(self) -> Optional[Answer]:
        if self.key is None:
            return None
        path = _folder() / f"{self.key}.json"
        try:
            kept = json.loads(path.read_bytes())
            os.utime(path)  # used: not removed as unused
        except (OSError, ValueError):
            return None
        return Answer([tuple(c) for c in kept["columns"]], [tuple(r) for r in kept["rows"]], kept["tables"])

    def keep(self, answer: Answer) -> None:
        """Keep `answer` when it read exactly the versions the key names and its values are kept exactly."""
        if self.key is None or sorted(answer.tables) != sorted(self.labels) or len(answer.rows) > _MAX_ROWS:
            return
        if not all(type(v) in _KINDS for row in answer.rows for v in row):
            return
        folder = _folder()
        try:
            folder.mkdir(mode=0o700, parents=True, exist_ok=True)  # answers may hold values of the data
            _remove_unused(folder)
            part = folder / f"{self.key}.{os.getpid()}.{threading.get_ident()}.part"
            part.write_text(json.dumps({"columns": answer.columns, "rows": answer.rows, "tables": answer.tables}))
            os.replace(part, folder / f"{self.key}.json")
        except OSError:
            pass  # a cache that cannot be written is only not used


def known_by(warehouse: Any, sql: str, relations: Relations, read_sql: ReadSql) -> Kept:
    """The key of `sql` (as the SQL gateway rewrote it, naming `relations`) over what it reads now."""
    parts: list = [_computed_by(), sql]
    labels: List[str] = []
    try:
        known = _walk(warehouse, relations, read_sql, parts, labels, 0)
    except Exception:  # anything unreadable here: the query's own route says what is wrong
        known = False
    key = hashlib.sha256(json.dumps(parts).encode()).hexdigest() if known else None
    return Kept(key, labels)


def _walk(warehouse: Any, relations: Relations, read_sql: ReadSql, parts: list, labels: List[str],
          depth: int) -> bool:
    from deltalog.snapshot_reuse import latest_version_key

    if depth > _VIEW_DEPTH:  # as deep as driver_queries inlines views
        return False
    for catalog, schema, name in relations:
        holder = warehouse.of(catalog)
        if holder.is_table(schema, name):
            version_key = latest_version_key(holder.table(schema, name))
            if version_key is None:
                return False
            parts.append(["table", holder.table_path(schema, name), version_key[1]])
            label = f"{schema}.{name}@v{version_key[0]}"
            if label not in labels:
                labels.append(label)
            continue
        view_sql = holder.read_view_sql(schema, name)
        if view_sql is None:
            return False
        text, view_relations = read_sql(holder, view_sql)
        parts.append(["view", holder.view_name(schema, name), text])
        if not _walk(holder, view_relations, read_sql, parts, labels, depth + 1):
            return False
    return True


_stamp: Optional[str] = None


def _computed_by() -> str:
    """This code (the modules that decide and compute an answer), DuckDB's and sqlglot's versions and
    the time zone: a change to any of them is a new key."""
    global _stamp
    if _stamp is None:
        from importlib.metadata import version

        digest = hashlib.sha256()
        for module in ("driver_queries.py", "sql_gateway.py", "answer_reuse.py"):
            digest.update(Path(__file__).with_name(module).read_bytes())
        digest.update(f"{version('duckdb')} {version('sqlglot')} {os.environ.get('TZ')} {time.tzname} "
                      f"{time.timezone}".encode())
        _stamp = digest.hexdigest()
    return _stamp


def _folder() -> Path:
    return Path(user_cache.folder("answers"))


_pruned = False


def _remove_unused(folder: Path) -> None:
    """Once a day at most (a stamp file says when it last ran): remove answers unused for 14 days."""
    global _pruned
    if _pruned:
        return
    _pruned = True
    stamp = folder / ".pruned"
    now = time.time()
    try:
        if now - stamp.stat().st_mtime < 86400:
            return
    except FileNotFoundError:
        pass
    stamp.touch()
    for entry in os.scandir(folder):
        try:
            if entry.name.endswith((".json", ".part")) and now - entry.stat().st_mtime > _UNUSED_DAYS * 86400:
                os.unlink(entry.path)
        except OSError:
            pass
