"""A fake upstream for the proxy tests that records every request exactly as it arrived (request
line, headers, body) and answers 200 with a small JSON body: for what llama-server cannot show
(the bytes of a body, the path it was asked for, the headers it got). A request whose query
holds ``ticks=N`` is answered with a stream instead: N lines, one every 10 ms (a reply that
streams for as long as a test needs, at a pace it can watch)."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from voice_stack_dev.procs import free_port


@dataclass(frozen=True, slots=True)
class Received:
    method: str
    target: str  # the request target as sent: path and query string
    headers: dict[str, str]  # lower-case names
    body: bytes

    def id_slots(self) -> list[Any]:
        """Every top-level id_slot of the JSON body, as llama-server's parser would name them
        (escapes decoded, duplicates kept in order)."""
        found: list[Any] = []

        def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
            return {"__pairs__": items}

        top = json.loads(self.body, object_pairs_hook=pairs)
        for key, value in top["__pairs__"]:
            if key == "id_slot":
                found.append(value)
        return found


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def _record(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        headers = {name.lower(): value for name, value in self.headers.items()}
        with self.server.lock:
            self.server.received.append(Received(self.command, self.path, headers, body))
        ticks = parse_qs(urlsplit(self.path).query).get("ticks")
        if ticks:
            self._stream(int(ticks[0]))
            return
        reply = b'{"recorded":true}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    def _stream(self, lines: int) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        try:
            for n in range(lines):
                line = f"data: {n}\n".encode()
                self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
                self.wfile.flush()
                time.sleep(0.01)  # the pace of the stream, not a wait for anything
            self.wfile.write(b"0\r\n\r\n")
        except OSError:
            pass  # the client stopped reading

    do_GET = do_POST = do_DELETE = do_PUT = do_HEAD = _record

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the test reads .received instead."""


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, port: int) -> None:
        super().__init__(("127.0.0.1", port), _Handler)
        self.lock = threading.Lock()
        self.received: list[Received] = []


class RecordingUpstream:
    """Started on a free loopback port; ``take()`` returns (and forgets) what arrived."""

    def __init__(self) -> None:
        self.port = free_port()
        self._server = _Server(self.port)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> RecordingUpstream:
        self._thread.start()
        return self

    def take(self) -> list[Received]:
        with self._server.lock:
            received, self._server.received = self._server.received, []
        return received

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
