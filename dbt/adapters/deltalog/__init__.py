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
