"""What a model declares about its table besides the rows, through dbt: tblproperties and the Delta
configs in version 0's metadata; persist_docs as the table description and column comments; an
enforced contract's not_null and check constraints written as Delta declares them and enforced
before the commit; configs that cannot apply to a Delta table fail the model by name. Every table
is read back with delta-rs."""
import json
import os

import deltalake
import pytest
from dbt.tests.util import run_dbt, run_dbt_and_capture, write_file

pytestmark = pytest.mark.dbt

DOCUMENTED = """
{{ config(materialized='table', persist_docs={'relation': true, 'columns': true},
          tblproperties={'delta.deletedFileRetentionDuration': 'interval 3 days'},
          checkpoint_interval=4, isolation_level='Serializable') }}
select id, cast(id * 10 as bigint) as amount, concat('c', cast(id as string)) as name from range(1, 6)
"""

CONSTRAINED = """
{{ config(materialized='incremental', incremental_strategy='append', on_schema_change='fail') }}
select id, cast({{ var('amount', 'id * 10') }} as bigint) as amount, concat('c', cast(id as string)) as name
from range({{ var('lo', 1) }}, {{ var('hi', 6) }})
"""

SCHEMA_YML = """
version: 2
models:
  - name: documented
    description: "Orders, one row per order"
    columns:
      - name: id
        description: "The order id"
      - name: amount
        description: "In cents"
  - name: constrained
    config:
      contract: {enforced: true}
    constraints:
      - type: check
        name: amount_not_negative
        expression: "amount >= 0"
      - type: primary_key
        columns: [id]
    columns:
      - name: id
        data_type: bigint
        constraints:
          - type: not_null
      - name: amount
        data_type: bigint
        constraints:
          - type: check
            expression: "amount < 1000"
      - name: name
        data_type: string
"""


def table(warehouse, project, name):
    return deltalake.DeltaTable(os.path.join(warehouse, project.test_schema, name))


class TestTableDefinition:
    @pytest.fixture(scope="class")
    @classmethod
    def models(cls):
        return {"documented.sql": DOCUMENTED, "constrained.sql": CONSTRAINED, "schema.yml": SCHEMA_YML}

    def test_1_version_0_holds_the_definition(self, project, deltalog_warehouse):
        run_dbt(["run"])
        dt = table(deltalog_warehouse, project, "documented")
        assert dt.version() == 0  # properties, docs: no second commit
        md = dt.metadata()
        assert md.description == "Orders, one row per order"
        assert md.configuration["delta.deletedFileRetentionDuration"] == "interval 3 days"
        assert md.configuration["delta.checkpointInterval"] == "4"
        assert md.configuration["delta.isolationLevel"] == "Serializable"
        fields = {f.name: f for f in dt.schema().fields}
        assert fields["id"].metadata == {"comment": "The order id"}
        assert fields["amount"].metadata == {"comment": "In cents"}
        assert fields["name"].metadata == {}

        c = table(deltalog_warehouse, project, "constrained")
        assert c.version() == 0
        conf = c.metadata().configuration
        assert conf["delta.constraints.amount_not_negative"] == "amount >= 0"
        generated = [k for k in conf if k.startswith("delta.constraints.check_")]
        assert len(generated) == 1 and conf[generated[0]] == "amount < 1000"
        assert not {f.name: f for f in c.schema().fields}["id"].nullable
        proto = c.protocol()
        assert "checkConstraints" in (proto.writer_features or []) or proto.min_writer_version == 3
        assert sorted(r["id"] for r in c.to_pyarrow_table().to_pylist()) == [1, 2, 3, 4, 5]

    def test_2_violations_fail_the_model_and_commit_nothing(self, project, deltalog_warehouse):
        c = table(deltalog_warehouse, project, "constrained")
        before = c.version()
        result, out = run_dbt_and_capture(
            ["run", "--select", "constrained", "--vars", json.dumps({"lo": 6, "hi": 9, "amount": "id - 7"})],
            expect_pass=False)
        assert "amount_not_negative" in out and "amount >= 0" in out
        assert '"id":6' in out  # one offending row, named
        c = table(deltalog_warehouse, project, "constrained")
        assert c.version() == before and c.to_pyarrow_table().num_rows == 5

        _, out = run_dbt_and_capture(
            ["run", "--select", "constrained", "--vars", json.dumps({"lo": 6, "hi": 9, "amount": "id * 200"})],
            expect_pass=False)
        assert "amount < 1000" in out
        _, out = run_dbt_and_capture(
            ["run", "--select", "constrained",
             "--vars", json.dumps({"lo": 6, "hi": 9, "amount": "case when id = 7 then null else id end"})],
            expect_pass=False)
        assert "amount_not_negative" in out  # NULL violates a CHECK constraint in Delta
        assert table(deltalog_warehouse, project, "constrained").version() == before

        run_dbt(["run", "--select", "constrained", "--vars", json.dumps({"lo": 6, "hi": 9})])
        c = table(deltalog_warehouse, project, "constrained")
        assert c.version() == before + 1 and c.to_pyarrow_table().num_rows == 8

    def test_3_docs_follow_the_model(self, project, deltalog_warehouse):
        write_file(SCHEMA_YML.replace("In cents", "In euro cents"), project.project_root, "models", "schema.yml")
        run_dbt(["run", "--select", "documented"])
        dt = table(deltalog_warehouse, project, "documented")
        assert {f.name: f for f in dt.schema().fields}["amount"].metadata == {"comment": "In euro cents"}
        assert dt.version() == 1
        catalog = run_dbt(["docs", "generate"])
        node = catalog.nodes[f"model.test.documented"]
        assert node.metadata.comment == "Orders, one row per order"
        assert node.columns["amount"].comment == "In euro cents"


