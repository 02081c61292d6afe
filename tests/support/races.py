"""A forced race for the conflict tests: the loser runs up to its commit (it has read its snapshot and
written its files), then, inside that commit, the winner runs whole and lands first."""
from __future__ import annotations

from contextlib import contextmanager

from deltalog.transaction import Transaction


@contextmanager
def winner_commits_first(winner, table_suffix: str = ""):
    """Inside the first commit to a table whose path ends with `table_suffix`, `winner(uri)` runs first.
    The state it yields: "fired", "winner_version" (what `winner` returned) and "calls", the commits to
    that table (the winner's own, and any run of the loser after it lost, included)."""
    original = Transaction.commit
    state: dict = {"calls": 0}

    def commit(self, *args, **kwargs):
        if self.table_uri.endswith(table_suffix):
            state["calls"] += 1
            if "fired" not in state:
                state["fired"] = True  # before the winner runs: its own commit goes straight through
                state["winner_version"] = winner(self.table_uri)
        return original(self, *args, **kwargs)

    Transaction.commit = commit
    try:
        yield state
    finally:
        Transaction.commit = original
