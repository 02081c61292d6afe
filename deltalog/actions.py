"""The Delta log actions, as typed dataclasses, and their JSON form exactly as the protocol gives it.

One commit file holds one JSON object per line, each with a single key naming the action
(`protocol`, `metaData`, `add`, `remove`, `txn`, `commitInfo`, `cdc`, `domainMetadata`, ...).
`to_dict()` yields the inner object (absent optional fields left out); `from_dict()` tolerates fields
it does not know. Paths are kept exactly as they appear in the log (URI-encoded); `paths.decode_path`
turns them into relative file-system paths.
"""
from __future__ import annotations

import json
import re
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator

import orjson

from . import log_json
from .errors import CorruptLogError

# Features this engine implements. Anything else in a table's protocol makes it refuse the table.
SUPPORTED_READER_FEATURES = frozenset({"timestampNtz", "vacuumProtocolCheck", "checkpointProtection",
                                       "deletionVectors", "columnMapping", "v2Checkpoint",
                                       "typeWidening", "typeWidening-preview",
                                       "variantType", "variantType-preview"})
SUPPORTED_WRITER_FEATURES = frozenset({
    "appendOnly", "invariants", "timestampNtz", "vacuumProtocolCheck", "checkpointProtection",
    "materializePartitionColumns", "checkConstraints", "domainMetadata", "clustering", "columnMapping",
    "changeDataFeed", "inCommitTimestamp", "variantType", "deletionVectors", "rowTracking", "icebergCompatV2",
    "icebergCompatV3",
    # checkpoints here are classic single-file ones with a checkpointMetadata row (checkpoint_write.py)
    "v2Checkpoint",
    # no write here changes a column's type; files keep the table's current types (schema.py)
    "typeWidening", "typeWidening-preview",
    # computed or checked on every write that adds rows (generated_columns.py, column_defaults.py)
    "generatedColumns", "allowColumnDefaults",
    # identity values generated past the high-water mark, which the same commit moves (identity.py)
    "identityColumns",
})


# What each legacy writer version (below 7) implies.
_LEGACY_WRITER_FEATURES = {2: ("appendOnly", "invariants")}
_LEGACY_WRITER_FEATURES[3] = _LEGACY_WRITER_FEATURES[2] + ("checkConstraints",)
_LEGACY_WRITER_FEATURES[4] = _LEGACY_WRITER_FEATURES[3] + ("changeDataFeed", "generatedColumns")
_LEGACY_WRITER_FEATURES[5] = _LEGACY_WRITER_FEATURES[4] + ("columnMapping",)
_LEGACY_WRITER_FEATURES[6] = _LEGACY_WRITER_FEATURES[5] + ("identityColumns",)


def now_ms() -> int:
    return int(time.time() * 1000)


def _drop_none(d: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if v is not None}


@dataclass
class Protocol:
    min_reader_version: int = 1
    min_writer_version: int = 2
    reader_features: list[str] | None = None
    writer_features: list[str] | None = None

    KEY = "protocol"

    def to_dict(self) -> dict[str, Any]:
        return _drop_none({
            "minReaderVersion": self.min_reader_version,
            "minWriterVersion": self.min_writer_version,
            "readerFeatures": self.reader_features,
            "writerFeatures": self.writer_features,
        })

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Protocol":
        return cls(int(d["minReaderVersion"]), int(d["minWriterVersion"]),
                   d.get("readerFeatures"), d.get("writerFeatures"))

    def unsupported_reader_features(self) -> list[str]:
        """Reader features (or a reader version) that this engine cannot read."""
        if self.min_reader_version > 3:
            return [f"minReaderVersion={self.min_reader_version}"]
        if self.min_reader_version == 2:
            return []  # reader v2 means column mapping, which is read
        if self.min_reader_version == 3:
            return sorted(set(self.reader_features or []) - SUPPORTED_READER_FEATURES)
        return []

    def unsupported_writer_features(self, metadata: "Metadata | None" = None) -> list[str]:
        """Writer features (or a writer version) this engine would have to implement to write the table.
        Legacy writer versions 4 to 6 only allow change data feed, generated and identity columns, all
        written here (`metadata` is no longer needed to tell)."""
        if self.min_writer_version > 7:
            return [f"minWriterVersion={self.min_writer_version}"]
        if self.min_writer_version == 7:
            return sorted(set(self.writer_features or []) - SUPPORTED_WRITER_FEATURES)
        return []

    def has_writer_feature(self, name: str) -> bool:
        if self.min_writer_version == 7:
            return name in (self.writer_features or [])
        return name in _LEGACY_WRITER_FEATURES.get(self.min_writer_version, ())

    @property
    def stores_partition_columns(self) -> bool:
        """Whether data files hold the partition columns too (materializePartitionColumns; IcebergCompat,
        whose readers may read a file without the table's partition values)."""
        return any(self.has_writer_feature(f) for f in ("materializePartitionColumns", "icebergCompatV1",
                                                        "icebergCompatV2", "icebergCompatV3"))


