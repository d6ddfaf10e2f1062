"""A local stand-in for the Lambda Invoke API, so continuation and fan-out run without AWS.

    python -m pgdrain_dev.lambda_standin --function functions/drain [--port 0] [--log FILE]

It serves ``POST /2015-03-31/functions/{name}/invocations`` on 127.0.0.1 (only), which is
what boto3 calls when ``AWS_ENDPOINT_URL_LAMBDA`` points here. Every function name maps to
the one function folder given. An ``Event`` invoke answers 202 at once and runs the
function's ``lambda_handler`` in a "container": a worker process that imports ``app.py``
once and then takes invocations one at a time, as a warm Lambda container does; a new one
starts when none is idle (up to ``--max-containers``). A ``RequestResponse`` invoke waits and
answers 200 with the result.

Each invocation is written as a JSON line to ``--log`` (start and end times, the event, the
result or error), which is how the tests and ``bench/backlog.py`` see drains start drains.
The containers get this process's environment plus ``AWS_ENDPOINT_URL_LAMBDA`` (here),
``AWS_LAMBDA_FUNCTION_NAME`` and placeholder credentials: nothing reaches AWS.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import unquote

ROOT = Path(__file__).resolve().parents[2]


class Container:
    """One worker process running the function, one invocation at a time."""

    def __init__(self, function_dir: Path, env: dict[str, str], output: Any = None):
        self.process = subprocess.Popen(
            [sys.executable, "-m", "pgdrain_dev.lambda_standin", "--container",
             str(function_dir)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=output, text=True, env=env,
            cwd=str(function_dir))
        self.lock = threading.Lock()

    def invoke(self, event: Any, function_name: str, timeout: float) -> dict[str, Any]:
        assert self.process.stdin and self.process.stdout
        self.process.stdin.write(json.dumps({"event": event, "function_name": function_name,
                                             "timeout": timeout}) + "\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"the container exited ({self.process.wait()})")
        answer: dict[str, Any] = json.loads(line)
        return answer

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.stdin.close()  # type: ignore[union-attr]
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        for pipe in (self.process.stdin, self.process.stdout):
            if pipe is not None and not pipe.closed:
                pipe.close()


class StandIn:
    """The server's state: containers, the invocation log, counters."""

    def __init__(self, function_dir: Path, *, timeout: float, max_containers: int,
                 log_path: Path | None, env: dict[str, str], quiet: bool = False):
        """``quiet``: the function's own output (its logs and metrics) goes nowhere."""
        self.function_dir = function_dir
        self.output = subprocess.DEVNULL if quiet else None
        self.timeout = timeout
        self.max_containers = max_containers
        self.log_path = log_path
        self.env = env
        self.idle: list[Container] = []
        self.all: list[Container] = []
        self.lock = threading.Lock()
        self.running = 0
        self.peak = 0
        self.invocations = 0
        self.refused = 0
        self.asked: Counter[str] = Counter()
        """Invokes asked for, by the event's ``reason`` (a drain's: ``fan-out``, ``continue``)
        or else its ``source``, the refused ones included."""
        self.refused_by: Counter[str] = Counter()
        """Invokes refused for want of a container (Lambda would throttle them, and retry an
        asynchronous one later), by the same key. They are not in the log."""

    def invoke(self, function_name: str, event: Any) -> dict[str, Any] | None:
        why = reason(event)
        with self.lock:
            self.asked[why] += 1
        container = self._container()
        if container is None:
            with self.lock:
                self.refused += 1
                self.refused_by[why] += 1
            return None
        started = time.time()
        try:
            answer = container.invoke(event, function_name, self.timeout)
        except Exception as exc:  # the container died: drop it
            answer = {"error": f"{type(exc).__name__}: {exc}"}
            container.close()
            with self.lock:
                self.all.remove(container)
        else:
            with self.lock:
                self.idle.append(container)
        finally:
            with self.lock:
                self.running -= 1
        self._log({"function": function_name, "event": event, "started": started,
                   "ended": time.time(), **answer})
        return answer

    def _container(self) -> Container | None:
        with self.lock:
            if self.idle:
                container = self.idle.pop()
            elif len(self.all) < self.max_containers:
                container = Container(self.function_dir, self.env, self.output)
                self.all.append(container)
            else:
                return None  # Lambda would throttle (TooManyRequestsException)
            self.running += 1
            self.invocations += 1
            self.peak = max(self.peak, self.running)
            return container

    def _log(self, record: dict[str, Any]) -> None:
        if self.log_path is None:
            return
        with self.lock, self.log_path.open("a") as out:
            out.write(json.dumps(record, default=str) + "\n")

    def close(self) -> None:
        for container in self.all:
            container.close()


