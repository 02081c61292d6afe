"""TableConfiguration: the one place feature questions about a table are answered."""
from __future__ import annotations

import pytest

from deltalog.actions import Metadata, Protocol
from deltalog.errors import InvalidTableError, UnsupportedFeatureError
from deltalog.table_configuration import TableConfiguration, flag


def config(**properties: str) -> TableConfiguration:
    return TableConfiguration(Metadata(configuration={k.replace("_", "."): v for k, v in properties.items()}))


@pytest.mark.parametrize("value, expected", [("true", True), ("TRUE", True), ("True", True), ("false", False),
                                             ("yes", False), (None, False)])
def test_boolean_properties_follow_delta_parse(value, expected):
    conf = {} if value is None else {"delta.enableDeletionVectors": value}
    assert flag(conf, "delta.enableDeletionVectors") is expected
    assert TableConfiguration(Metadata(configuration=conf)).deletion_vectors_enabled is expected


def test_defaults_of_a_table_without_properties():
    c = config()
    assert not (c.deletion_vectors_enabled or c.change_data_feed_enabled or c.row_tracking_enabled
                or c.append_only or c.in_commit_timestamps_enabled or c.type_widening_enabled)
    assert c.column_mapping_mode == "none"
    assert c.checkpoint_interval == 10 and c.checkpoint_stats == (True, False)
    assert c.target_file_size == 128 * 1024 * 1024
    assert c.required_protocol() == Protocol(1, 2)
    assert not c.supports("deletionVectors")


def test_features_switched_on_by_properties_are_required_by_the_protocol():
    c = config(delta_enableDeletionVectors="true", delta_enableRowTracking="true")
    protocol = c.required_protocol()
    assert (protocol.min_reader_version, protocol.min_writer_version) == (3, 7)
    assert {"deletionVectors", "rowTracking", "domainMetadata"} <= set(protocol.writer_features)
    assert protocol.reader_features == ["deletionVectors"]
    assert TableConfiguration(c.metadata, protocol).supports("rowTracking")


@pytest.mark.parametrize("key, value, error", [
    ("delta.appendOnly", "yes", InvalidTableError),
    ("delta.checkpointInterval", "0", InvalidTableError),
    ("delta.checkpointPolicy", "v3", InvalidTableError),
    ("delta.isolationLevel", "Snapshot", InvalidTableError),
    ("delta.columnMapping.mode", "position", InvalidTableError),
    ("delta.enableIcebergCompatV1", "true", UnsupportedFeatureError),
    ("delta.enableIcebergCompatV2", "true", InvalidTableError),  # without column mapping
    ("delta.universalFormat.enabledFormats", "iceberg", InvalidTableError),  # without IcebergCompatV2
    ("delta.universalFormat.enabledFormats", "hudi", InvalidTableError),
    ("delta.feature.somethingNew", "supported", UnsupportedFeatureError),
])
def test_properties_a_writer_cannot_honour_are_refused_by_name(key, value, error):
    c = TableConfiguration(Metadata(configuration={key: value}))
    with pytest.raises(error, match=key.replace(".", r"\.")):
        c.validate_properties("t")


def test_iceberg_compat_v2_rules():
    """IcebergCompatV2 needs column mapping and refuses deletion vectors, each by name; with both it is a
    table feature of the protocol."""
    mapped = {"delta.enableIcebergCompatV2": "true", "delta.columnMapping.mode": "name",
              "delta.universalFormat.enabledFormats": "iceberg"}
    c = TableConfiguration(Metadata(configuration=mapped))
    c.validate_properties("t")
    assert c.writes_iceberg and c.iceberg_compat_v2
    assert "icebergCompatV2" in c.required_protocol().writer_features
    assert c.required_protocol().stores_partition_columns
    with pytest.raises(InvalidTableError, match="delta.enableDeletionVectors"):
        TableConfiguration(Metadata(configuration={**mapped, "delta.enableDeletionVectors": "true"})) \
            .validate_properties("t")
