"""Tests of dbt-spark's functional suite that cannot apply to this adapter, by node id prefix, with why."""
CANNOT_APPLY: dict[str, str] = {}
