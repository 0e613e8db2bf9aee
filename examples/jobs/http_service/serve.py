"""A service job: answers HTTP on 127.0.0.1:8000 inside its container until it is stopped.

Every request is counted and logged to outputs/visits.log (the job's results when it ends).
``GET /`` says hello; ``POST /echo`` sends the body back (the tunnel tests and benchmark use
it); SIGTERM (``job stop``) ends it cleanly.
"""

import http.server
import json
import os
import pathlib
import signal
import sys
import threading
import time

PORT = int(os.environ.get("PORT", "8000"))  # the port declared in job.toml
outputs = pathlib.Path("outputs")
outputs.mkdir(exist_ok=True)
log = (outputs / "visits.log").open("a", buffering=1)
visits = 0
lock = threading.Lock()


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # One write per answer, sent at once: headers and body in separate small writes wait
    # for a delayed ACK (40 ms a request on Linux) under Nagle's algorithm.
    disable_nagle_algorithm = True
    wbufsize = 1 << 16

    def _send(self, status: int, body: bytes, kind: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        global visits
        with lock:
            visits += 1
            count = visits
        log.write(f"{time.time():.3f} GET {self.path}\n")
        self._send(200, json.dumps({"hello": "from a job", "visits": count}).encode())

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length)
        log.write(f"{time.time():.3f} POST {self.path} {length}\n")
        self._send(200, body, "application/octet-stream")

    def log_message(self, format: str, *args: object) -> None:
        print(format % args, flush=True)


server = http.server.ThreadingHTTPServer(("127.0.0.1", PORT), Handler)
signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown).start())
print(f"serving on 127.0.0.1:{PORT}", flush=True)
server.serve_forever()
print(f"stopped after {visits} visits", flush=True)
sys.exit(0)