@dataclass
class Format:
    provider: str = "parquet"
    options: dict[str, str] = field(default_factory=dict)


@dataclass
class Metadata:
    id: str = field(default_factory=lambda: str(uuid.uuid4()))
    schema_string: str = '{"type":"struct","fields":[]}'
    partition_columns: list[str] = field(default_factory=list)
    configuration: dict[str, str] = field(default_factory=dict)
    format: Format = field(default_factory=Format)
    name: str | None = None
    description: str | None = None
    created_time: int | None = field(default_factory=now_ms)

    KEY = "metaData"

    def to_dict(self) -> dict[str, Any]:
        return _drop_none({
            "id": self.id,
            "name": self.name,
            "description": self.description,
            "format": {"provider": self.format.provider, "options": dict(self.format.options)},
            "schemaString": self.schema_string,
            "partitionColumns": list(self.partition_columns),
            "configuration": dict(self.configuration),
            "createdTime": self.created_time,
        })

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Metadata":
        fmt = d.get("format") or {}
        return cls(
            id=d["id"],
            schema_string=d["schemaString"],
            partition_columns=list(d.get("partitionColumns") or []),
            configuration=dict(d.get("configuration") or {}),
            format=Format(fmt.get("provider", "parquet"), dict(fmt.get("options") or {})),
            name=d.get("name"),
            description=d.get("description"),
            created_time=d.get("createdTime"),
        )

    @property
    def schema_json(self) -> dict[str, Any]:
        return json.loads(self.schema_string)


@dataclass
class AddFile:
    path: str  # as in the log: relative and URI-encoded, or an absolute URI
    partition_values: dict[str, str | None]
    size: int
    modification_time: int
    data_change: bool = True
    stats: str | None = None
    tags: dict[str, str] | None = None
    deletion_vector: dict[str, Any] | None = None
    base_row_id: int | None = None
    default_row_commit_version: int | None = None
    clustering_provider: str | None = None

    KEY = "add"

    def to_dict(self) -> dict[str, Any]:
        return _drop_none({
            "path": self.path,
            "partitionValues": dict(self.partition_values),
            "size": self.size,
            "modificationTime": self.modification_time,
            "dataChange": self.data_change,
            "stats": self.stats,
            "tags": self.tags,
            "deletionVector": self.deletion_vector,
            "baseRowId": self.base_row_id,
            "defaultRowCommitVersion": self.default_row_commit_version,
            "clusteringProvider": self.clustering_provider,
        })

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "AddFile":
        return cls(
            path=d["path"], partition_values=dict(d.get("partitionValues") or {}),
            size=int(d.get("size") or 0), modification_time=int(d.get("modificationTime") or 0),
            data_change=bool(d.get("dataChange", True)), stats=d.get("stats"), tags=d.get("tags"),
            deletion_vector=d.get("deletionVector"), base_row_id=d.get("baseRowId"),
            default_row_commit_version=d.get("defaultRowCommitVersion"),
            clustering_provider=d.get("clusteringProvider"),
        )

    def remove(self, deletion_timestamp: int | None = None, data_change: bool = True) -> "RemoveFile":
        """The tombstone for this file, carrying what delta-spark carries."""
        return RemoveFile(
            path=self.path, deletion_timestamp=deletion_timestamp or now_ms(), data_change=data_change,
            extended_file_metadata=True, partition_values=dict(self.partition_values),
            size=self.size, stats=self.stats, tags=self.tags, deletion_vector=self.deletion_vector,
            base_row_id=self.base_row_id, default_row_commit_version=self.default_row_commit_version,
        )

    @property
    def num_records(self) -> int | None:
        return json.loads(self.stats).get("numRecords") if self.stats else None


