import gc

from dbt.adapters.base import AdapterPlugin

from dbt.adapters.deltalog.connections import DeltalogConnectionManager, DeltalogCredentials  # noqa: F401
from dbt.adapters.deltalog.impl import DeltalogAdapter
from dbt.adapters.deltalog.relation import DeltalogRelation  # noqa: F401
from dbt.include import deltalog

Plugin = AdapterPlugin(
    adapter=DeltalogAdapter,  # type: ignore[arg-type]
    credentials=DeltalogCredentials,
    include_path=deltalog.PACKAGE_PATH,
    dependencies=["spark"],
)

# A dbt command is a short process that keeps the modules it imported to its end. Freezing what exists
# once the plugin is loaded (dbt's modules and ours) keeps the cyclic collector from walking it again in
# each full collection and in the one at exit. Frozen objects are still freed once unreferenced.
gc.freeze()
