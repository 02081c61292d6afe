"""One rule for what is a credential: storage options, Spark settings and error texts hide the same
names' values (a name the one list missed used to show in `dbt debug` or an error)."""
from __future__ import annotations

from deltalog import secrets
from deltalog.storage.options import StorageOptions
from dbt.adapters.deltalog.connections import redact_conf, redact_text

NAMES = ["AWS_SECRET_ACCESS_KEY", "azure_storage_sas_token", "fs.s3a.secret.key", "spark.authenticate.secret",
         "db_passwd", "GOOGLE_SERVICE_ACCOUNT_KEY", "spark.hadoop.fs.azure.account.key.acct.dfs.core.windows.net",
         "javax.jdo.option.ConnectionPassword", "client_credential", "url_signature"]
PLAIN = ["AWS_REGION", "endpoint", "spark.sql.shuffle.partitions", "allow_http"]


def test_every_place_hides_the_same_names():
    values = {name: f"value-{i:02d}-x" for i, name in enumerate(NAMES + PLAIN)}
    options = StorageOptions(tuple(values.items()))
    shown_options, shown_conf = options.redacted(), redact_conf(values)
    for name in NAMES:
        assert secrets.is_secret(name), name
        assert shown_options[name] == shown_conf[name] == secrets.REDACTED, name
    for name in PLAIN:
        assert shown_options[name] == shown_conf[name] == values[name], name
    message = "failed: " + " ".join(values.values())
    for text in (options.redact(message), redact_text(message, values)):
        assert not any(values[n] in text for n in NAMES) and all(values[n] in text for n in PLAIN)


def test_a_longer_secret_is_hidden_whole():
    assert secrets.redact("token abcd-efgh", ["abcd", "abcd-efgh"]) == "token ****"