@dataclass
class RemoveFile:
    path: str
    deletion_timestamp: int | None = None
    data_change: bool = True
    extended_file_metadata: bool | None = None
    partition_values: dict[str, str | None] | None = None
    size: int | None = None
    stats: str | None = None
    tags: dict[str, str] | None = None
    deletion_vector: dict[str, Any] | None = None
    base_row_id: int | None = None
    default_row_commit_version: int | None = None

    KEY = "remove"

    def to_dict(self) -> dict[str, Any]:
        return _drop_none({
            "path": self.path,
            "deletionTimestamp": self.deletion_timestamp,
            "dataChange": self.data_change,
            "extendedFileMetadata": self.extended_file_metadata,
            "partitionValues": self.partition_values,
            "size": self.size,
            "stats": self.stats,
            "tags": self.tags,
            "deletionVector": self.deletion_vector,
            "baseRowId": self.base_row_id,
            "defaultRowCommitVersion": self.default_row_commit_version,
        })

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "RemoveFile":
        return cls(
            path=d["path"], deletion_timestamp=d.get("deletionTimestamp"),
            data_change=bool(d.get("dataChange", True)),
            extended_file_metadata=d.get("extendedFileMetadata"),
            partition_values=d.get("partitionValues"), size=d.get("size"), stats=d.get("stats"),
            tags=d.get("tags"), deletion_vector=d.get("deletionVector"), base_row_id=d.get("baseRowId"),
            default_row_commit_version=d.get("defaultRowCommitVersion"),
        )


@dataclass
class AddCDCFile:
    """A change data file (`_change_data/…`): the rows a commit changed, each with its `_change_type`.
    Readers of the change data feed use these instead of the commit's adds and removes."""
    path: str
    partition_values: dict[str, str | None] = field(default_factory=dict)
    size: int = 0
    data_change: bool = False
    tags: dict[str, str] | None = None

    KEY = "cdc"

    def to_dict(self) -> dict[str, Any]:
        return _drop_none({"path": self.path, "partitionValues": self.partition_values, "size": self.size,
                           "dataChange": self.data_change, "tags": self.tags})

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "AddCDCFile":
        return cls(d["path"], d.get("partitionValues") or {}, int(d.get("size") or 0),
                   bool(d.get("dataChange", False)), d.get("tags"))


@dataclass
class SetTransaction:
    app_id: str
    version: int
    last_updated: int | None = None

    KEY = "txn"

    def to_dict(self) -> dict[str, Any]:
        return _drop_none({"appId": self.app_id, "version": self.version, "lastUpdated": self.last_updated})

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "SetTransaction":
        return cls(d["appId"], int(d["version"]), d.get("lastUpdated"))


@dataclass
class DomainMetadata:
    domain: str
    configuration: str
    removed: bool = False

    KEY = "domainMetadata"

    def to_dict(self) -> dict[str, Any]:
        return {"domain": self.domain, "configuration": self.configuration, "removed": self.removed}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "DomainMetadata":
        return cls(d["domain"], d.get("configuration", ""), bool(d.get("removed", False)))


@dataclass
class CommitInfo:
    """Free-form provenance. Known keys are typed; anything else a writer put there is kept in `extra`."""
    timestamp: int | None = None
    operation: str | None = None
    operation_parameters: dict[str, str] = field(default_factory=dict)
    read_version: int | None = None
    isolation_level: str | None = None
    is_blind_append: bool | None = None
    operation_metrics: dict[str, str] | None = None
    engine_info: str | None = None
    txn_id: str | None = None
    user_metadata: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    KEY = "commitInfo"

    def to_dict(self) -> dict[str, Any]:
        d = _drop_none({
            "timestamp": self.timestamp,
            "operation": self.operation,
            "operationParameters": self.operation_parameters,
            "readVersion": self.read_version,
            "isolationLevel": self.isolation_level,
            "isBlindAppend": self.is_blind_append,
            "operationMetrics": self.operation_metrics,
            "userMetadata": self.user_metadata,
            "engineInfo": self.engine_info,
            "txnId": self.txn_id,
        })
        d.update(self.extra)
        return d

    _KNOWN = {"timestamp", "operation", "operationParameters", "readVersion", "isolationLevel",
              "isBlindAppend", "operationMetrics", "engineInfo", "txnId", "userMetadata"}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "CommitInfo":
        return cls(
            timestamp=d.get("timestamp"), operation=d.get("operation"),
            operation_parameters=d.get("operationParameters") or {},
            read_version=d.get("readVersion"), isolation_level=d.get("isolationLevel"),
            is_blind_append=d.get("isBlindAppend"), operation_metrics=d.get("operationMetrics"),
            engine_info=d.get("engineInfo"), txn_id=d.get("txnId"), user_metadata=d.get("userMetadata"),
            extra={k: v for k, v in d.items() if k not in cls._KNOWN},
        )


