"""A local fake of OpenPAI's REST API (:class:`FakePai`) for the OpenPAI service's tests: it checks every request
against the documented protocol (method, path, bearer token ``TOKEN``, content type, job protocol v2) and, on
submission, runs the job's command as a local process (container mount point = local mount point), so a real
experiment runs through the OpenPAI launcher. Listens on 127.0.0.1 only; not a live OpenPAI cluster."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import yaml

__all__ = ["TOKEN", "FakePai"]

TOKEN = "s3cret-token"


class FakePai:
    """OpenPAI's REST server for user ``user`` on a free 127.0.0.1 port (:attr:`url`): ``jobs`` (the submitted
    protocols by name), ``procs`` (each job's command, a process group of its own, as a stopped container ends all
    of it), ``problems`` (requests outside the protocol), ``requests`` (method and path of each). :meth:`close`
    stops the server and every job still running."""

    def __init__(self, user: str = "alice") -> None:
        self.user = user
        self.jobs: dict[str, dict[str, Any]] = {}
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.stopped: set[str] = set()
        self.problems: list[str] = []
        self.requests: list[tuple[str, str]] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None: ...

            def _reply(self, code: int, body: Any = None) -> None:
                raw = json.dumps(body).encode() if body is not None else b""
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def _auth(self) -> bool:
                if self.headers.get("Authorization") != f"Bearer {TOKEN}":
                    self._reply(401, {"code": "UnauthorizedUserError"})
                    return False
                return True

            def do_GET(self) -> None:
                fake.requests.append(("GET", self.path))
                if not self._auth():
                    return
                if self.path == f"/rest-server/api/v2/jobs?username={fake.user}":
                    self._reply(200, [])
                    return
                prefix = f"/rest-server/api/v2/jobs/{fake.user}~"
                if not self.path.startswith(prefix):
                    fake.problems.append(f"GET {self.path}")
                    self._reply(404, {})
                    return
                name = self.path[len(prefix):]
                proc = fake.procs.get(name)
                if proc is None:
                    self._reply(404, {"code": "NoJobError"})
                    return
                code = proc.poll()
                state = ("STOPPED" if name in fake.stopped else "RUNNING" if code is None
                         else "SUCCEEDED" if code == 0 else "FAILED")
                self._reply(200, {"name": name, "jobStatus": {"state": state}})

            def do_POST(self) -> None:
                fake.requests.append(("POST", self.path))
                if not self._auth():
                    return
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                if self.path != "/rest-server/api/v2/jobs" or self.headers.get("Content-Type") != "text/yaml":
                    fake.problems.append(f"POST {self.path} {self.headers.get('Content-Type')}")
                    self._reply(400, {})
                    return
                job = yaml.safe_load(body)
                fake.jobs[job["name"]] = job
                role = next(iter(job["taskRoles"].values()))
                command = " && ".join(role["commands"])
                fake.procs[job["name"]] = subprocess.Popen(["bash", "-c", command], start_new_session=True)
                self._reply(202)

            def do_PUT(self) -> None:
                fake.requests.append(("PUT", self.path))
                if not self._auth():
                    return
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
                prefix, suffix = f"/rest-server/api/v2/jobs/{fake.user}~", "/executionType"
                name = self.path[len(prefix):-len(suffix)]
                if not (self.path.startswith(prefix) and self.path.endswith(suffix)) or body != {"value": "STOP"}:
                    fake.problems.append(f"PUT {self.path} {body}")
                    self._reply(400, {})
                    return
                proc = fake.procs.get(name)
                if proc is not None and proc.poll() is None:
                    fake.stopped.add(name)
                    _kill_group(proc)
                self._reply(202)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        for p in self.procs.values():
            if p.poll() is None:
                _kill_group(p)
                p.wait()


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """End a job's whole process group (its command started it in a session of its own), as OpenPAI ends a job's
    container with everything in it."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:  # already gone
        pass
