"""What a stream of changes asks for, as AutoCDC (Spark Declarative Pipelines, Databricks' `AUTO CDC
INTO` / `apply_changes`) names it, checked before anything runs: unknown parameters, a parameter of the
wrong shape, a combination those systems refuse, and a key or sequence the source does not have are
errors that name the table and what is allowed."""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from ...errors import DeltaError

#: parameter -> what it takes, for errors and docs
PARAMETERS = {
    "keys": "a list of the columns that identify a row",
    "sequence_by": "a column (or SQL expression, e.g. struct(lsn, seq)) ordering the changes",
    "apply_as_deletes": "a SQL condition marking a change as a delete, e.g. \"op = 'd'\"",
    "apply_as_truncates": "a SQL condition marking a change as a truncate (SCD type 1 only)",
    "column_list": "the columns to keep (default: all)",
    "except_column_list": "the columns to leave out",
    "stored_as_scd_type": "1 (the default: one row per key) or 2 (one row per version)",
    "track_history_column_list": "SCD type 2: the columns whose changes open a new version",
    "track_history_except_column_list": "SCD type 2: the columns whose changes update the current version",
    "ignore_null_updates": "true: a NULL in an update keeps the value the row had",
    "tombstone_retention": "how long a delete is remembered against late, older changes (default '2 days')",
}

START_AT, END_AT = "__START_AT", "__END_AT"
RESERVED_PREFIX = "__deltalog_changes_"
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(second|minute|hour|day|week)s?\s*$", re.I)
_SECONDS = {"second": 1, "minute": 60, "hour": 3600, "day": 86400, "week": 604800}


class ApplyChangesError(DeltaError, ValueError):
    """A change-capture request that cannot run: names the table and what is allowed."""


