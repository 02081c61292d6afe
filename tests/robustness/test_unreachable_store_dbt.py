"""A warehouse on an object store that cannot be used: a closed endpoint, refused credentials, a missing
bucket. `dbt debug` fails its connection test and `dbt run` fails every model with one message naming
the warehouse, the endpoint and the cause: no traceback, no secret, nothing written."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from tests.support.seaweed import ACCESS_KEY, seaweedfs_or_skip
from tests.support.standalone import free_port

pytestmark = pytest.mark.dbt


def _project(tmp_path, warehouse, options):
    (tmp_path / "models").mkdir(exist_ok=True)
    (tmp_path / "models" / "m.sql").write_text("select 1 as id")
    (tmp_path / "dbt_project.yml").write_text("name: p\nversion: '1.0'\nprofile: p\nconfig-version: 2\n")
    opts = "".join(f"        {k}: '{v}'\n" for k, v in options.items())
    (tmp_path / "profiles.yml").write_text(textwrap.dedent(f"""\
        p:
          target: dev
          outputs:
            dev:
              type: deltalog
              schema: s
              threads: 1
              master: local[1]
              spark_server: false
              warehouse: {warehouse}
              storage_options:
        """) + textwrap.indent(opts, "      "))


def _dbt(tmp_path, command):
    out = subprocess.run([sys.executable, "-c", "from dbt.cli.main import cli; cli()", command,
                          "--profiles-dir", str(tmp_path), "--project-dir", str(tmp_path)],
                         capture_output=True, text=True, timeout=600, cwd=tmp_path)
    return out.returncode, out.stdout + out.stderr


@pytest.fixture(scope="module")
def s3():
    with seaweedfs_or_skip() as server:
        yield server


@pytest.mark.parametrize("case", ["closed endpoint", "wrong secret", "missing bucket"])
def test_an_unusable_store_fails_debug_and_run_by_name(tmp_path, s3, case):
    options = s3.storage_options()
    secret = "sup3r-s3cret-value"
    warehouse = s3.uri("wh")
    if case == "closed endpoint":
        options.update(AWS_ENDPOINT_URL=f"http://127.0.0.1:{free_port()}", AWS_SECRET_ACCESS_KEY=secret)
        warehouse, cause = "s3://nobucket/wh", "the endpoint does not answer"
    elif case == "wrong secret":
        options.update(AWS_SECRET_ACCESS_KEY=secret)
        cause = "refused the credentials"
    else:
        warehouse, cause = "s3://missing-bucket/wh", "does not exist"
    _project(tmp_path, warehouse, options)
    code, text = _dbt(tmp_path, "debug")
    assert code != 0 and "All checks passed" not in text, text
    assert f"warehouse {warehouse}" in text and options["AWS_ENDPOINT_URL"] in text and cause in text, text
    code, text = _dbt(tmp_path, "run")
    assert code != 0 and "PASS=1" not in text, text
    assert f"warehouse {warehouse}" in text and cause in text, text
    assert "Traceback" not in text, text
    assert secret not in text and (case != "wrong secret" or ACCESS_KEY not in text.replace(ACCESS_KEY + "'", ""))