Action = Protocol | Metadata | AddFile | RemoveFile | AddCDCFile | SetTransaction | DomainMetadata | CommitInfo

_BY_KEY = {c.KEY: c for c in (Protocol, Metadata, AddFile, RemoveFile, AddCDCFile, SetTransaction,
                              DomainMetadata, CommitInfo)}
# Actions a reader must tolerate but that never enter the table state this engine keeps.
IGNORED_KEYS = frozenset({"checkpointMetadata", "sidecar"})


def action_to_json(action: Action) -> str:
    return json.dumps({action.KEY: action.to_dict()}, separators=(",", ":"), ensure_ascii=False)


def commit_to_bytes(actions: Iterable[Action]) -> bytes:
    return ("\n".join(action_to_json(a) for a in actions) + "\n").encode("utf-8")


def parse_action(obj: dict[str, Any]) -> Action | None:
    """One log line, already JSON-decoded, to its action; None for actions kept out of the state."""
    for key, value in obj.items():
        cls = _BY_KEY.get(key)
        if cls is not None:
            return cls.from_dict(value)
        if key in IGNORED_KEYS:
            return None
    return None  # unknown action kinds are ignored, as the protocol requires of readers


_NOT_BLANK = re.compile(r"\S")


def commit_objects(data: bytes, source: str) -> Iterator[tuple[int, Any]]:
    """(line number, JSON value) of each action in a commit file: one per line as the protocol writes
    them, or, read leniently as delta-rs does, values spread over several lines (pretty-printed)."""
    try:  # the usual shape, one action per line: parsed line by line (orjson: 4x the stdlib's speed)
        objects = [(i, orjson.loads(line)) for i, line in enumerate(data.split(b"\n"), 1) if line.strip()]
    except ValueError:  # also what orjson refuses and the stdlib takes: NaN, integers over 64 bits
        objects = None
    if objects is not None:
        yield from objects
        return
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise CorruptLogError(
            f"{source}: not UTF-8 text (byte {e.start}); a commit file is JSON. The commit file is corrupt; "
            f"restore it from a backup or remove the table's later commits with care.") from None
    decoder = json.JSONDecoder()
    at, lineno, counted = 0, 1, 0
    while True:
        start = _NOT_BLANK.search(text, at)
        if start is None:
            return
        lineno += text.count("\n", counted, start.start())  # from the last value on: linear overall
        counted = start.start()
        try:
            obj, at = log_json.raw_decode(decoder, text, start.start())
        except ValueError as e:
            raise CorruptLogError(
                f"{source}, line {lineno}: not a valid Delta action ({e}). The commit file is corrupt or "
                f"truncated; restore it from a backup or remove the table's later commits with care."
            ) from None
        yield lineno, obj


def parse_commit(data: bytes, source: str) -> list[Action]:
    """All actions of one commit file; `source` names the file in errors."""
    out: list[Action] = []
    for lineno, obj in commit_objects(data, source):
        try:
            action = parse_action(obj)
        except (ValueError, KeyError, TypeError) as e:
            raise CorruptLogError(
                f"{source}, line {lineno}: not a valid Delta action ({e}). The commit file is corrupt or "
                f"truncated; restore it from a backup or remove the table's later commits with care."
            ) from None
        if action is not None:
            out.append(action)
    return out


# ---- the JSON types of the fields readers use

_INT, _STR, _BOOL = (int,), (str,), (bool,)
# the fields replay reads, with the JSON types the protocol gives them (None: may be absent or null)
_FIELD_TYPES: dict[str, dict[str, tuple[type, ...]]] = {
    "add": {"path": _STR, "partitionValues": (dict,), "size": _INT, "modificationTime": _INT,
            "dataChange": _BOOL, "stats": _STR, "tags": (dict,), "deletionVector": (dict,),
            "baseRowId": _INT, "defaultRowCommitVersion": _INT},
    "remove": {"path": _STR, "deletionTimestamp": _INT, "size": _INT, "dataChange": _BOOL,
               "partitionValues": (dict,), "deletionVector": (dict,), "baseRowId": _INT,
               "defaultRowCommitVersion": _INT},
    "txn": {"appId": _STR, "version": _INT, "lastUpdated": _INT},
    "domainMetadata": {"domain": _STR, "configuration": _STR, "removed": _BOOL},
    "metaData": {"id": _STR, "schemaString": _STR, "partitionColumns": (list,), "configuration": (dict,),
                 "format": (dict,), "name": _STR, "description": _STR, "createdTime": _INT},
    "protocol": {"minReaderVersion": _INT, "minWriterVersion": _INT, "readerFeatures": (list,),
                 "writerFeatures": (list,)},
}
# lists and maps whose items are strings
_STRING_ITEMS = {"partitionValues", "tags", "configuration", "partitionColumns", "readerFeatures", "writerFeatures"}
_REQUIRED = {"add": ("path",), "remove": ("path",), "txn": ("appId", "version"), "domainMetadata": ("domain",)}
_DV_TYPES = {"storageType": _STR, "pathOrInlineDv": _STR, "offset": _INT, "sizeInBytes": _INT, "cardinality": _INT}