NEW_CONSTRAINT_YML = SCHEMA_YML.replace('expression: "amount < 1000"', 'expression: "amount < 30"')


class TestConstraintAddedLater:
    """A check constraint added to an existing incremental table is checked against its rows first,
    as Delta's ADD CONSTRAINT does."""

    @pytest.fixture(scope="class")
    @classmethod
    def models(cls):
        return {"constrained.sql": CONSTRAINED, "schema.yml": SCHEMA_YML.split("  - name: constrained")[0]
                + "  - name: constrained\n    columns: []\n"}

    def test_existing_rows_are_checked(self, project, deltalog_warehouse):
        run_dbt(["run"])
        base = table(deltalog_warehouse, project, "constrained")
        assert not any(k.startswith("delta.constraints.") for k in base.metadata().configuration)
        write_file(NEW_CONSTRAINT_YML, project.project_root, "models", "schema.yml")
        _, out = run_dbt_and_capture(["run", "--vars", json.dumps({"lo": 6, "hi": 7, "amount": "1"})],
                                     expect_pass=False)
        assert "amount < 30" in out and "existing row" in out
        c = table(deltalog_warehouse, project, "constrained")
        assert c.version() == 0 and not any(k.startswith("delta.constraints.") for k in c.metadata().configuration)
        # rows that satisfy it: the constraint lands, then the append, each checked
        write_file(NEW_CONSTRAINT_YML.replace("amount < 30", "amount < 100"), project.project_root, "models",
                   "schema.yml")
        run_dbt(["run", "--vars", json.dumps({"lo": 6, "hi": 7, "amount": "1"})])
        c = table(deltalog_warehouse, project, "constrained")
        ops = [h["operation"] for h in reversed(c.history())]
        assert ops == ["CREATE TABLE AS SELECT", "ADD CONSTRAINT", "WRITE"]
        assert c.to_pyarrow_table().num_rows == 6


REDEFINED = """
{{ config(materialized='incremental', incremental_strategy=var('strategy', 'append'), unique_key='id',
          tblproperties={'owner': var('owner', 'shop')}) }}
select id, cast({{ var('amount', "cast(id as string)") }} as int) as amount from range({{ var('lo', 1) }}, 4)
"""