@dataclass(frozen=True)
class ApplyChanges:
    keys: tuple[str, ...]
    sequence_by: str
    apply_as_deletes: str | None = None
    apply_as_truncates: str | None = None
    column_list: tuple[str, ...] | None = None
    except_column_list: tuple[str, ...] | None = None
    scd_type: int = 1
    track_history_column_list: tuple[str, ...] | None = None
    track_history_except_column_list: tuple[str, ...] | None = None
    ignore_null_updates: bool = False
    tombstone_retention_seconds: float = 2 * 86400

    @classmethod
    def of(cls, given: Mapping[str, Any], where: str) -> "ApplyChanges":
        """The request from its parameters (a model's `apply_changes` config); `where` names the table
        or model in errors."""
        if not isinstance(given, Mapping):
            raise ApplyChangesError(f"{where}: apply_changes must be a mapping of parameters "
                                    f"({', '.join(PARAMETERS)}), got {given!r}.")
        unknown = [k for k in given if k not in PARAMETERS]
        if unknown:
            raise ApplyChangesError(f"{where}: apply_changes has no parameter {', '.join(map(repr, unknown))}; "
                                    f"the parameters are: " + "; ".join(f"{k}: {v}" for k, v in PARAMETERS.items()))
        for needed in ("keys", "sequence_by"):
            if not given.get(needed):
                raise ApplyChangesError(f"{where}: apply_changes needs {needed} ({PARAMETERS[needed]}).")
        scd = str(given.get("stored_as_scd_type", 1)).strip()
        if scd not in ("1", "2"):
            raise ApplyChangesError(f"{where}: apply_changes stored_as_scd_type is {given['stored_as_scd_type']!r}; "
                                    f"it is 1 or 2.")
        spec = cls(
            keys=_names(given["keys"], "keys", where),
            sequence_by=_text(given["sequence_by"], "sequence_by", where),
            apply_as_deletes=_text(given.get("apply_as_deletes"), "apply_as_deletes", where),
            apply_as_truncates=_text(given.get("apply_as_truncates"), "apply_as_truncates", where),
            column_list=_names(given.get("column_list"), "column_list", where),
            except_column_list=_names(given.get("except_column_list"), "except_column_list", where),
            scd_type=int(scd),
            track_history_column_list=_names(given.get("track_history_column_list"), "track_history_column_list",
                                             where),
            track_history_except_column_list=_names(given.get("track_history_except_column_list"),
                                                    "track_history_except_column_list", where),
            ignore_null_updates=_flag(given.get("ignore_null_updates", False), "ignore_null_updates", where),
            tombstone_retention_seconds=_duration(given.get("tombstone_retention", "2 days"), where))
        for a, b in (("column_list", "except_column_list"),
                     ("track_history_column_list", "track_history_except_column_list")):
            if getattr(spec, a) and getattr(spec, b):
                raise ApplyChangesError(f"{where}: apply_changes takes {a} or {b}, not both.")
        if spec.scd_type == 1 and (spec.track_history_column_list or spec.track_history_except_column_list):
            raise ApplyChangesError(f"{where}: track_history_column_list / track_history_except_column_list choose "
                                    f"the columns SCD type 2 keeps history of; this table is stored_as_scd_type 1.")
        if spec.scd_type == 2 and spec.apply_as_truncates:
            raise ApplyChangesError(f"{where}: apply_as_truncates applies to stored_as_scd_type 1 only; a truncate "
                                    f"would erase the history SCD type 2 keeps.")
        return spec

    def output_columns(self, source_columns: Iterable[str], where: str) -> list[str]:
        """The table's columns (before __START_AT / __END_AT) from the source's; refuses a key missing
        from the source or left out by the column lists, and a column the lists name that it lacks."""
        source = list(source_columns)
        by_lower = {c.lower(): c for c in source}
        for c in source:
            if c.lower().startswith(RESERVED_PREFIX) or (self.scd_type == 2 and c.upper() in (START_AT, END_AT)):
                raise ApplyChangesError(f"{where}: the source has a column named {c}, a name apply_changes keeps for "
                                        f"itself; rename it.")

        def resolved(names: Iterable[str], what: str) -> list[str]:
            missing = [n for n in names if n.lower() not in by_lower]
            if missing:
                raise ApplyChangesError(f"{where}: apply_changes {what} names {', '.join(missing)}, which the source "
                                        f"does not have; its columns are {', '.join(source)}.")
            return [by_lower[n.lower()] for n in names]

        keys = resolved(self.keys, "keys")
        if self.column_list:
            out = resolved(self.column_list, "column_list")
        else:
            dropped = {c.lower() for c in resolved(self.except_column_list or (), "except_column_list")}
            out = [c for c in source if c.lower() not in dropped]
        left_out = [k for k in keys if k not in out]
        if left_out:
            raise ApplyChangesError(f"{where}: the key column(s) {', '.join(left_out)} must stay in the table; "
                                    f"column_list / except_column_list leave them out.")
        return out

    def tracked_columns(self, output: list[str], where: str) -> list[str]:
        """SCD type 2: the columns whose change opens a new version (keys excluded)."""
        keys = {k.lower() for k in self.keys}
        by_lower = {c.lower(): c for c in output}
        for what in ("track_history_column_list", "track_history_except_column_list"):
            missing = [n for n in getattr(self, what) or () if n.lower() not in by_lower]
            if missing:
                raise ApplyChangesError(f"{where}: apply_changes {what} names {', '.join(missing)}, which is not a "
                                        f"column of the table ({', '.join(output)}).")
        if self.track_history_column_list:
            wanted = {n.lower() for n in self.track_history_column_list}
            return [c for c in output if c.lower() in wanted and c.lower() not in keys]
        dropped = {n.lower() for n in self.track_history_except_column_list or ()}
        return [c for c in output if c.lower() not in dropped and c.lower() not in keys]


def _names(value: Any, what: str, where: str) -> tuple[str, ...] | None:
    if value is None or value == [] or value == ():
        return None
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) and v.strip() for v in value):
        raise ApplyChangesError(f"{where}: apply_changes {what} is {value!r}; it takes {PARAMETERS[what]}.")
    return tuple(v.strip().strip("`") for v in value)


def _text(value: Any, what: str, where: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise ApplyChangesError(f"{where}: apply_changes {what} is {value!r}; it takes {PARAMETERS[what]}.")
    return value.strip()


def _flag(value: Any, what: str, where: str) -> bool:
    if isinstance(value, bool):
        return value
    if str(value).lower() in ("true", "false"):
        return str(value).lower() == "true"
    raise ApplyChangesError(f"{where}: apply_changes {what} is {value!r}; it takes true or false.")


def _duration(value: Any, where: str) -> float:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0:
        return float(value)
    match = _DURATION.match(str(value))
    if not match:
        raise ApplyChangesError(f"{where}: apply_changes tombstone_retention is {value!r}; give seconds or a duration "
                                f"such as '2 days', '12 hours', '30 minutes'.")
    return float(match.group(1)) * _SECONDS[match.group(2).lower()]
