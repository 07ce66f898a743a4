"""A registry's faults, made by construction: an HTTP proxy on loopback in front of the test's
loopback registry that passes manifests through and, for layer blobs, does what the test set:

- `stall`: sends the headers and the first part of the blob, then nothing until `release()`
  (a registry or network that hangs mid-pull);
- `cut_once`: sends half the blob and closes the connection, once; later requests pass
  (a connection that dies mid-layer);
- `corrupt`: sends the blob with its bytes changed, at the right length (a blob that does not
  match its digest);
- `pass`: everything through.

Only layers are touched (blobs above STALL_AFTER_BYTES; an image's config is smaller), and with
`set(mode, only=digests)` only those layers, so that one image's pull fails beside others that work.
The engine pulls `127.0.0.1:<proxy port>/<name>` over plain HTTP (it trusts 127.0.0.0/8 that way)."""

from __future__ import annotations

import http.client
import json
import re
import threading
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from tests.support.e2e import free_port

BLOB = re.compile(r"^/v2/.+/blobs/(sha256:[0-9a-f]{64})$")
STALL_AFTER_BYTES = 64 * 1024
STALL_BOUND_S = 600  # a stalled response gives up by itself after this, whatever the test does
HOP_HEADERS = {"connection", "keep-alive", "transfer-encoding", "proxy-connection", "upgrade"}


class RegistryProxy:
    def __init__(self, registry: str) -> None:
        self.registry = registry  # 127.0.0.1:PORT of the real registry
        self.mode = "pass"
        self.only: frozenset[str] = frozenset()  # the layer digests the mode applies to (none: every layer)
        self.blob_requests: list[str] = []  # the paths of the blob GETs answered whole (200)
        self.applied: list[tuple[str, str]] = []  # (mode, layer digest) of each fault made
        self.released = threading.Event()
        self.stalled = threading.Event()  # a stalled blob response is holding now
        self.lock = threading.Lock()
        self.address = f"127.0.0.1:{free_port()}"
        host, port = self.address.split(":")
        self.server = ThreadingHTTPServer((host, int(port)), self._handler())
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> "RegistryProxy":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.release()
        self.server.shutdown()
        self.server.server_close()

    def set(self, mode: str, only: tuple[str, ...] = ()) -> None:
        assert mode in ("pass", "stall", "cut_once", "corrupt"), mode
        with self.lock:
            self.mode = mode
            self.only = frozenset(only)
            self.released.clear()
            self.stalled.clear()

    def release(self) -> None:
        self.released.set()

    def layers(self, repository: str, reference: str) -> list[str]:
        """The layer digests of REPOSITORY:REFERENCE's manifest in the registry."""
        request = urllib.request.Request(f"http://{self.registry}/v2/{repository}/manifests/{reference}", headers={
            "Accept": "application/vnd.docker.distribution.manifest.v2+json, "
                      "application/vnd.oci.image.manifest.v1+json"})
        with urllib.request.urlopen(request, timeout=30) as answer:
            return [layer["digest"] for layer in json.loads(answer.read())["layers"]]

    def _take_mode(self, digest: str) -> str:
        with self.lock:
            if self.only and digest not in self.only:
                return "pass"
            mode = self.mode
            if mode == "cut_once":
                self.mode = "pass"
            if mode != "pass":
                self.applied.append((mode, digest))
            return mode

    def _handler(self):
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:
                pass

            def do_HEAD(self) -> None:
                self._forward(body=False)

            def do_GET(self) -> None:
                self._forward(body=True)

            def _forward(self, body: bool) -> None:
                try:
                    self._relay(body)
                except (BrokenPipeError, ConnectionResetError):  # the engine gave up on this response
                    self.close_connection = True

            def _relay(self, body: bool) -> None:
                upstream = http.client.HTTPConnection(proxy.registry, timeout=60)
                headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_HEADERS | {"host"}}
                upstream.request(self.command, self.path, headers=headers)
                answer = upstream.getresponse()
                data = answer.read() if body else b""
                blob = BLOB.match(self.path) if body and answer.status == 200 else None
                mode = "pass"
                if blob:
                    proxy.blob_requests.append(self.path)
                    if len(data) > STALL_AFTER_BYTES:
                        mode = proxy._take_mode(blob.group(1))
                self.send_response(answer.status)
                for key, value in answer.getheaders():
                    if key.lower() not in HOP_HEADERS | {"content-length"}:
                        self.send_header(key, value)
                length = len(data) if body else int(answer.getheader("Content-Length") or 0)
                self.send_header("Content-Length", str(length))
                self.end_headers()
                upstream.close()
                if not body:
                    return
                if mode == "stall":
                    self.wfile.write(data[:STALL_AFTER_BYTES])
                    self.wfile.flush()
                    proxy.stalled.set()
                    proxy.released.wait(STALL_BOUND_S)
                    self.close_connection = True
                    return
                if mode == "cut_once":
                    self.wfile.write(data[: len(data) // 2])
                    self.wfile.flush()
                    self.close_connection = True
                    return
                if mode == "corrupt":
                    data = bytes(byte ^ 0xFF for byte in data[:4096]) + data[4096:]
                self.wfile.write(data)

        return Handler
