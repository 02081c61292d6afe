"""Keep streaming tables running: `python -m dbt.adapters.deltalog.stream --select tag:realtime`.

Reads the dbt project and profile as `dbt run` does (`--project-dir`, `--profiles-dir`, `--target`,
`--vars`, `--select`/`--exclude`/`--selector`), finds the selected `streaming_table` models and runs them
in DAG order (each returns once its query runs; a stream's table exists before its downstream streams
start), all of them then running at once, each with its `processing_time` trigger (or micro-batches back
to back when it has none), until SIGTERM or Ctrl-C or a failure: then every stream stops after the batch under way, and the
command ends with dbt's run results. The streams run in a Spark of this process, never on the shared
`spark_server`: a runner that is killed takes its queries along, and a restart resumes from the
checkpoints. Each batch is reported on the console and in dbt's log (model,
batch id, rows, seconds). Models of other materializations in the selection are left to `dbt run`.
"""
from __future__ import annotations

import argparse
import json
import signal
import sys
from typing import List, Optional

from dbt.adapters.deltalog.runtime.session import RUNTIME
from dbt.adapters.deltalog.streaming import Continuous

_PASSED_ON = ("--project-dir", "--profiles-dir", "--target", "--vars", "--profile")


def _arguments(argv: Optional[List[str]]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m dbt.adapters.deltalog.stream",
                                     description="Run the selected streaming_table models continuously.")
    parser.add_argument("-s", "--select", nargs="+", default=[])
    parser.add_argument("--exclude", nargs="+", default=[])
    parser.add_argument("--selector")
    parser.add_argument("--full-refresh", action="store_true",
                        help="start each selected stream over (its first batch replaces the table)")
    for name in _PASSED_ON:
        parser.add_argument(name, *(["-t"] if name == "--target" else []))
    return parser.parse_args(argv)


def _common(args: argparse.Namespace) -> List[str]:
    out: List[str] = []
    for name in _PASSED_ON:
        value = getattr(args, name[2:].replace("-", "_"))
        if value is not None:
            out += [name, value]
    return out


def streaming_models(args: argparse.Namespace) -> List[str]:
    """The names of the selected models that are streaming tables."""
    from dbt.cli.main import dbtRunner

    selection = (["--select", *args.select] if args.select else []) + (["--exclude", *args.exclude] if args.exclude else []) \
        + (["--selector", args.selector] if args.selector else [])
    listed = dbtRunner().invoke(["ls", "--quiet", "--resource-type", "model", "--output", "json", "--output-keys",
                                 "name config.materialized", *selection, *_common(args)])
    if not listed.success:
        raise SystemExit(f"dbt ls could not list the selection: {listed.exception}")
    nodes = [json.loads(n) if isinstance(n, str) else n for n in listed.result or []]
    return [n["name"] for n in nodes if n.get("config.materialized", (n.get("config") or {}).get("materialized"))
            == "streaming_table"]


def main(argv: Optional[List[str]] = None) -> int:
    from dbt.cli.main import dbtRunner

    args = _arguments(argv)
    names = streaming_models(args)
    if not names:
        print("No streaming_table model is selected: nothing to keep running (select models with "
              "materialized='streaming_table', e.g. --select tag:realtime).", file=sys.stderr)
        return 2

    def stop(signum, frame):  # at a batch boundary: see streaming._run_until_stopped
        print(f"Stopping {len(names)} stream(s) after their current batch...", file=sys.stderr, flush=True)
        continuous.stop.set()

    continuous = RUNTIME.continuous = Continuous()
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    print(f"Streaming {', '.join(names)} until SIGTERM / Ctrl-C", flush=True)
    # dbt starts the streams in DAG order (each returns once its query runs), then they run until stopped
    result = dbtRunner().invoke(["run", "--select", *names, *(["--full-refresh"] if args.full_refresh else []),
                                 *_common(args)])
    if not result.success:
        continuous.stop.set()
    return max(continuous.watch(), 0 if result.success else 1)


if __name__ == "__main__":
    sys.exit(main())
