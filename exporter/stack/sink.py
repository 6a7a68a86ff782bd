"""The webhook sink the native stack's Alertmanager notifies: ``python -m exporter.stack sink``."""

from __future__ import annotations

import json
import signal
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any


class Sink:
    """Records Alertmanager webhook notifications: in memory, as JSON lines, on stdout."""

    def __init__(self, log: Path | None = None) -> None:
        self.notifications: list[dict[str, Any]] = []
        self._log = log
        self._lock = threading.Lock()

    def record(self, path: str, payload: dict[str, Any]) -> None:
        entry = {"path": path, "received": time.time(), "payload": payload}
        with self._lock:
            self.notifications.append(entry)
            if self._log is not None:
                with open(self._log, "a") as f:
                    f.write(json.dumps(entry, sort_keys=True) + "\n")
        for alert in payload.get("alerts", []):
            labels = alert.get("labels", {})
            others = " ".join(f"{k}={v}" for k, v in sorted(labels.items()) if k != "alertname")
            print(f"{path} {alert.get('status')} {labels.get('alertname')} {others}", flush=True)

    def snapshot(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self.notifications)


def make_sink_server(host: str, port: int, sink: Sink) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def _send(self, status: int, body: Any) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            try:
                payload = json.loads(self.rfile.read(length))
            except ValueError:
                self._send(400, {"error": "body is not JSON"})
                return
            if not isinstance(payload, dict):
                self._send(400, {"error": "body is not a JSON object"})
                return
            sink.record(self.path, payload)
            self._send(200, {"status": "ok"})

        def do_GET(self) -> None:
            if self.path == "/notifications":
                self._send(200, sink.snapshot())
            elif self.path == "/-/healthy":
                self._send(200, {"status": "ok"})
            else:
                self._send(404, {"error": "GET /notifications or /-/healthy"})

        def log_message(self, format: str, *args: Any) -> None:
            pass  # one line per notification comes from Sink.record instead

    return ThreadingHTTPServer((host, port), Handler)


def serve_sink(listen: str, log: Path | None) -> None:
    host, _, port = listen.rpartition(":")
    server = make_sink_server(host or "127.0.0.1", int(port), Sink(log))
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown).start())
    print(f"webhook sink listening on http://{listen}/ (GET /notifications)", flush=True)
    with server:
        server.serve_forever()
