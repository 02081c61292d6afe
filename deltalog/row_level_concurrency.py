"""Row-level concurrency: a commit that lost to a winner which touched the same files goes on with its
deletion-vector marks moved onto the winner's files, instead of conflicting (`conflicts.check` says
when). Two ways:

- rebase: both marked different rows of a file (WriteSerializable, DVs). The loser's remove names the
  winner's DV and its add a new DV holding both writers' rows.
- carry: one side only moved rows to new files keeping their row IDs (OPTIMIZE with row tracking). The
  rows the other marked are found by row ID in the files that now hold them and marked there.

Each returns a `Rewrite` of the losing commit's actions, and names the DV files it wrote (to be deleted
if the commit fails after all).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from typing import Any, Callable

import numpy as np

from . import deletion_vectors, row_tracking
from .actions import Action, AddFile, RemoveFile, now_ms
from .committer import WinningCommit, path_key
from .conflicts import Attempt, conflict
from .errors import ConcurrentDeleteReadException

log = logging.getLogger(__name__)


@dataclass
class Rewrite:
    """How a losing commit's actions change to go on after a winner: each action replaced (or dropped,
    as None), `extra` actions added; `written` the DV files written for it, `unnamed` the files of the
    first attempt that no action names any more (a file emptied of rows)."""

    action: Callable[[Action], Action | None]
    extra: list[Action] = field(default_factory=list)
    written: list[str] = field(default_factory=list)
    unnamed: list[str] = field(default_factory=list)

    def apply(self, actions: list[Action]) -> list[Action]:
        return [a for a in map(self.action, actions) if a is not None] + self.extra


def rebase_marks(store: Any, rebase: dict[str, tuple[AddFile, Any]]) -> Rewrite:
    """The files the winner marked rows of too, rebased on the winner's version of them: the remove
    names the winner's DV, the add the union of both writers' rows (written to a new DV file)."""
    keys = list(rebase)
    relative, descriptors = deletion_vectors.write_deletion_vectors(store, [rebase[k][1] for k in keys])
    new_dv = dict(zip(keys, descriptors))

    def rebased(a: Action) -> Action:
        k = path_key(a.path) if isinstance(a, (AddFile, RemoveFile)) else None
        if isinstance(a, RemoveFile) and k in new_dv:
            return replace(a, deletion_vector=rebase[k][0].deletion_vector)
        if isinstance(a, AddFile) and k in new_dv and a.deletion_vector:
            return replace(a, deletion_vector=new_dv[k])
        return a

    return Rewrite(rebased, written=[relative])


def carry_marks(attempt: Attempt, winner: WinningCommit, keys: list[str]) -> Rewrite:
    """The rows marked deleted in the files of `keys` (see `conflicts._carried_files`) marked where they
    are now. Losing OPTIMIZE: the rows the winner marked or removed are marked in the attempt's new files
    (an emptied one is dropped), and its removes name the winner's DVs. Losing DML: the rows the attempt
    marked are marked in the winner's new files instead."""
    conf = attempt.metadata.configuration
    ours = attempt.removes
    ts = now_ms()
    rearranging = attempt.rearranges_rows
    if rearranging:
        gone = [_rows_gone(attempt, ours[k], winner.marked.get(k)) for k in keys]
        targets = [a for a in attempt.actions if isinstance(a, AddFile)]
    else:
        marked = attempt.marked_files()
        gone = [_rows_gone(attempt, ours[k], marked[k][1] if k in marked else None) for k in keys]
        targets = list(winner.adds)
    row_ids = np.concatenate(gone) if gone else np.zeros(0, np.int64)
    found = row_tracking.locate_rows(attempt.store, targets, conf, row_ids)
    if sum(len(p) for _, p in found) != len(np.unique(row_ids)):
        raise conflict(ConcurrentDeleteReadException, attempt, winner,
                       "rows this transaction marked could not be found by their row IDs in the rewritten "
                       "files", "Retry the operation.")
    marks = deletion_vectors.mark_rows(attempt.store, found, ts)
    log.info("%s: carried %d marked row(s) of %d file(s) by row ID into %d file(s) %s concurrent %s "
             "(version %d), instead of running again", attempt.table_uri, len(row_ids), len(keys), len(found),
             "this transaction rewrote, past the" if rearranging else "rewritten by the",
             winner.operation, winner.version)
    emptied: list[str] = []
    if rearranging:
        now = {k: winner.marked[k].remove(ts, data_change=False) if k in winner.marked else None for k in keys}
        now.update({path_key(a.path): replace(a, data_change=False) for a in marks.adds})
        emptied = sorted({path_key(r.path) for r in marks.removes} - {path_key(a.path) for a in marks.adds})
        now.update(dict.fromkeys(emptied))
        extra: list[Action] = []
    else:
        now = dict.fromkeys(keys)
        extra = [*marks.removes, *marks.adds]

    def carried(a: Action) -> Action | None:
        k = path_key(a.path) if isinstance(a, (AddFile, RemoveFile)) else None
        return now[k] if k in now else a

    return Rewrite(carried, extra, written=[marks.dv_file] if marks.dv_file else [], unnamed=emptied)


def _rows_gone(attempt: Attempt, removed: RemoveFile, now: AddFile | None) -> Any:
    """The row IDs of the rows of a file that are deleted now (by `now`'s DV; all of them without `now`:
    the file was removed) and were not when `removed` was read."""
    store = attempt.store
    if removed.base_row_id is None and attempt.snapshot is not None:  # IDs are assigned at commit
        live = row_tracking.live_row_ids(attempt.snapshot.files, [removed.path])
        removed = replace(removed, base_row_id=live.get(removed.path, (None, None))[0])
    ids = row_tracking.file_row_ids(store, removed, attempt.metadata.configuration)
    before = deletion_vectors.deleted_rows(store, removed.deletion_vector)
    if now is None:
        keep = np.ones(len(ids), dtype=bool)
        keep[before] = False
        return ids[keep]
    return ids[np.setdiff1d(deletion_vectors.deleted_rows(store, now.deletion_vector), before)]