def reason(event: Any) -> str:
    """Why an invocation was asked for: a drain's launch says (``fan-out``, ``continue``),
    else its source (``bench``, ``pgdrain.doorbell``, ``aws.events``)."""
    if isinstance(event, dict):
        return str(event.get("reason") or event.get("source") or "direct")
    return "direct"


def make_server(standin: StandIn, port: int = 0) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            parts = self.path.split("?")[0].strip("/").split("/")
            if len(parts) != 4 or parts[1] != "functions" or parts[3] != "invocations":
                self._answer(404, {"Type": "User", "message": f"no route {self.path}"})
                return
            name = unquote(parts[2])
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            try:
                event = json.loads(body or b"{}")
            except ValueError:
                self._answer(400, {"Type": "User", "message": "the payload is not JSON"})
                return
            if self.headers.get("X-Amz-Invocation-Type", "RequestResponse") == "Event":
                threading.Thread(target=standin.invoke, args=(name, event), daemon=True).start()
                self._answer(202, None)
                return
            answer = standin.invoke(name, event)
            if answer is None:
                self._answer(429, {"Type": "User", "message": "Rate Exceeded."})
            else:
                self._answer(200, answer.get("result", answer))

        def _answer(self, status: int, body: Any) -> None:
            data = b"" if body is None else json.dumps(body, default=str).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:
            pass

    return ThreadingHTTPServer(("127.0.0.1", port), Handler)


def container_main(function_dir: str) -> None:
    """A container: import the function once, then run invocations from stdin."""
    sys.path[:0] = [function_dir, str(ROOT)]
    out = sys.stdout
    sys.stdout = sys.stderr  # the function's prints and logs must not mix with answers
    import app  # type: ignore[import-not-found]

    from pgdrain_dev.context import LambdaContext

    for line in sys.stdin:
        request = json.loads(line)
        context = LambdaContext(request["function_name"].split(":")[-1], request["timeout"])
        try:
            answer: dict[str, Any] = {"result": app.lambda_handler(request["event"], context)}
        except Exception as exc:
            answer = {"error": f"{type(exc).__name__}: {exc}"}
        out.write(json.dumps(answer, default=str) + "\n")
        out.flush()


def standin_env(port: int, function_name: str = "pgdrain-drain") -> dict[str, str]:
    """The environment a container runs with, pointing boto3's Lambda client here."""
    return {**os.environ, "AWS_ENDPOINT_URL_LAMBDA": f"http://127.0.0.1:{port}",
            "AWS_LAMBDA_FUNCTION_NAME": function_name, "AWS_ACCESS_KEY_ID": "standin",
            "AWS_SECRET_ACCESS_KEY": "standin", "AWS_DEFAULT_REGION": "eu-west-1",
            "AWS_REGION": "eu-west-1",
            "PYTHONPATH": os.pathsep.join(filter(None, [
                str(ROOT / "layers" / "pgdrain"), str(ROOT / "dev"),
                os.environ.get("PYTHONPATH")]))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--container", metavar="FUNCTION_DIR", help=argparse.SUPPRESS)
    parser.add_argument("--function", default=str(ROOT / "functions" / "drain"))
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=120.0,
                        help="each invocation's timeout in seconds (the template's 120)")
    parser.add_argument("--max-containers", type=int, default=32)
    parser.add_argument("--log", type=Path)
    parser.add_argument("--quiet", action="store_true", help="drop the function's own output")
    args = parser.parse_args()
    if args.container:
        container_main(args.container)
        return
    standin = StandIn(Path(args.function).resolve(), timeout=args.timeout,
                      max_containers=args.max_containers, log_path=args.log, env={},
                      quiet=args.quiet)
    server = make_server(standin, args.port)
    port = server.server_address[1]
    standin.env = standin_env(port)
    print(f"AWS_ENDPOINT_URL_LAMBDA=http://127.0.0.1:{port}", flush=True)
    try:
        server.serve_forever()
    finally:
        standin.close()


if __name__ == "__main__":
    main()
