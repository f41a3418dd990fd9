"""The web UI's HTTP server: the static pages shipped in the package, and a read-only JSON API over a `UiData`.

Routes (GET and HEAD only; any other method gets 405, so nothing served can change the job):

- `/` and `/static/...`: the single-page UI and its assets (`ethereal_kafka/ui/static`, vendored libraries
  included: no request leaves the machine).
- `/api/overview`: the job page (`UiData.overview`).
- `/api/plan`: the stream graph's description (`plan.describe`).
- `/api/epochs?after=SEQ`: the epochs received after `SEQ` (`{"entries": [...], "next": SEQ}`).
- `/api/live`: the live metrics (`JobMetrics.figures()`), or `null` for a stopped app.
- `/api/latency`: end-to-end latency percentiles per query over the whole run.
- `/api/decisions`: auto-scaling decisions (`{"available": bool, "decisions": [...]}`).

The server runs on daemon threads; requests only read what the job's threads record, under their locks.
"""

from __future__ import annotations

import json
import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import Any, Protocol
from urllib.parse import parse_qs, urlsplit

from ethereal_kafka.errors import ConfigError

log = logging.getLogger(__name__)

STATIC_PACKAGE = "ethereal_kafka.ui"
#: Content types of the static files (fixed here: the host's MIME database varies).
_TYPES = {
    "html": "text/html; charset=utf-8",
    "js": "text/javascript; charset=utf-8",
    "css": "text/css; charset=utf-8",
    "json": "application/json",
    "map": "application/json",
    "png": "image/png",
    "svg": "image/svg+xml",
    "md": "text/plain; charset=utf-8",
}


class UiData(Protocol):
    """What the pages show; implemented by `ui.live.LiveUi` (a running job) and `ui.history.HistoryUi`."""

    def overview(self) -> dict[str, Any]:
        """The job page: `mode` (`live` or `history`), the run description's fields, `now_ms`."""

    def plan(self) -> dict[str, Any]:
        """The stream graph (`plan.describe` shape)."""

    def epochs(self, after: int) -> dict[str, Any]:
        """`{"entries": [views.epoch_json ...], "next": seq}`: the epochs with `seq > after`, oldest first."""

    def live(self) -> dict[str, Any] | None:
        """Live figures (`JobMetrics.figures()`), or None when the app is not running in this process."""

    def latency(self) -> dict[str, Any]:
        """`{"source": str, "since_ms": int | None, "queries": {query: views.percentiles(...)}}`."""

    def decisions(self) -> dict[str, Any]:
        """`{"available": bool, "decisions": [{time_ms, action, executors_before, executors_after, reason}]}`."""


class UiServer:
    """Serves the UI for one `UiData` on `host:port` from a daemon thread until `close()`.

    Raises:
        ConfigError: (constructor) the address cannot be bound.
    """

    def __init__(self, data: UiData, host: str = "127.0.0.1", port: int = 0, key: str = "ui") -> None:
        handler = type("Handler", (_Handler,), {"data": data})
        try:
            self._server = ThreadingHTTPServer((host, port), handler)
        except OSError as exc:
            raise ConfigError(
                f"{key}.port={port}: cannot listen on {host}:{port} ({exc.strerror or exc})"
            ) from exc
        self._server.daemon_threads = True
        self._server.block_on_close = False
        self.host = host
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            name="ethereal-kafka-ui",
            kwargs={"poll_interval": 0.5},
            daemon=True,
        )
        self._thread.start()

    @property
    def port(self) -> int:
        """The port the server listens on."""
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        """`http://host:port/`."""
        host = self.host if ":" not in self.host else f"[{self.host}]"
        return f"http://{host}:{self.port}/"

    def close(self) -> None:
        """Stop serving and release the port (idempotent)."""
        if self._thread.is_alive():
            self._server.shutdown()
            self._thread.join(timeout=5)
        self._server.server_close()


class _Handler(BaseHTTPRequestHandler):
    data: UiData
    server_version = "ethereal-kafka-ui"
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        self._respond(head=False)

    def do_HEAD(self) -> None:
        self._respond(head=True)

    def _refuse(self) -> None:
        self._send(
            405, b'{"error": "read-only"}', "application/json", head=False, extra={"Allow": "GET, HEAD"}
        )

    do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = _refuse

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("ui: " + format, *args)

    def _respond(self, head: bool) -> None:
        url = urlsplit(self.path)
        path = url.path
        try:
            if path.startswith("/api/"):
                body = self._api(path[len("/api/") :], parse_qs(url.query))
                if body is None:
                    self._send(404, b'{"error": "no such resource"}', "application/json", head)
                    return
                self._send(200, body, "application/json", head, extra={"Cache-Control": "no-store"})
                return
            name = "index.html" if path in ("/", "/index.html") else path.removeprefix("/static/")
            if path not in ("/", "/index.html") and not path.startswith("/static/"):
                self._send(404, b"not found", "text/plain", head)
                return
            content = _static(name)
            if content is None:
                self._send(404, b"not found", "text/plain", head)
                return
            kind = _TYPES.get(name.rsplit(".", 1)[-1]) or "application/octet-stream"
            self._send(200, content, kind, head, extra={"Cache-Control": "max-age=300"})
        except Exception:
            log.exception("ui: %s failed", path)
            self._send(500, b'{"error": "internal error (see the log)"}', "application/json", head)

    def _api(self, name: str, query: dict[str, list[str]]) -> bytes | None:
        data = self.data
        result: Any
        if name == "overview":
            result = data.overview()
        elif name == "plan":
            result = data.plan()
        elif name == "epochs":
            try:
                after = int(query.get("after", ["-1"])[0])
            except ValueError:
                after = -1
            result = data.epochs(after)
        elif name == "live":
            result = data.live()
        elif name == "latency":
            result = data.latency()
        elif name == "decisions":
            result = data.decisions()
        else:
            return None
        return json.dumps(result, separators=(",", ":"), default=str, allow_nan=False).encode()

    def _send(
        self, status: int, body: bytes, kind: str, head: bool, extra: dict[str, str] | None = None
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("X-Content-Type-Options", "nosniff")
        for key, value in (extra or {}).items():
            self.send_header(key, value)
        self.end_headers()
        if not head:
            self.wfile.write(body)


def _static(name: str) -> bytes | None:
    """A file under the package's `static/` folder, or None (no path may leave it)."""
    parts = [p for p in name.split("/") if p]
    if not parts or any(p in (".", "..") or p.startswith(".") for p in parts):
        return None
    node = resources.files(STATIC_PACKAGE).joinpath("static", *parts)
    try:
        return node.read_bytes() if node.is_file() else None
    except OSError:
        return None
