"""The built-in incremental strategies, one module each, found by name in `STRATEGIES`. Each takes an
`IncrementalWrite` (one model's new rows for its existing table, and what the commit carries) and makes
exactly one commit, returning its version (None when there was nothing to commit)."""
from __future__ import annotations

from typing import Callable, Dict, Optional

from .incremental_write import IncrementalWrite


def _registry() -> Dict[str, Callable[[IncrementalWrite], Optional[int]]]:
    from . import append, delete_insert, insert_overwrite, merge, microbatch, replace_where

    return {"append": append.run, "merge": merge.run, "insert_overwrite": insert_overwrite.run,
            "delete+insert": delete_insert.run, "replace_where": replace_where.run, "microbatch": microbatch.run}


STRATEGIES = _registry()

__all__ = ["IncrementalWrite", "STRATEGIES"]
