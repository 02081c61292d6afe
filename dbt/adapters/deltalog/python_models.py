"""Python models: `def model(dbt, session)` run on the connection's SparkSession, its result as the
lazy DataFrame the model's one commit writes."""
from __future__ import annotations

import time
from typing import Any, Dict

from dbt.adapters.events.logging import AdapterLogger
from dbt_common.exceptions import DbtRuntimeError

from deltalog.lazy_imports import load
from dbt.adapters.deltalog.model_config import config_value as _get
from dbt.adapters.deltalog.runtime.session import RUNTIME

logger = AdapterLogger("Deltalog")


def python_dataframe(spark: Any, warehouse: Any, code: str, model: Any):
    """Run a Python model, `def model(dbt, session)`, on `spark`: `dbt.ref` and `dbt.source` give
    DataFrames of the relations' latest snapshots. It may return a Spark or a pandas DataFrame (or a
    pyarrow Table); the write that follows is its one commit."""
    unique_id = _get(model, "unique_id") or "python model"
    # the relations the model names (refs, sources, this) as session views of their latest version
    RUNTIME.views(spark).refresh_for_sql(warehouse, code)
    # `spark` as a global, as dbt-spark and Databricks python models use it
    namespace: Dict[str, Any] = {"__name__": "dbt_python_model", "spark": spark}
    # what a model's code imports first, loaded whole before it runs beside other models
    load("pandas")
    if "pyspark.pandas" in code:
        load("pandas_on_spark")
    # the code run and its outcome in dbt.log, as dbt's log_code_execution writes them for python jobs
    logger.debug(f"On {unique_id}: {code}")
    started = time.time()
    try:
        exec(compile(code, f"<{unique_id}>", "exec"), namespace)
        entry = namespace.get("model")
        if not callable(entry):
            raise DbtRuntimeError(f"Python model {unique_id} defines no function model(dbt, session).")
        result = entry(namespace["dbtObj"](spark.table), spark)
        logger.debug(f"Execution status: OK in {time.time() - started:.2f} seconds")
    except DbtRuntimeError:
        raise
    except Exception as exc:
        from dbt.adapters.deltalog.connections import _short_error

        raise DbtRuntimeError(f"Python model {unique_id} failed: {type(exc).__name__}: "
                              f"{_short_error(exc)}") from exc
    return spark_dataframe(spark, result, unique_id)


def spark_dataframe(spark: Any, result: Any, unique_id: str):
    """What a Python model returned, as a Spark DataFrame."""
    load("spark")
    from pyspark.sql import DataFrame

    if isinstance(result, DataFrame):
        return result
    kind = f"{type(result).__module__}.{type(result).__name__}"
    if kind.startswith("pyspark.pandas."):  # pandas-on-Spark: its Spark DataFrame, without the index
        return result.to_spark()
    if kind.startswith("pyarrow.") and hasattr(result, "to_pandas"):
        result = result.to_pandas()
    if kind.startswith("pandas.") or kind.startswith("pyarrow."):
        return spark.createDataFrame(result)
    raise DbtRuntimeError(f"Python model {unique_id} returned {kind}; allowed: a Spark DataFrame, a pandas "
                          f"or pandas-on-Spark (pyspark.pandas) DataFrame, or a pyarrow Table. Nothing was written.")
