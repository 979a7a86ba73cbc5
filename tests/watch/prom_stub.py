"""A local HTTP/1.1 server replaying a real Prometheus's answers.

A local HTTP/1.1 server that replays what a real Prometheus answered
(``tests/watch/prom_answers.json``, recorded by ``scripts/prom_answers.py``; a live test checks the
installed Prometheus still answers so).

``stub.answer = "matrix"`` replays that recorded answer for every request; ``stub.answer = (status,
content_type, body[, headers])`` sends that instead (a proxy's page, a server that is not
Prometheus). Each request is kept in ``stub.requests`` (method, path, parameters, lower-cased
headers) and each TCP connection counted in ``stub.connections``.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

with open(
    os.path.join(os.path.dirname(os.path.abspath(__file__)), "prom_answers.json"), encoding="utf-8"
) as _fh:
    RECORDED = json.load(_fh)
ANSWERS = RECORDED["answers"]


def body_of(name: str) -> bytes:
    """The recorded body of answer ``name``, byte for byte."""
    return ANSWERS[name]["body"].encode()


def data_of(name: str) -> dict:
    """The decoded ``data`` of a recorded successful answer."""
    return json.loads(ANSWERS[name]["body"])["data"]


class PromStub:
    """See the module docstring.

    ``delay_s`` holds each answer back; ``drop`` closes the connection unanswered; ``headers`` adds
    (or, with value None, removes) answer headers.
    """

    def __init__(self, tls_context=None):
        self.answer = "vector"
        self.delay_s = 0.0
        self.released = threading.Event()  # set by close(): a held-back answer goes out at once
        self.drop = False
        self.headers = {}
        self.requests = []
        self.connections = 0
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as Prometheus (Go net/http)

            def setup(self):
                stub.connections += 1
                super().setup()

            def log_message(self, *a):
                pass

            def do_GET(self):
                url = urllib.parse.urlsplit(self.path)
                stub.requests.append(
                    {
                        "method": self.command,
                        "path": url.path,
                        "params": urllib.parse.parse_qs(url.query, keep_blank_values=True),
                        "headers": {k.lower(): v for k, v in self.headers.items()},
                    }
                )
                if stub.delay_s:
                    stub.released.wait(stub.delay_s)
                if stub.drop:
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                if isinstance(stub.answer, str):
                    rec = ANSWERS[stub.answer]
                    status, ctype, body = rec["status"], rec["content_type"], rec["body"].encode()
                else:
                    status, ctype, body, *more = stub.answer
                    body = body.encode() if isinstance(body, str) else body
                self.send_response(status)
                head = {
                    "Content-Type": ctype,
                    "Content-Length": str(len(body)),
                    **stub.headers,
                    **(more[0] if not isinstance(stub.answer, str) and more else {}),
                }
                for k, v in head.items():
                    if v is not None:
                        self.send_header(k, v)
                self.end_headers()
                try:
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):  # the client gave up first
                    pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        if tls_context is not None:
            self.server.socket = tls_context.wrap_socket(self.server.socket, server_side=True)
        scheme = "https" if tls_context is not None else "http"
        self.url = f"{scheme}://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        self.thread.start()

    def close(self):
        self.released.set()
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)
