"""A stand-in for the three Run:ai REST endpoints ``DGXCloudExecutor.launch`` calls (NeMo-Run 0.11.1): the token,
the project list and the workload creation. It answers as the API does for a workload it accepts and records
each request body, so that NeMo-Run's own ``launch()`` runs whole (it writes the job's ``launch_script.sh`` and
posts the workload) and a test reads exactly what NeMo-Run would send the platform.

There is no DGX Cloud here and no Run:ai client or schema to validate against: what is checked is NeMo-Run's
request, not the platform's answer to it. The server listens on a port the kernel picks (port 0).
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

PROJECT = {"name": "proj", "id": "project-1", "clusterId": "cluster-1"}


@contextmanager
def runai_standin() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """Yield (base_url, posted workloads); each workload is {"path": ..., "body": <the JSON NeMo-Run sent>}."""
    posted: list[dict[str, Any]] = []

    class Handler(BaseHTTPRequestHandler):
        def _answer(self, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            if self.path.endswith("/org-unit/projects"):
                self._answer({"projects": [PROJECT]})
            else:
                self.send_error(404)

        def do_POST(self) -> None:  # noqa: N802
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length) or b"{}")
            if self.path.endswith("/token"):
                self._answer({"accessToken": "token"})
            elif "/workloads/" in self.path:
                posted.append({"path": self.path, "body": body})
                self._answer({"workloadId": f"workload-{len(posted)}", "actualPhase": "Pending"})
            else:
                self.send_error(404)

        def log_message(self, *args: Any) -> None:  # quiet
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    # requests would send even 127.0.0.1 to a proxy named in the environment: keep the stand-in direct.
    saved = {name: os.environ.get(name) for name in ("NO_PROXY", "no_proxy")}
    for name, value in saved.items():
        os.environ[name] = ",".join(v for v in (value, "127.0.0.1") if v)
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/api/v1", posted
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        server.shutdown()
        server.server_close()