def _typed(where: str, value: Any, types: tuple[type, ...]) -> None:
    if value is None:
        return
    if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
        raise ValueError(f"{where} is {json_type(value)}, not {' or '.join(json_type(t()) for t in types)}")
    if isinstance(value, int) and not isinstance(value, bool) and not -2 ** 63 <= value < 2 ** 63:
        raise ValueError(f"{where} ({value}) does not fit a 64-bit integer")


def json_type(value: Any) -> str:
    return {bool: "a boolean", int: "a number", float: "a number", str: "a string", dict: "an object",
            list: "an array"}.get(type(value), "null" if value is None else type(value).__name__)


_INT64_MIN, _INT64_END = -2 ** 63, 2 ** 63


def _fits(v: Any, types: tuple[type, ...]) -> bool:
    """`v` of one of `types` exactly (a 64-bit integer where a number belongs)."""
    t = type(v)
    return t in types and (t is not int or _INT64_MIN <= v < _INT64_END)


def _well_typed(key: str, value: Any) -> bool:
    """The common case of `check_action_fields` in one pass over the fields present (replay calls it for
    each of hundreds of thousands of adds): True when every field has its protocol type. JSON decoding gives
    exact types, so `type(v) in types` also keeps booleans out of number fields."""
    if type(value) is not dict:
        return False
    fields = _FIELD_TYPES[key]
    for name, v in value.items():
        types = fields.get(name)
        if types is None or v is None:
            continue
        if not _fits(v, types):
            return False
        t = type(v)
        if name in _STRING_ITEMS:
            for item in (v.values() if t is dict else v):
                if type(item) is not str and not (item is None and name == "partitionValues"):
                    return False
        elif name == "deletionVector":
            for dv_name, dv_types in _DV_TYPES.items():
                x = v.get(dv_name)
                if x is not None and not _fits(x, dv_types):
                    return False
        elif name == "format":
            if not (type(v.get("provider")) in (str, type(None)) and type(v.get("options")) in (dict, type(None))):
                return False
    return all(value.get(name) is not None for name in _REQUIRED.get(key, ()))


def check_action_fields(key: str, value: Any) -> None:
    """ValueError naming the field when an action replay reads has a field of another JSON type than the
    protocol gives it (a string where a number belongs, an array for an object, ...)."""
    if key not in _FIELD_TYPES or _well_typed(key, value):
        return
    if not isinstance(value, dict):
        raise ValueError(f"{key} is {json_type(value)}, not an object")
    for name in _REQUIRED.get(key, ()):
        if value.get(name) is None:
            raise ValueError(f"{key} without {name}")
    for name, types in _FIELD_TYPES[key].items():
        _typed(f"{key}.{name}", value.get(name), types)
    for name in _STRING_ITEMS & set(_FIELD_TYPES[key]):
        items = value.get(name) or ()
        for k, v in (items.items() if isinstance(items, dict) else enumerate(items)):
            if v is None and name != "partitionValues":  # only a partition value may be null
                raise ValueError(f"{key}.{name}[{k!r}] is null, not a string")
            _typed(f"{key}.{name}[{k!r}]", v, _STR)
    fmt = value.get("format") if key == "metaData" else None
    if fmt is not None:
        _typed(f"{key}.format.provider", fmt.get("provider"), _STR)
        _typed(f"{key}.format.options", fmt.get("options"), (dict,))
    dv = value.get("deletionVector")
    for name, types in _DV_TYPES.items():
        if dv is not None:
            _typed(f"{key}.deletionVector.{name}", dv.get(name), types)
