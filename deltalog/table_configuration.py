"""What a table is configured to do. Its protocol, metadata and table properties answer every feature
question ("are deletion vectors on?", "which column mapping mode?", "which protocol does this need?").
The answers live here, together with the check of the properties a writer commits, so every writer
and reader follows the same rules.

Boolean properties follow Delta's own parse (`"true"` / `"false"`, any case): `flag` reads them, and
`validate` refuses any other value in metadata we commit."""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable

from . import column_defaults, column_mapping, generated_columns
from .actions import SUPPORTED_WRITER_FEATURES, Metadata, Protocol
from .constraints import CONSTRAINT_PREFIX
from .errors import InvalidTableError, UnsupportedFeatureError
from .identity import FEATURE as IDENTITY_FEATURE, declares_identity
from .schema import uses_type
from .type_widening import has_type_changes, iceberg_unreadable_type_changes

ISOLATION_LEVEL_KEY = "delta.isolationLevel"
SERIALIZABLE = "Serializable"
WRITE_SERIALIZABLE = "WriteSerializable"
SNAPSHOT_ISOLATION = "SnapshotIsolation"
# The levels a table (delta.isolationLevel) or a caller may ask for; SnapshotIsolation is only ever
# chosen automatically, for commits that change no data (OPTIMIZE).
ISOLATION_LEVELS = (SERIALIZABLE, WRITE_SERIALIZABLE)
DEFAULT_ISOLATION_LEVEL = WRITE_SERIALIZABLE
APPEND_ONLY_KEY = "delta.appendOnly"
CHECKPOINT_INTERVAL_KEY = "delta.checkpointInterval"
CHECKPOINT_POLICY_KEY = "delta.checkpointPolicy"
CHECKPOINT_STATS_AS_JSON_KEY = "delta.checkpoint.writeStatsAsJson"
CHECKPOINT_STATS_AS_STRUCT_KEY = "delta.checkpoint.writeStatsAsStruct"
CHANGE_DATA_FEED_KEY = "delta.enableChangeDataFeed"
DELETION_VECTORS_KEY = "delta.enableDeletionVectors"
IN_COMMIT_TIMESTAMPS_KEY = "delta.enableInCommitTimestamps"
ICT_ENABLEMENT_VERSION_KEY = "delta.inCommitTimestampEnablementVersion"
ICT_ENABLEMENT_TIMESTAMP_KEY = "delta.inCommitTimestampEnablementTimestamp"
ROW_TRACKING_KEY = "delta.enableRowTracking"
ROW_TRACKING_SUSPENDED_KEY = "delta.rowTrackingSuspended"
TYPE_WIDENING_KEY = "delta.enableTypeWidening"
TARGET_FILE_SIZE_KEY = "delta.targetFileSize"
AUTO_COMPACT_KEY = "delta.autoOptimize.autoCompact"
FEATURE_PREFIX = "delta.feature."

DEFAULT_CHECKPOINT_INTERVAL = 10
DEFAULT_TARGET_FILE_SIZE = 128 * 1024 * 1024
CHECKPOINT_POLICIES = ("classic", "v2")
BOOLEAN_KEYS = (APPEND_ONLY_KEY, CHANGE_DATA_FEED_KEY, IN_COMMIT_TIMESTAMPS_KEY, ROW_TRACKING_KEY,
                ROW_TRACKING_SUSPENDED_KEY, TYPE_WIDENING_KEY)

# Table properties that switch on a table feature this engine cannot write.
UNSUPPORTED_PROPERTIES = {
    "delta.enableIcebergCompatV1": "icebergCompatV1",
}
ICEBERG_COMPAT_V2_KEY = "delta.enableIcebergCompatV2"
ICEBERG_COMPAT_V3_KEY = "delta.enableIcebergCompatV3"
UNIVERSAL_FORMATS_KEY = "delta.universalFormat.enabledFormats"
# Writer features that also need the reader to know them (reader version 3).
READER_WRITER_FEATURES = frozenset({"timestampNtz", "vacuumProtocolCheck", "columnMapping", "variantType",
                                    "deletionVectors", "v2Checkpoint", "typeWidening"})
# What writer version 2 implies, listed explicitly once a table moves to writer version 7.
LEGACY_WRITER_2_FEATURES = ("appendOnly", "invariants")


_UNIT_MS = {"nanosecond": 1e-6, "microsecond": 1e-3, "millisecond": 1, "second": 1000,
            "minute": 60_000, "hour": 3_600_000, "day": 86_400_000, "week": 604_800_000}
