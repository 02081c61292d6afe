"""A data test's answer reused by a later command while nothing it reads changed (answer_reuse.py): the
same statuses as when computed; a new seed version, a changed view or a changed test computes it again."""
from __future__ import annotations

import json

import pytest
from dbt.tests.util import run_dbt_and_capture, write_file

REUSED = "an earlier command's answer over the same versions, reused"
SEEDS = {"people.csv": "id,name,team\n1,ann,a\n2,bob,b\n3,cid,a\n"}
MODELS = {
    "members.sql": "{{ config(materialized='view') }} select id, name, team from {{ ref('people') }}",
    "schema.yml": """
version: 2
models:
  - name: members
    columns:
      - name: id
        data_tests: [unique, not_null]
      - name: team
        data_tests:
          - accepted_values:
              arguments: {values: ['a', 'b']}
""",
}


@pytest.mark.dbt
class TestAnswerReuse:
    @pytest.fixture(scope="class")
    @classmethod
    def seeds(cls):
        return SEEDS

    @pytest.fixture(scope="class")
    @classmethod
    def models(cls):
        return MODELS

    def _build(self, monkeypatch, tmp_path):
        monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
        results, log = run_dbt_and_capture(["--debug", "build"], expect_pass=None)
        tests = {r.node.name: (str(r.status), r.failures) for r in results if r.node.resource_type == "test"}
        return tests, log

    def test_reused_until_what_it_reads_changes(self, project, monkeypatch, tmp_path):
        first, log = self._build(monkeypatch, tmp_path)
        assert first == {"unique_members_id": ("pass", 0), "not_null_members_id": ("pass", 0),
                         "accepted_values_members_team__a__b": ("pass", 0)}
        assert log.count("answered in this process by DuckDB") == 3 and REUSED not in log
        kept = list((tmp_path / "cache" / "deltalog" / "answers").glob("*.json"))
        assert len(kept) == 3 and all(json.loads(p.read_text())["tables"] for p in kept)

        again, log = self._build(monkeypatch, tmp_path)
        assert again == first and log.count(REUSED) == 3

        # the seed's new rows (a new version): each test computed again, and fails where it must
        write_file("id,name,team\n1,ann,a\n2,bob,b\n2,cid,c\n", project.project_root, "seeds", "people.csv")
        changed, log = self._build(monkeypatch, tmp_path)
        assert REUSED not in log
        assert changed == {"unique_members_id": ("fail", 1), "not_null_members_id": ("pass", 0),
                           "accepted_values_members_team__a__b": ("fail", 1)}
        again, log = self._build(monkeypatch, tmp_path)
        assert again == changed and log.count(REUSED) == 3

        # the view's SQL changed (the seed did not): computed again over the new view
        write_file("{{ config(materialized='view') }} select id, name, team from {{ ref('people') }} "
                   "where team <> 'c'", project.project_root, "models", "members.sql")
        viewed, log = self._build(monkeypatch, tmp_path)
        assert REUSED not in log
        assert viewed == {"unique_members_id": ("pass", 0), "not_null_members_id": ("pass", 0),
                          "accepted_values_members_team__a__b": ("pass", 0)}

        # a test's own SQL changed: that test alone computed again
        write_file(MODELS["schema.yml"].replace("values: ['a', 'b']", "values: ['a']"),
                   project.project_root, "models", "schema.yml")
        tested, log = self._build(monkeypatch, tmp_path)
        assert log.count(REUSED) == 2
        assert tested["accepted_values_members_team__a"] == ("fail", 1)