class TestFailedRunKeepsTheDefinition:
    """An incremental run that changes the table's definition and whose write then fails leaves the
    table as it was: its properties and its rows ("a failed run changes nothing")."""

    @pytest.fixture(scope="class")
    @classmethod
    def models(cls):
        return {"redefined.sql": REDEFINED}

    @pytest.mark.parametrize("strategy", ["append", "merge"])
    def test_the_new_definition_is_undone_with_the_write(self, project, deltalog_warehouse, strategy):
        run_dbt(["run", "--full-refresh", "--vars", json.dumps({"strategy": strategy})])
        before = table(deltalog_warehouse, project, "redefined")
        rows = before.to_pyarrow_table().sort_by("id").to_pylist()
        assert before.metadata().configuration["owner"] == "shop"
        # a new property, then rows that fail in Spark's write (a cast ANSI mode refuses, at run time)
        bad = {"strategy": strategy, "owner": "finance", "amount": "concat('x', cast(id as string))"}
        _, out = run_dbt_and_capture(["run", "--vars", json.dumps(bad)], expect_pass=False)
        assert "CAST_INVALID_INPUT" in out or "cannot be cast" in out
        after = table(deltalog_warehouse, project, "redefined")
        assert after.metadata().configuration["owner"] == "shop"
        assert after.to_pyarrow_table().sort_by("id").to_pylist() == rows
        ops = [h["operation"] for h in after.history()[:2]]
        assert after.version() == before.version() + 2 and ops[1] == "SET TBLPROPERTIES", ops
        # the same change with good rows lands: the property, then the rows
        run_dbt(["run", "--vars", json.dumps({"strategy": strategy, "owner": "finance", "lo": 2})])
        landed = table(deltalog_warehouse, project, "redefined")
        assert landed.metadata().configuration["owner"] == "finance"
        assert landed.to_pyarrow_table().num_rows == (5 if strategy == "append" else 3)


BUCKETED = """
{{ config(materialized='table', clustered_by=['id'], buckets=4) }}
select 1 as id
"""
PARQUET = """
{{ config(materialized='table', file_format='parquet') }}
select 1 as id
"""
GRANTED = """
{{ config(materialized='table', grants={'select': ['analyst']}) }}
select 1 as id
"""


class TestInapplicableConfigs:
    @pytest.fixture(scope="class")
    @classmethod
    def models(cls):
        return {"bucketed.sql": BUCKETED, "parquet.sql": PARQUET, "granted.sql": GRANTED}

    def test_each_fails_by_name(self, project, deltalog_warehouse):
        for name, words in [("bucketed", ["clustered_by", "zorder_by"]), ("parquet", ["file_format", "delta"]),
                            ("granted", ["grants", "access"])]:
            _, out = run_dbt_and_capture(["run", "--select", name], expect_pass=False)
            for w in words:
                assert w in out, (name, w, out[-2000:])
            assert not os.path.exists(os.path.join(deltalog_warehouse, project.test_schema, name))


from dbt.tests.adapter.persist_docs.test_persist_docs import (  # noqa: E402
    BasePersistDocs,
    BasePersistDocsAllColumnsMissing,
    BasePersistDocsColumnMissing,
    BasePersistDocsCommentOnQuotedColumn,
)


class TestPersistDocs(BasePersistDocs):
    """dbt's suite: tables and views keep their descriptions and column comments (a view's next to
    its SQL), and `dbt docs generate` shows them."""


class TestPersistDocsColumnMissing(BasePersistDocsColumnMissing):
    pass


class TestPersistDocsAllColumnsMissing(BasePersistDocsAllColumnsMissing):
    pass


class TestPersistDocsCommentOnQuotedColumn(BasePersistDocsCommentOnQuotedColumn):
    pass


VIEW_WITH_DOCS = """
{{ config(materialized='view', persist_docs={'relation': true, 'columns': true}) }}
select 1 as id, 'it''s' as note, 2 as undocumented
"""

VIEW_DOCS_YML = """
version: 2
models:
  - name: documented_view
    description: "View model description, with a quote: it's"
    columns:
      - name: id
        description: "id Column description"
      - name: note
        description: 'a note \\\\ with a backslash'
"""


class TestViewDocsInDescribe:
    """A view's persisted docs show in DESCRIBE TABLE EXTENDED, as a table's do."""

    @pytest.fixture(scope="class")
    @classmethod
    def models(cls):
        return {"documented_view.sql": VIEW_WITH_DOCS, "schema.yml": VIEW_DOCS_YML}

    def test_describe_extended_shows_the_view_docs(self, project):
        run_dbt(["run"])
        rows = project.run_sql(f"describe table extended {project.test_schema}.documented_view", fetch="all")
        by_name = {r[0]: r for r in rows}
        assert by_name["id"][2] == "id Column description"
        assert by_name["note"][2] == "a note \\\\ with a backslash"
        assert by_name["undocumented"][2] in (None, "")
        assert by_name["Comment"][1] == "View model description, with a quote: it's"
        assert project.run_sql(f"select note from {project.test_schema}.documented_view", fetch="one")[0] == "it's"
