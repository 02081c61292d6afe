"""JSON as the log holds it (commits, checkpoint manifests, `_last_checkpoint`, `.crc`, stats, schemas).

The stdlib parser raises RecursionError, not ValueError, on values nested deeper than the interpreter's
recursion limit: a corrupt or hostile file must read as bad JSON (ValueError), like every other defect."""
from __future__ import annotations

import json
from typing import Any


def loads(text: str | bytes) -> Any:
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None


def raw_decode(decoder: json.JSONDecoder, text: str, at: int) -> tuple[Any, int]:
    try:
        return decoder.raw_decode(text, at)
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None
