"""A real Azure Blob server for tests: Azurite (npm `azurite@3.35.0`, the newest that runs on Node 20)
on 127.0.0.1 with the well-known development account, started and stopped by the test. It refuses a
second conditional create (`If-None-Match: *`) with 409 BlobAlreadyExists, as Azure does.

Found as `$DELTALOG_AZURITE` (the `azurite-blob` script), on PATH, or under `.ci-cache/azurite`, where
the first test that needs it installs it with npm when npm is there (`npm install --prefix
.ci-cache/azurite azurite@3.35.0`, once, under a file lock)."""
from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from typing import Iterator

from tests.support.standalone import free_port, stop_process_groups, wait_until_listening

# the repository (this file is in tests/support/)
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ACCOUNT = "devstoreaccount1"
# Azurite's published development key (not a secret: every Azurite has it)
ACCOUNT_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


CACHE = os.path.join(ROOT, ".ci-cache", "azurite")
PACKAGE = "azurite@3.35.0"


def azurite_binary() -> str | None:
    """The `azurite-blob` script, installed into `.ci-cache/azurite` first if need be (None: no Node)."""
    if not shutil.which("node"):
        return None
    candidates = [os.environ.get("DELTALOG_AZURITE"), shutil.which("azurite-blob"),
                  os.path.join(CACHE, "node_modules", ".bin", "azurite-blob")]
    found = next((c for c in candidates if c and os.path.exists(c)), None)
    if found is None and shutil.which("npm"):
        os.makedirs(CACHE, exist_ok=True)
        with open(os.path.join(CACHE, ".lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # the two test workers install it once
            if not os.path.exists(candidates[-1]):
                subprocess.run(["npm", "install", "--silent", "--no-audit", "--no-fund", "--prefix", CACHE, PACKAGE],
                               capture_output=True, timeout=600)
        found = candidates[-1] if os.path.exists(candidates[-1]) else None
    return found


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
        from deltalog.storage.files import arrow_filesystem

        fs, _ = arrow_filesystem(server.uri(), server.storage_options())
        fs.create_dir(container)  # the container, as an account's admin would create it
        yield server
    finally:
        stop_process_groups([proc], timeout=15)
        log.close()
        shutil.rmtree(work, ignore_errors=True)

