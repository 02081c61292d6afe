"""A real Azure Blob server for tests: Azurite (npm `azurite@3.35.0`, the newest that runs on Node 20)
on 127.0.0.1 with the well-known development account, started and stopped by the test. It refuses a
second conditional create (`If-None-Match: *`) with 409 BlobAlreadyExists, as Azure does.

Found as `$DELTALOG_AZURITE` (the `azurite-blob` script), on PATH, or under `.ci-cache/azurite` where
`.ci/run` installs it (`npm install --prefix .ci-cache/azurite azurite@3.35.0`)."""
from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from typing import Iterator

from tests.standalone import free_port, stop_process_groups, wait_until_listening

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ACCOUNT = "devstoreaccount1"
# Azurite's published development key (not a secret: every Azurite has it)
ACCOUNT_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


def azurite_binary() -> str | None:
    candidates = [os.environ.get("DELTALOG_AZURITE"), shutil.which("azurite-blob"),
                  os.path.join(ROOT, ".ci-cache", "azurite", "node_modules", ".bin", "azurite-blob")]
    found = next((c for c in candidates if c and os.path.exists(c)), None)
    return found if found and shutil.which("node") else None


@dataclass
class AzureServer:
    endpoint: str
    container: str

    def storage_options(self) -> dict[str, str]:
        """The keys delta-rs and object_store take."""
        return {"AZURE_STORAGE_ACCOUNT_NAME": ACCOUNT, "AZURE_STORAGE_ACCOUNT_KEY": ACCOUNT_KEY,
                "AZURE_ENDPOINT": self.endpoint, "AZURE_ALLOW_HTTP": "true"}

    def uri(self, *parts: str) -> str:
        return "az://" + "/".join([self.container, *parts])


@contextlib.contextmanager
def azurite(container: str = "lake") -> Iterator[AzureServer]:
    binary = azurite_binary()
    if binary is None:
        raise RuntimeError("Azurite is not installed: npm install --prefix .ci-cache/azurite azurite@3.35.0")
    work = tempfile.mkdtemp(prefix="deltalog-azurite-")
    port = free_port()
    log = open(os.path.join(work, "azurite.log"), "wb")
    proc = subprocess.Popen([binary, "--blobHost", "127.0.0.1", "--blobPort", str(port), "--location", work,
                             "--disableTelemetry", "--skipApiVersionCheck", "--loose"],
                            stdout=log, stderr=subprocess.STDOUT, cwd=work, start_new_session=True)
    endpoint = f"http://127.0.0.1:{port}/{ACCOUNT}"
    try:
        wait_until_listening(port, proc, "Azurite", 60, poll=0.2)
        server = AzureServer(endpoint, container)
        from deltalog.filesystem import arrow_filesystem

        fs, _ = arrow_filesystem(server.uri(), server.storage_options())
        fs.create_dir(container)  # the container, as an account's admin would create it
        yield server
    finally:
        stop_process_groups([proc], timeout=15)
        log.close()
        shutil.rmtree(work, ignore_errors=True)

