"""Type widening on schema change through dbt: an incremental model whose upstream column widens (int
to bigint, float to double, date to timestamp_ntz, decimal precision up) under on_schema_change
append_new_columns or sync_all_columns widens the table's column in the same commit as the rows — Delta's
`typeWidening` feature, `delta.typeChanges` on the field, no file rewritten — and every row reads back
with the wide type; a narrowing or unsupported change fails the model by name and commits nothing."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from dbt.tests.util import run_dbt, run_dbt_and_capture

from deltalog.scan import read_table
from deltalog.snapshot import Snapshot

pytestmark = pytest.mark.dbt

MODEL = """
{{ config(materialized='incremental', incremental_strategy=var('strategy'), unique_key='id',
          on_schema_change=var('on_schema_change', 'append_new_columns')) }}
select cast(id as {{ var('id_type', 'int') }}) as id,
       cast(id * 1.5 as {{ var('amount_type', 'float') }}) as amount,
       cast(date'2024-01-01' + cast(id as int) as {{ var('day_type', 'date') }}) as day,
       cast(id / 4 as {{ var('price_type', 'decimal(5,2)') }}) as price
from range({{ var('lo', 0) }}, {{ var('hi', 3) }})
"""

WIDE = {"id_type": "bigint", "amount_type": "double", "day_type": "timestamp_ntz", "price_type": "decimal(10,3)"}


class TestTypeWidening:
    @pytest.fixture(scope="class")
    def models(self):
        return {"merged.sql": MODEL, "appended.sql": MODEL}

    def test_an_upstream_type_that_widens_widens_the_column(self, project, deltalog_warehouse):
        folder = Path(deltalog_warehouse) / project.test_schema
        for model, strategy in (("merged", "merge"), ("appended", "append")):
            run_dbt(["run", "-s", model, "--vars", json.dumps({"strategy": strategy})])
            files = {f for f in Snapshot.load(str(folder / model)).files.column("path").to_pylist()}
            run_dbt(["run", "-s", model, "--vars", json.dumps({"strategy": strategy, "lo": 2, "hi": 5, **WIDE})])
            snapshot = Snapshot.load(str(folder / model))
            assert "typeWidening" in (snapshot.protocol.reader_features or []), model
            fields = {f["name"]: f for f in snapshot.schema_json["fields"]}
            assert {name: f["type"] for name, f in fields.items()} == {
                "id": "long", "amount": "double", "day": "timestamp_ntz", "price": "decimal(10,3)"}
            assert fields["id"]["metadata"]["delta.typeChanges"] == [{"fromType": "integer", "toType": "long"}]
            assert files <= set(snapshot.files.column("path").to_pylist()) or strategy == "merge"
            rows = sorted(read_table(snapshot).to_pylist(), key=lambda r: r["id"])
            assert [r["id"] for r in rows] == ([0, 1, 2, 3, 4] if strategy == "merge" else [0, 1, 2, 2, 3, 4])
            assert str(rows[-1]["price"]) == "1.000" and rows[0]["day"].isoformat() == "2024-01-01T00:00:00"

            # narrowing back (bigint -> int is cast up: fine), and a change no reader widens: refused
            version = snapshot.version
            _, out = run_dbt_and_capture(["run", "-s", model, "--vars", json.dumps(
                {"strategy": strategy, **WIDE, "amount_type": "string"})], expect_pass=False)
            assert "cannot change the type of amount from double to string" in out and model in out
            assert Snapshot.load(str(folder / model)).version == version
