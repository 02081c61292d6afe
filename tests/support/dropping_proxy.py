"""An HTTP proxy in front of a real S3 server that lets chosen requests reach the server and then drops
their responses: the client sees its connection closed, as after a timeout or a reset, while the
server did what was asked. That is the case where a writer cannot tell whether its put landed."""
from __future__ import annotations

import http.client
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlparse


class DroppingProxy:
    """`drop(method, path_regex, times)` arms a rule; matching requests are forwarded and their response
    is never sent back. `dropped` lists what was dropped (method, path, upstream status)."""

    def __init__(self, upstream: str):
        parsed = urlparse(upstream)
        self.upstream = (parsed.hostname, parsed.port)
        self.rules: list[list] = []
        self.dropped: list[tuple[str, str, int]] = []
        self.down = False  # set to make every request fail unanswered, as a stopped server would
        self.lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # quiet
                pass

            def _forward(self):
                if proxy.down:  # the store is unreachable: the connection closes unanswered
                    self.close_connection = True
                    return
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
                    body = self._raw_chunks()  # forwarded framed as it came
                conn = http.client.HTTPConnection(*proxy.upstream, timeout=60)
                conn.putrequest(self.command, self.path, skip_host=True, skip_accept_encoding=True)
                for key, value in self.headers.items():
                    conn.putheader(key, value)
                conn.endheaders(body)
                response = conn.getresponse()
                data = response.read()
                conn.close()
                if proxy._should_drop(self.command, self.path, response.status):
                    self.close_connection = True
                    return  # the server acted; the client hears nothing
                self.send_response_only(response.status, response.reason)
                for key, value in response.getheaders():
                    if key.lower() not in ("transfer-encoding", "connection", "content-length"):
                        self.send_header(key, value)
                # a HEAD answer has no body but says how long the object is
                length = response.getheader("Content-Length") if self.command == "HEAD" else str(len(data))
                self.send_header("Content-Length", length or "0")
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)

            def _raw_chunks(self) -> bytes:
                raw = bytearray()
                while True:
                    line = self.rfile.readline()
                    raw += line
                    size = int(line.split(b";", 1)[0].strip() or b"0", 16)
                    if size == 0:
                        while True:  # trailers, up to the empty line
                            trailer = self.rfile.readline()
                            raw += trailer
                            if trailer in (b"\r\n", b"\n", b""):
                                return bytes(raw)
                    raw += self.rfile.read(size + 2)

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _forward

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def drop(self, method: str, path_regex: str, times: int = 1) -> None:
        with self.lock:
            self.rules.append([method, re.compile(path_regex), times])

    def _should_drop(self, method: str, path: str, status: int) -> bool:
        with self.lock:
            for rule in self.rules:
                if rule[2] > 0 and rule[0] == method and rule[1].search(path.split("?", 1)[0]):
                    rule[2] -= 1
                    self.dropped.append((method, path, status))
                    return True
        return False

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self) -> "DroppingProxy":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
