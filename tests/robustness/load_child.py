"""One dbt writer process of the load test: `commits` dbt invocations, one after the other, in this
process (dbt's programmatic runner, one Spark kept for all of them), each making one commit to the
shared table `load`:

    python load_child.py <project dir> <writer> <commits>

Invocation `seq`, by `seq % 5`: 0-2 `dbt run` of the incremental model with the append strategy (20 new
ids of this writer and seq); 3 `dbt run` with the merge strategy (a read-modify-write of the counter row
id -1: v + 1, read from the table itself); 4 `dbt run-operation optimize_load` (OPTIMIZE).
An invocation that fails on a conflict is run again; one that fails otherwise ends the process.
Prints one JSON line: {"writer": w, "reruns": n, "conflicts": {exception name: count}, "failed": [...]}.
"""
from __future__ import annotations

import json
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
for p in (HERE, ROOT):
    if p not in sys.path:
        sys.path.insert(0, p)

CONFLICTS = ("ConcurrentAppendException", "ConcurrentDeleteReadException", "ConcurrentDeleteDeleteException",
             "ConcurrentTransactionException", "MetadataChangedException", "ProtocolChangedException")
MAX_RERUNS = 40


def append_ids(writer: int, seq: int) -> list[int]:
    return [writer * 1_000_000 + seq * 1000 + k for k in range(20)]


def kind(seq: int) -> str:
    return ("append", "append", "append", "merge", "optimize")[seq % 5]


def failure_message(result, errors: list[str]) -> str:
    """What the failed invocation said: its exception, its nodes' messages, and the error lines dbt
    logged (`run-operation` reports a failed macro only there)."""
    parts = [str(result.exception or "")] + errors
    for r in getattr(result.result, "results", None) or []:
        parts.append(str(getattr(r, "message", "") or ""))
    return " ".join(parts)


def main(project: str, writer: int, commits: int) -> None:
    from dbt.cli.main import dbtRunner

    errors: list[str] = []

    def keep_errors(event) -> None:
        if event.info.level == "error":
            errors.append(event.info.msg)

    dbt = dbtRunner(callbacks=[keep_errors])
    base = ["--project-dir", project, "--profiles-dir", project, "--quiet"]
    reruns, conflicts, failed, examples = 0, {}, [], {}
    for seq in range(commits):
        k = kind(seq)
        variables = json.dumps({"writer": writer, "seq": seq, "strategy": "merge" if k == "merge" else "append"})
        args = ["run-operation", "optimize_load"] if k == "optimize" else ["run", "--vars", variables]
        for attempt in range(MAX_RERUNS + 1):
            errors.clear()
            result = dbt.invoke(args + base)
            if result.success:
                break
            message = failure_message(result, errors)
            name = next((c for c in CONFLICTS if re.search(rf"\b{c}\b", message)), None)
            if name is None:
                failed.append([seq, k, message[-2000:]])
                print(json.dumps({"writer": writer, "reruns": reruns, "conflicts": conflicts, "failed": failed}))
                return
            conflicts[name] = conflicts.get(name, 0) + 1
            examples.setdefault(name, f"{k}: " + re.sub(r"\s+", " ", message)[:600])
            reruns += 1
        else:
            failed.append([seq, k, f"still conflicting after {MAX_RERUNS} reruns"])
    print(json.dumps({"writer": writer, "reruns": reruns, "conflicts": conflicts, "failed": failed,
                      "examples": examples}))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
