"""A running edgecost agent (`edgecost serve`), spoken to in Twirp JSON over its Unix socket or
over TCP with its token: store a model, profile it as a job with progress, solve."""

import base64
import http.client
import json
import os
import re
import socket
import sys
import time
from urllib.parse import urlparse

from edgecost.cli import EdgecostError

AGENT_ENV = "EDGECOST_AGENT"  # unix:PATH or http://HOST:PORT, as `edgecost --remote`
TOKEN_ENV = "EDGECOST_TOKEN"

_BYTE_UNITS = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
               "KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40}


def parse_bytes(text):
    """"4MB", "2.5MiB", "3000000B" -> bytes, as the CLI reads them."""
    match = re.fullmatch(r"\s*([0-9.]+)\s*([A-Za-z]*)\s*", str(text))
    unit = match.group(2).upper() if match else None
    if unit not in _BYTE_UNITS:
        raise ValueError(f"not a size: {text!r} (e.g. 4MB, 2.5MiB, 3000000B)")
    return int(float(match.group(1)) * _BYTE_UNITS[unit])


def runtime_budget_fields(text):
    """"1.5x" -> a multiple of the plain step; "120ms", "1.2s" -> seconds (ScheduleRequest fields)."""
    text = str(text).strip()
    if text.endswith("x"):
        return {"runtimeBudgetMultiple": float(text[:-1])}
    match = re.fullmatch(r"([0-9.]+)\s*(ms|s)", text)
    if not match:
        raise ValueError(f"not a runtime budget: {text!r} (e.g. 1.5x, 120ms, 1.2s)")
    return {"runtimeBudgetS": float(match.group(1)) / (1000 if match.group(2) == "ms" else 1)}


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path, timeout):
        super().__init__("localhost", timeout=timeout)
        self.socket_path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self.socket_path)


_DONE = ("STATE_SUCCEEDED", "STATE_FAILED", "STATE_CANCELLED")


class Agent:
    """address: "unix:/run/edgecost.sock" or "http://127.0.0.1:7070"; token: for TCP (default $EDGECOST_TOKEN)."""

    def __init__(self, address, token=None, timeout_s=600):
        self.address, self.timeout_s = address, timeout_s
        self.token = token if token is not None else os.environ.get(TOKEN_ENV, "")
        if address.startswith("unix:"):
            self.socket_path, self.host, self.port = address[len("unix:"):], None, None
        else:
            url = urlparse(address if "://" in address else "http://" + address)
            self.socket_path, self.host, self.port = None, url.hostname, url.port or 80

    def call(self, service, method, body):
        """One Twirp call; the response message as a dict. A Twirp error raises EdgecostError."""
        connection = (_UnixConnection(self.socket_path, self.timeout_s) if self.socket_path else
                      http.client.HTTPConnection(self.host, self.port, timeout=self.timeout_s))
        headers = {"Content-Type": "application/json"}
        if self.token:
            headers["Authorization"] = "Bearer " + self.token
        try:
            connection.request("POST", f"/twirp/edgecost.v1.{service}/{method}", json.dumps(body), headers)
            response = connection.getresponse()
            payload = response.read().decode()
        except OSError as error:
            raise EdgecostError(f"no agent at {self.address}: {error}") from error
        finally:
            connection.close()
        message = json.loads(payload) if payload else {}
        if response.status != 200:
            raise EdgecostError(f"{service}/{method} at {self.address}: {message.get('code', response.status)}: "
                                f"{message.get('msg', payload)}")
        return message

    # --- what plan() needs, as the local CLI does it
    def add_model(self, name, onnx_path):
        with open(onnx_path, "rb") as f:
            model = base64.b64encode(f.read()).decode()
        return self.call("CostService", "AddModel", {"name": name, "model": model})

    def has_measured_costs(self, model):
        try:
            self.call("CostService", "GetCostTable", {"model": model, "device": "this", "costSource": "measured"})
            return True
        except EdgecostError:
            return False

    def profile(self, model, accept_noisy=False, progress=True):
        """A profile job on the agent's device, followed to its end; its Job message."""
        job = self.call("JobService", "StartProfile", {"model": model, "acceptNoisy": accept_noisy})
        sequence, last_line = 0, ""
        while job.get("state") not in _DONE:
            events = self.call("JobService", "WatchEvents",
                               {"afterSequence": str(sequence), "waitS": 5, "jobId": job["id"]}).get("events", [])
            for event in events:
                sequence = max(sequence, int(event.get("sequence", 0)))
                job = event.get("job") or job
            if not events:  # the long poll ran out: ask directly
                job = self.call("JobService", "GetJob", {"id": job["id"]})
            line = f"profile job {job['id']}: {100 * job.get('progress', 0):.0f}% {job.get('message', '')}"
            if progress and line != last_line:
                print("edgecost agent:", line, file=sys.stderr, flush=True)
                last_line = line
            time.sleep(0.1)
        if job["state"] != "STATE_SUCCEEDED":
            raise EdgecostError(f"profile job {job['id']} on {self.address}: {job['state']}: {job.get('message', '')}")
        return job

    def solve(self, request):
        """Solve(ScheduleRequest) with the cost table it used attached, as `solve --out` writes it."""
        schedule = self.call("SolverService", "Solve", request)
        used = schedule.get("request", request)
        table_request = {k: used[k] for k in ("model", "device", "costSource", "batchSize", "derivation", "trainable")
                         if used.get(k)}
        if used.get("computeThreads"):
            table_request["threads"] = used["computeThreads"]
        schedule["costTable"] = self.call("CostService", "GetCostTable", table_request)
        return schedule
