"""dbt's on_schema_change modes as the engine's rule set decides them (`schema_evolution.schema_change`):
the table's schema after the write, or a refusal naming every column at fault."""
from __future__ import annotations

import pytest

from deltalog.errors import SchemaMismatchError
from deltalog.schema_evolution import schema_change


def _field(name, type_, nullable=True):
    return {"name": name, "type": type_, "nullable": nullable, "metadata": {}}


def _schema(*fields):
    return {"type": "struct", "fields": list(fields)}


TABLE = _schema(_field("id", "long", False), _field("amount", "double"), _field("note", "string"))


def _names(schema):
    return [f["name"] for f in schema["fields"]]


def test_the_same_columns_change_nothing_in_any_mode():
    for mode in ("ignore", "fail", "append_new_columns", "sync_all_columns"):
        change = schema_change("t", TABLE, _schema(_field("ID", "long"), _field("amount", "double"),
                                                   _field("note", "string")), mode)
        assert change.schema is TABLE and change.added == [] and change.removed == []


def test_ignore_keeps_the_table_s_columns():
    change = schema_change("t", TABLE, _schema(_field("id", "long"), _field("extra", "string")), "ignore")
    assert change.schema is TABLE


def test_fail_names_what_was_added_missing_and_retyped():
    with pytest.raises(SchemaMismatchError) as err:
        schema_change("t", TABLE, _schema(_field("id", "integer"), _field("amount", "double"),
                                          _field("extra", "string")), "fail")
    msg = str(err.value)
    assert msg.startswith("t: the source and target schemas are out of sync!")
    assert "columns added in the new data: ['extra']" in msg
    assert "columns missing from the new data: ['note']" in msg
    assert "columns with a new type: [('id', 'long', 'integer')]" in msg


def test_append_new_columns_appends_them_nullable_and_drops_nothing():
    change = schema_change("t", TABLE, _schema(_field("id", "long"), _field("extra", "string", False)),
                           "append_new_columns")
    assert _names(change.schema) == ["id", "amount", "note", "extra"]
    assert change.schema["fields"][0]["nullable"] is False and change.schema["fields"][3]["nullable"] is True
    assert (change.added, change.removed) == (["extra"], [])


def test_sync_all_columns_adds_and_drops():
    change = schema_change("t", TABLE, _schema(_field("extra", "string"), _field("id", "long")), "sync_all_columns")
    assert _names(change.schema) == ["id", "extra"]
    assert (change.added, change.removed) == (["extra"], ["amount", "note"])


@pytest.mark.parametrize("mode", ["append_new_columns", "sync_all_columns"])
def test_a_type_that_widens_widens_the_column_with_its_change_recorded(mode):
    table = _schema(_field("id", "integer", False), _field("amount", "float"), _field("day", "date"),
                    _field("price", "decimal(5,2)"), _field("small", "byte"))
    change = schema_change("t", table, _schema(_field("id", "long"), _field("amount", "double"),
                                               _field("day", "timestamp_ntz"), _field("price", "decimal(10,3)"),
                                               _field("small", "byte")), mode)
    assert change.widened == ["id", "amount", "day", "price"] and change.changed
    by_name = {f["name"]: f for f in change.schema["fields"]}
    assert by_name["id"]["type"] == "long" and by_name["id"]["nullable"] is False
    assert by_name["id"]["metadata"]["delta.typeChanges"] == [{"fromType": "integer", "toType": "long"}]
    assert by_name["price"]["metadata"]["delta.typeChanges"] == [{"fromType": "decimal(5,2)",
                                                                 "toType": "decimal(10,3)"}]
    assert "delta.typeChanges" not in by_name["small"]["metadata"]


@pytest.mark.parametrize("mode", ["append_new_columns", "sync_all_columns"])
def test_data_narrower_than_the_table_changes_nothing(mode):
    change = schema_change("t", TABLE, _schema(_field("id", "integer"), _field("amount", "float"),
                                               _field("note", "string")), mode)
    assert change.schema is TABLE and not change.changed


@pytest.mark.parametrize("mode", ["append_new_columns", "sync_all_columns"])
@pytest.mark.parametrize("old, new", [("long", "string"), ("integer", "double"), ("decimal(10,2)", "decimal(10,3)"),
                                      ("timestamp", "date"), ("long", "double")])
def test_a_narrowing_or_unsupported_change_of_type_is_refused_by_name(mode, old, new):
    table = _schema(_field("id", "long"), _field("amount", old))
    with pytest.raises(SchemaMismatchError, match=rf"{mode} cannot change the type of amount from .* a type may "
                                                  r"only widen \(byte -> short -> int -> long"):
        schema_change("t", table, _schema(_field("id", "long"), _field("amount", new)), mode)


@pytest.mark.parametrize("mode", ["append_new_columns", "sync_all_columns"])
def test_a_new_column_of_bare_nulls_is_refused(mode):
    with pytest.raises(SchemaMismatchError, match=r"new column\(s\) \['empty'\] have no type \(a bare NULL\)"):
        schema_change("t", TABLE, _schema(*TABLE["fields"], _field("empty", "void")), mode)


def test_an_unknown_mode_is_refused():
    with pytest.raises(ValueError, match="append_new_columns"):
        schema_change("t", TABLE, TABLE, "merge")