_INTERVAL_PART = re.compile(r"(-?\d+)\s*([a-z]+?)s?\b")


def parse_interval_ms(value: str) -> int:
    """`interval 1 weeks`, `7 days`, `interval 2 days 12 hours` -> milliseconds."""
    text = value.strip().lower()
    if text.startswith("interval"):
        text = text[len("interval"):]
    total, matched = 0.0, False
    for number, unit in _INTERVAL_PART.findall(text):
        if unit not in _UNIT_MS:
            raise ValueError(f"unknown interval unit {unit!r} in {value!r}")
        total += int(number) * _UNIT_MS[unit]
        matched = True
    if not matched:
        raise ValueError(f"not an interval: {value!r} (expected e.g. 'interval 1 weeks')")
    return int(total)


def flag(configuration: dict[str, str] | None, key: str, default: bool = False) -> bool:
    """A boolean table property: true only for "true" in any case (the default when absent)."""
    value = (configuration or {}).get(key)
    if value is None:
        return default
    return str(value).lower() == "true"


@dataclass(frozen=True)
class TableConfiguration:
    """A table's metadata and protocol (None before the table's first commit) and the questions asked of
    them. Cheap to make: one per snapshot or transaction, where the question is asked."""

    metadata: Metadata
    protocol: Protocol | None = None

    @property
    def properties(self) -> dict[str, str]:
        return self.metadata.configuration

    # -- features a property switches on
    @property
    def deletion_vectors_enabled(self) -> bool:
        """Whether DML marks rows deleted instead of rewriting files."""
        return flag(self.properties, DELETION_VECTORS_KEY)

    @property
    def change_data_feed_enabled(self) -> bool:
        return flag(self.properties, CHANGE_DATA_FEED_KEY)

    @property
    def row_tracking_enabled(self) -> bool:
        return flag(self.properties, ROW_TRACKING_KEY)

    @property
    def row_tracking_suspended(self) -> bool:
        return flag(self.properties, ROW_TRACKING_SUSPENDED_KEY)

    @property
    def in_commit_timestamps_enabled(self) -> bool:
        return flag(self.properties, IN_COMMIT_TIMESTAMPS_KEY)

    @property
    def append_only(self) -> bool:
        return flag(self.properties, APPEND_ONLY_KEY)

    @property
    def type_widening_enabled(self) -> bool:
        return flag(self.properties, TYPE_WIDENING_KEY)

    @property
    def writes_iceberg(self) -> bool:
        """Iceberg metadata is written after each commit (UniForm: iceberg in the enabled formats)."""
        formats = str(self.properties.get(UNIVERSAL_FORMATS_KEY) or "")
        return "iceberg" in [f.strip().lower() for f in formats.split(",")]

    @property
    def iceberg_compat_v2(self) -> bool:
        """IcebergCompatV2: column mapping, no deletion vectors, partition values in the data files too,
        nested ids, numRecords in every file's stats, so Iceberg metadata can describe the files."""
        return flag(self.properties, ICEBERG_COMPAT_V2_KEY)

    @property
    def iceberg_compat_v3(self) -> bool:
        """IcebergCompatV3: V2's rules, but deletion vectors allowed (Iceberg v3 reads them) and row
        tracking on (Delta's row IDs are Iceberg v3's row lineage)."""
        return flag(self.properties, ICEBERG_COMPAT_V3_KEY)

    @property
    def column_mapping_mode(self) -> str:
        return column_mapping.mode_of(self.properties)

    @property
    def checkpoint_policy(self) -> str:
        return str(self.properties.get(CHECKPOINT_POLICY_KEY, "classic")).lower()

    @property
    def checkpoint_interval(self) -> int:
        """Commits between checkpoints (`delta.checkpointInterval`, default 10; an unreadable value
        written by another engine counts as the default)."""
        try:
            return int(self.properties.get(CHECKPOINT_INTERVAL_KEY, DEFAULT_CHECKPOINT_INTERVAL))
        except ValueError:
            return DEFAULT_CHECKPOINT_INTERVAL

    @property
    def expired_log_cleanup(self) -> bool:
        """Whether log files older than `log_retention_ms` go at checkpoint time (`delta.enableExpiredLogCleanup`)."""
        return flag(self.properties, "delta.enableExpiredLogCleanup", default=True)

    @property
    def log_retention_ms(self) -> int:
        """`delta.logRetentionDuration` (default 30 days; an unreadable value counts as the default)."""
        try:
            return parse_interval_ms(self.properties.get("delta.logRetentionDuration", "interval 30 days"))
        except ValueError:
            return 30 * 86_400_000

    @property
    def checkpoint_stats(self) -> tuple[bool, bool]:
        """(write `stats` JSON, write `stats_parsed` and `partitionValues_parsed`) in checkpoints:
        `delta.checkpoint.writeStatsAsJson` (default true) and `…writeStatsAsStruct` (default false)."""
        return (flag(self.properties, CHECKPOINT_STATS_AS_JSON_KEY, default=True),
                flag(self.properties, CHECKPOINT_STATS_AS_STRUCT_KEY))

    @property
    def target_file_size(self) -> int:
        """The size data files are written up to: `delta.targetFileSize`, else 128 MiB."""
        try:
            return int(self.properties.get(TARGET_FILE_SIZE_KEY) or DEFAULT_TARGET_FILE_SIZE)
        except ValueError:
            return DEFAULT_TARGET_FILE_SIZE

    # -- the protocol
    def supports(self, feature: str) -> bool:
        """Whether the table's protocol has the writer feature (false before the first commit)."""
        return self.protocol is not None and self.protocol.has_writer_feature(feature)

    def required_protocol(self, features: Iterable[str] = ()) -> Protocol:
        """The least protocol at or above the table's that its metadata (and `features`) need: (1, 2) by
        default, writer 7 (and reader 3 for reader-writer features) as soon as a table feature such as
        timestampNtz is used."""
        base = self.protocol or Protocol(1, 2)
        conf, schema = self.properties, self.metadata.schema_json
        needed = {k[len(FEATURE_PREFIX):] for k in conf if k.startswith(FEATURE_PREFIX)}
        wanted = {
            "timestampNtz": uses_type(schema, "timestamp_ntz"),
            "variantType": uses_type(schema, "variant"),
            "checkConstraints": any(k.startswith(CONSTRAINT_PREFIX) for k in conf),
            "columnMapping": column_mapping.is_mapped(conf),
            "changeDataFeed": self.change_data_feed_enabled,
            "deletionVectors": self.deletion_vectors_enabled,
            "inCommitTimestamp": self.in_commit_timestamps_enabled,
            "rowTracking": self.row_tracking_enabled,
            "typeWidening": self.type_widening_enabled or has_type_changes(schema),
            "v2Checkpoint": self.checkpoint_policy == "v2",
            "icebergCompatV2": self.iceberg_compat_v2,
            "icebergCompatV3": self.iceberg_compat_v3,
            generated_columns.FEATURE: generated_columns.has_generated_columns(schema),
            column_defaults.FEATURE: column_defaults.has_column_defaults(schema),
            IDENTITY_FEATURE: declares_identity(schema),
        }
        needed |= {feature for feature, on in wanted.items() if on}
        needed |= set(features)
        if "rowTracking" in needed:
            needed.add("domainMetadata")  # the high-water mark lives in domain metadata
        missing = {f for f in needed if not base.has_writer_feature(f)}
        if not missing:
            return base
        writer = set(base.writer_features or [])
        if 2 <= base.min_writer_version < 7:
            writer |= set(LEGACY_WRITER_2_FEATURES)
        if 3 <= base.min_writer_version < 7:
            writer.add("checkConstraints")
        writer |= missing
        reader_needed = {f for f in writer if f in READER_WRITER_FEATURES}
        if reader_needed or base.min_reader_version == 3:
            reader_features = sorted(set(base.reader_features or []) | reader_needed)
            return Protocol(3, 7, reader_features, sorted(writer))
        return Protocol(max(base.min_reader_version, 1), 7, None, sorted(writer))

    # -- what a writer may commit
    def validate_properties(self, table: str) -> None:
        """Refuse table properties this engine cannot honour, naming the property and what is allowed."""
        conf = self.properties
        generated_columns.validate(self.metadata.schema_json, table, self.metadata.partition_columns)
        column_defaults.validate(self.metadata.schema_json, table)
        formats = [f.strip().lower() for f in str(conf.get(UNIVERSAL_FORMATS_KEY) or "").split(",") if f.strip()]
        if any(f != "iceberg" for f in formats):
            raise InvalidTableError(f"{table}: {UNIVERSAL_FORMATS_KEY}={conf[UNIVERSAL_FORMATS_KEY]!r} is not "
                                    f"allowed. Allowed: iceberg (Delta's other universal formats are not written here).")
        compat = [key for key, on in ((ICEBERG_COMPAT_V2_KEY, self.iceberg_compat_v2),
                                      (ICEBERG_COMPAT_V3_KEY, self.iceberg_compat_v3)) if on]
        if formats and not compat:
            raise InvalidTableError(f"{table}: {UNIVERSAL_FORMATS_KEY}=iceberg needs {ICEBERG_COMPAT_V2_KEY}=true "
                                    f"or {ICEBERG_COMPAT_V3_KEY}=true (table_format: iceberg sets them).")
        if len(compat) > 1:
            raise InvalidTableError(f"{table}: {ICEBERG_COMPAT_V2_KEY} and {ICEBERG_COMPAT_V3_KEY} cannot both be "
                                    f"true. Allowed: one of them (V3 when the table has deletion vectors).")
        for key in compat:
            if not column_mapping.is_mapped(conf):
                raise InvalidTableError(
                    f"{table}: {key}=true needs column mapping: set {column_mapping.MODE} to "
                    f"name (table_format: iceberg does).")
        if self.iceberg_compat_v2 and self.deletion_vectors_enabled:
            raise InvalidTableError(
                f"{table}: {ICEBERG_COMPAT_V2_KEY}=true and delta.enableDeletionVectors=true cannot go "
                f"together: Iceberg v2 readers do not read deletion vectors. Allowed: drop deletion_vectors "
                f"(DELETE, UPDATE and MERGE then rewrite files), or {ICEBERG_COMPAT_V3_KEY}=true (Iceberg v3 "
                f"readers read them; table_format: iceberg with deletion_vectors: true sets it).")
        if compat and has_type_changes(self.metadata.schema_json):
            unreadable = iceberg_unreadable_type_changes(self.metadata.schema_json)
            if unreadable:
                raise InvalidTableError(
                    f"{table}: a table readable as Iceberg cannot widen {', '.join(unreadable)}: Iceberg readers "
                    f"promote int -> long, float -> double and decimal precision only. Cast the column in the "
                    f"model to keep its type, or rebuild the table (a full refresh).")
        if self.iceberg_compat_v3 and (not self.row_tracking_enabled or self.row_tracking_suspended):
            raise InvalidTableError(
                f"{table}: {ICEBERG_COMPAT_V3_KEY}=true needs row tracking: set {ROW_TRACKING_KEY}=true (and "
                f"not {ROW_TRACKING_SUSPENDED_KEY}); table_format: iceberg does.")
        if ISOLATION_LEVEL_KEY in conf and conf[ISOLATION_LEVEL_KEY] not in ISOLATION_LEVELS:
            raise InvalidTableError(
                f"{table}: isolation level {conf[ISOLATION_LEVEL_KEY]!r} ({ISOLATION_LEVEL_KEY}) is not known. "
                f"Allowed values: {', '.join(ISOLATION_LEVELS)} (default {DEFAULT_ISOLATION_LEVEL}).")
        if CHECKPOINT_INTERVAL_KEY in conf:
            value = conf[CHECKPOINT_INTERVAL_KEY]
            if not re.fullmatch(r"\s*[0-9]+\s*", str(value)) or int(value) < 1:
                raise InvalidTableError(
                    f"{table}: {CHECKPOINT_INTERVAL_KEY}={value!r} is not allowed: it must be an integer >= 1.")
        if self.checkpoint_policy not in CHECKPOINT_POLICIES:
            raise InvalidTableError(f"{table}: {CHECKPOINT_POLICY_KEY}={conf[CHECKPOINT_POLICY_KEY]!r} is not "
                                    f"allowed: allowed {', '.join(CHECKPOINT_POLICIES)}.")
        for key in BOOLEAN_KEYS:
            if key in conf and str(conf[key]).lower() not in ("true", "false"):
                raise InvalidTableError(f"{table}: {key}={conf[key]!r} is not allowed: allowed true, false.")
        for key, feature in UNSUPPORTED_PROPERTIES.items():
            if flag(conf, key):
                raise UnsupportedFeatureError(
                    f"{table}: table property {key}=true needs the Delta table feature {feature!r}, which this "
                    f"engine cannot write. Remove the property.")
        if self.column_mapping_mode not in column_mapping.MODES:
            raise InvalidTableError(f"{table}: {column_mapping.MODE}={conf[column_mapping.MODE]!r} is not "
                                    f"allowed. Allowed: {', '.join(column_mapping.MODES)}.")
        for key, value in conf.items():
            if key.startswith(FEATURE_PREFIX):
                feature = key[len(FEATURE_PREFIX):]
                if feature not in SUPPORTED_WRITER_FEATURES:
                    raise UnsupportedFeatureError(
                        f"{table}: {key}={value} asks for the table feature {feature!r}, which this engine "
                        f"cannot write. Supported features: {sorted(SUPPORTED_WRITER_FEATURES)}.")
