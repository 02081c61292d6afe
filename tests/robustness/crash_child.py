"""A writer process that the crash tests (and bench/stress.py) kill with SIGKILL.

    python crash_child.py <table uri> <hook> <first batch> <batches> [rows per batch]

It appends batches `first .. first+batches-1` with `deltalog.write_deltalake`, one commit each;
batch b holds ids `b*1000 .. b*1000+rows-1` and records `{"batch": b}` in its commitInfo, so the
parent knows exactly which rows every landed commit brought. Before the first write it prints
`ready` (imports done) so random-time kills hit the writing, not the interpreter start-up.

`hook` names the step at which the process kills itself (`os.kill(getpid(), SIGKILL)`: no cleanup,
no `finally`, exactly like a machine losing power from the table's point of view), or with
CRASH_MODE=raise, where an I/O error is raised instead (the writer's own error handling runs; the
process exits with FAULT_EXIT when the error reaches the caller):

    none                       no hook: the parent kills at a random time
    data_file:K                after the K-th data file (1-based) is written, before its commit
    torn_data:K                halfway through writing the K-th data file
    commit_temp:N              the N-th commit's bytes are in the temp file, not yet linked into place
    commit_landed:N            right after the N-th commit file was created (no .crc, no checkpoint yet)
    crc_temp:N                 the N-th .crc is in its temp file, not yet linked
    crc_torn:N                 half of the N-th .crc written under its final name (a non-atomic store)
    checkpoint_temp:N          the N-th checkpoint Parquet is in its temp file, not yet renamed
    checkpoint_torn:N          half of the N-th checkpoint written under its final name
    before_last_checkpoint:N   the N-th checkpoint is complete, `_last_checkpoint` not yet updated
    last_checkpoint_torn:N     half of the N-th `_last_checkpoint` written under its final name
"""
from __future__ import annotations

import os
import signal
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import pyarrow as pa  # noqa: E402

import deltalog.write as write_module  # noqa: E402
from deltalog import write_deltalake  # noqa: E402
from deltalog.storage.log_store import LAST_CHECKPOINT, LocalLogStore  # noqa: E402

HOOKS = ("none", "data_file", "torn_data", "commit_temp", "commit_landed", "crc_temp", "crc_torn",
         "checkpoint_temp", "checkpoint_torn", "before_last_checkpoint", "last_checkpoint_torn")
ROWS_PER_BATCH = 6
MAX_ROWS_PER_FILE = 2  # several data files per commit, so a kill can fall between them
FAULT_EXIT = 3  # the exit code when an injected exception reached the writer's caller


class InjectedFault(OSError):
    """Raised instead of dying when CRASH_MODE=raise: the writer's own error handling runs."""


def die() -> None:
    sys.stdout.flush()
    if os.environ.get("CRASH_MODE") == "raise":
        raise InjectedFault(5, "injected I/O fault")
    os.kill(os.getpid(), signal.SIGKILL)


def batch_ids(batch: int, rows: int = ROWS_PER_BATCH) -> list[int]:
    return list(range(batch * 1000, batch * 1000 + rows))


def batch_table(batch: int, rows: int = ROWS_PER_BATCH) -> pa.Table:
    ids = batch_ids(batch, rows)
    return pa.table({"id": pa.array(ids, pa.int64()), "part": pa.array([f"p{i % 2}" for i in ids]),
                     "batch": pa.array([batch] * len(ids), pa.int64())})


def _torn(path: str, data: bytes) -> None:
    """Half the bytes under the final name, as a store without atomic publish could leave them."""
    with open(path, "wb") as f:
        f.write(data[: max(1, len(data) // 2)])
        f.flush()
        os.fsync(f.fileno())


def install(hook: str) -> None:
    name, _, arg = hook.partition(":")
    if name not in HOOKS:
        raise SystemExit(f"unknown hook {hook!r}; allowed: {', '.join(HOOKS)}")
    n = int(arg or 1)
    counts: dict[str, int] = {}

    def nth(kind: str) -> bool:
        counts[kind] = counts.get(kind, 0) + 1
        return counts[kind] == n

    if name in ("data_file", "torn_data"):
        sink = getattr(write_module, "_FileSink", None)
        if sink is not None:  # streaming writer: a data file is complete when `_finish` returns
            original_finish = sink._finish

            def finish(self, folder):
                if nth("data"):
                    if name == "torn_data":  # rows written, footer never: a truncated Parquet file
                        f = self.open[folder]
                        self._flush(f)
                        f.handle.flush()
                        die()
                    original_finish(self, folder)
                    die()
                original_finish(self, folder)
            sink._finish = finish
            return
        original = write_module._write_parquet_durably

        def write_parquet(data, path):
            if nth("data"):
                if name == "torn_data":
                    import io
                    import pyarrow.parquet as pq
                    buf = io.BytesIO()
                    pq.write_table(data, buf)
                    _torn(path, buf.getvalue())
                    die()
                original(data, path)
                die()
            original(data, path)
        write_module._write_parquet_durably = write_parquet
        return

    original_if_absent = LocalLogStore.write_if_absent
    original_atomic = LocalLogStore.write_atomic

    def write_if_absent(self, fname, data):
        kind = "commit" if fname.endswith(".json") else "crc" if fname.endswith(".crc") else "other"
        if kind == "commit" and name in ("commit_temp", "commit_landed") and nth("commit"):
            if name == "commit_temp":
                self._write_temp(data)
                die()
            original_if_absent(self, fname, data)
            die()
        if kind == "crc" and name in ("crc_temp", "crc_torn") and nth("crc"):
            if name == "crc_temp":
                self._write_temp(data)
            else:
                _torn(os.path.join(self.log_path, fname), data)
            die()
        return original_if_absent(self, fname, data)

    def write_atomic(self, fname, data):
        is_checkpoint = ".checkpoint." in fname
        if is_checkpoint and name in ("checkpoint_temp", "checkpoint_torn") and nth("checkpoint"):
            if name == "checkpoint_temp":
                self._write_temp(data)
            else:
                _torn(os.path.join(self.log_path, fname), data)
            die()
        if fname == LAST_CHECKPOINT and name in ("before_last_checkpoint", "last_checkpoint_torn") \
                and nth("last"):
            if name == "last_checkpoint_torn":
                _torn(os.path.join(self.log_path, fname), data)
            die()
        return original_atomic(self, fname, data)

    LocalLogStore.write_if_absent = write_if_absent
    LocalLogStore.write_atomic = write_atomic


def main(argv: list[str]) -> None:
    uri, hook, first, batches = argv[0], argv[1], int(argv[2]), int(argv[3])
    rows = int(argv[4]) if len(argv) > 4 else ROWS_PER_BATCH
    install(hook)
    print("ready", flush=True)
    for b in range(first, first + batches):
        try:
            v = write_deltalake(uri, batch_table(b, rows), mode="append", max_rows_per_file=MAX_ROWS_PER_FILE,
                                extra_commit_info={"batch": b})
        except InjectedFault as exc:
            print(f"failed {b}: {exc}", flush=True)
            sys.exit(FAULT_EXIT)
        print(f"committed {b} {v}", flush=True)
    print("done", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
