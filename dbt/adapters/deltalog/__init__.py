"""The dbt-deltalog plugin: dbt imports this package and takes its `Plugin`.

The plugin, and the adapter's classes with it, are imported when first asked for (PEP 562's module
`__getattr__`), not when the package is: a process that runs one part of it (the Spark server, the class
archive's recorder: `python -m dbt.adapters.deltalog.runtime....`) then starts without dbt's adapter
machinery, about a second of imports on the way to its JVM."""
import gc
import importlib
import os
import sys
from typing import Any

# where each name dbt or a user may import from the package is defined
_DEFINED_IN = {
    "DeltalogAdapter": "impl",
    "DeltalogConnectionManager": "connections",
    "DeltalogCredentials": "connections",
    "DeltalogRelation": "relation",
}


def __getattr__(name: str) -> Any:
    if name == "Plugin":
        return _load_plugin()
    if name in _DEFINED_IN:
        return getattr(importlib.import_module(f"{__name__}.{_DEFINED_IN[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _load_plugin() -> Any:
    from dbt.adapters.base import AdapterPlugin

    from dbt.adapters.deltalog.connections import DeltalogCredentials
    from dbt.adapters.deltalog.impl import DeltalogAdapter
    from dbt.include import deltalog

    plugin = AdapterPlugin(
        adapter=DeltalogAdapter,  # type: ignore[arg-type]
        credentials=DeltalogCredentials,
        include_path=deltalog.PACKAGE_PATH,
        dependencies=["spark"],
    )
    globals()["Plugin"] = plugin  # later lookups find it without __getattr__
    _settle_the_collector()
    return plugin


# A dbt command is a short process that keeps what it imported, and most of what it builds (the manifest,
# its nodes), to its end, and makes little cyclic garbage. So, once, when the plugin loads in the `dbt`
# command's own process (not in a host that imports dbt, as an orchestrator running dbtRunner does: its
# collector is its own):
# - what exists then (dbt's modules and ours) is frozen: no later collection, nor the one at exit, walks
#   it again (frozen objects are still freed once unreferenced);
# - the collector runs after 10,000 allocations instead of 700, unless the process chose its own
#   thresholds. bench/dev_loop.py's 28-node build spent 0.6 s collecting and 0.7 s exiting; now
#   0.15 s and 0.2 s.
_PYTHON_DEFAULT_THRESHOLDS = (700, 10, 10)


def _settle_the_collector() -> None:
    if not _is_the_dbt_command():
        return
    if gc.get_threshold() == _PYTHON_DEFAULT_THRESHOLDS:
        gc.set_threshold(10_000, 10, 10)
    gc.freeze()


def _is_the_dbt_command() -> bool:
    """This process is the `dbt` command (its console script, or `python -m dbt.cli.main`)."""
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    program = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    return program in ("dbt", "dbt.exe") or getattr(spec, "name", "").startswith("dbt.cli")
