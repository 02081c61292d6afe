"""The user's cache folder: what dbt-deltalog keeps between processes, all under one folder, so that a CI
job keeps one folder between runs (the class archives, the answers of data tests, the Spark servers'
state, the wrapper of a bundled Java).

`$XDG_CACHE_HOME/deltalog` (the XDG base directory convention), `~/.cache/deltalog` without it."""
from __future__ import annotations

import os


def folder(*parts: str) -> str:
    """A path in the cache folder (not created here: each keeper makes its own, with its own mode)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "deltalog", *parts)
