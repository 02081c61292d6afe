"""What counts as a credential, once for every place that shows settings or errors (storage options,
Spark settings, the profile in `dbt debug`): a setting whose name contains one of SECRET_WORDS
(spark.authenticate.secret, fs.s3a.secret.key, AWS_SECRET_ACCESS_KEY, azure_storage_sas_token, ...).
Matching by substring errs on the side of hiding a harmless value."""
from __future__ import annotations

from typing import Any, Iterable

SECRET_WORDS = ("secret", "password", "passwd", "token", "key", "credential", "sas", "signature")
REDACTED = "****"
_SHORTEST = 4  # shorter values are too likely to occur in a message by chance to be replaced


def is_secret(name: Any) -> bool:
    lowered = str(name).lower()
    return any(word in lowered for word in SECRET_WORDS)


def secret_values(settings: Iterable[tuple[Any, Any]]) -> list[str]:
    """The values of the secret settings among (name, value) pairs, long enough to look for."""
    return [str(v) for k, v in settings if is_secret(k) and v not in (None, "") and len(str(v)) >= _SHORTEST]


def redacted(settings: dict[Any, Any]) -> dict[Any, Any]:
    """`settings` with every secret value shown as REDACTED."""
    return {k: REDACTED if is_secret(k) and v not in (None, "") else v for k, v in settings.items()}


def redact(text: str, values: Iterable[str]) -> str:
    """`text` with each of `values` replaced by REDACTED (longest first: one may contain another)."""
    for value in sorted(set(values), key=len, reverse=True):
        text = text.replace(value, REDACTED)
    return text
