"""Auto-compaction, as Delta names it: on a table with `delta.autoOptimize.autoCompact` (`true` or
`auto`), after a write commits, the partitions it wrote to that hold at least `minNumFiles` small files
(below `minFileSize`) have those files compacted, and files whose deletion vectors delete more than 5 %
of their rows (`maxDeletedRowsRatio`) rewritten without those rows, in one OPTIMIZE commit whose actions all carry
`dataChange=false` (operation parameter `auto: true`).

It runs in the writer's thread right after the commit, so a stream's next batch waits for it; it reads
only the small files of the partitions the write touched, so its cost follows the write's size, not the
table's. Its commit reads just those files: a concurrent append never conflicts with it, and if a
concurrent DELETE or MERGE removed one of them first, the compaction is dropped (the write stands). The
thresholds are Delta's Spark settings, read from the session:
`spark.databricks.delta.autoCompact.minNumFiles` (50), `...maxFileSize` (128 MiB, the output file size)
and `...minFileSize` (half of maxFileSize).
"""
from __future__ import annotations

import logging
from typing import Any, Iterable

import pyarrow as pa
import pyarrow.compute as pc

from ..errors import one_line
from ..table_configuration import AUTO_COMPACT_KEY

log = logging.getLogger(__name__)

_CONF = "spark.databricks.delta.autoCompact."
DEFAULT_MIN_NUM_FILES = 50
DEFAULT_MAX_FILE_SIZE = 128 * 1024 * 1024


def enabled(configuration: dict[str, str] | None) -> bool:
    return str((configuration or {}).get(AUTO_COMPACT_KEY, "false")).lower() in ("true", "auto")


def _setting(spark: Any, name: str, default: int) -> int:
    try:
        value = spark.conf.get(_CONF + name, None)
        return int(value) if value not in (None, "") else default
    except Exception:  # an unreadable setting counts as Delta's default
        return default


def files_to_compact(files: pa.Table, partitions: list[dict[str, Any]], min_file_size: int,
                     min_num_files: int, max_deleted_ratio: float | None = None) -> pa.Table:
    """Of `partitions` (partition values as the log holds them): the small files of those with at least
    `min_num_files` small files, and every file whose deletion vector deletes more than
    `max_deleted_ratio` of its rows (merge-on-read's marks purged, so reads stop skipping them)."""
    from .optimize import MAX_DELETED_ROWS_RATIO, over_deleted

    wanted = {tuple(sorted((p or {}).items())) for p in partitions}
    keys = [tuple(sorted(dict(v or []).items())) for v in files.column("partition_values").to_pylist()]
    small = pc.less(files.column("size"), min_file_size).to_pylist()
    purge = over_deleted(files, MAX_DELETED_ROWS_RATIO if max_deleted_ratio is None else max_deleted_ratio)
    counts: dict[tuple, int] = {}
    for key, is_small in zip(keys, small):
        if is_small and key in wanted:
            counts[key] = counts.get(key, 0) + 1
    chosen = {k for k, n in counts.items() if n >= min_num_files}
    return files.filter(pa.array([k in wanted and ((bool(s) and k in chosen) or p)
                                  for k, s, p in zip(keys, small, purge)]))


def after_write(spark: Any, table: Any, configuration: dict[str, str] | None,
                written_partitions: Iterable[dict[str, Any]]) -> int | None:
    """Compact where the write left too many small files; the OPTIMIZE version, or None. Never raises:
    the write has committed already. `table`: a `DeltaTable` or a location."""
    if not enabled(configuration):
        return None
    partitions = [dict(p or {}) for p in written_partitions]
    if not partitions:
        return None
    max_size = _setting(spark, "maxFileSize", DEFAULT_MAX_FILE_SIZE)
    min_size = _setting(spark, "minFileSize", max_size // 2)
    min_files = max(2, _setting(spark, "minNumFiles", DEFAULT_MIN_NUM_FILES))

    def select(snapshot: Any) -> pa.Table:
        return files_to_compact(snapshot.files, partitions, min_size, min_files)

    from .optimize import optimize

    try:
        version = optimize(spark, table, select=select, min_file_size=min_size, max_file_size=max_size,
                           auto=True)
    except Exception as exc:
        log.warning("%s: auto-compaction after a write failed (the write stands): %s", getattr(table, "uri", table),
                    one_line(exc))
        return None
    if version is not None:
        log.info("%s: auto-compaction committed version %d", getattr(table, "uri", table), version)
    return version
