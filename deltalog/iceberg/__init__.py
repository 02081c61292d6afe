"""Iceberg metadata beside a Delta table's log (Delta's UniForm), so Iceberg readers read its files too."""

from .conversion import (DELTA_VERSION, ENABLED_FORMATS, catch_up, convert, converted_version, iceberg_enabled,
                         latest_metadata, metadata_location)

__all__ = ["DELTA_VERSION", "ENABLED_FORMATS", "catch_up", "convert", "converted_version", "iceberg_enabled",
           "latest_metadata", "metadata_location"]
